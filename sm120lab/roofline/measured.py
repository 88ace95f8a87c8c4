"""Our measured MoE-layer sweeps (``data/bench/moe_<gpu>_<date>.json``, written by the Triton
kernel benchmark) turned into what they mean for decode.

Schema (shared contract): ``{"env", "command", "model", "shape": {E,k,H,I}, "ceilings":
{"copy_GBps", "bf16_TFLOPs"}, "rows": [{"T", "contender", "op", "us_median", "us_p10",
"us_p90", "n_reps", "weight_bytes", "GBps", "TFLOPs", "pct_copy_bw", "pct_bf16"}]}``.

For op == 'moe' rows (one full MoE layer for T tokens): a decode step with T concurrent
sequences runs n_layers such layers, so the MoE layers ALONE allow
per-user tok/s = 1 / (n_layers * us) and aggregate = T / (n_layers * us); the per-token MoE
time is n_layers * us / T. This is MoE-layer-only: attention, lm_head, collectives and launch
gaps come on top. ``timing`` says whether the row was timed as CUDA-graph replay ('graph') or
eager launches ('eager'); the benchmark records both for some contenders.
"""

from __future__ import annotations

import json
from pathlib import Path

from sm120lab.paths import data_dir

ROW_KEYS = ("T", "contender", "op", "us_median")


def bench_files(directory: str | Path | None = None) -> list[Path]:
    directory = Path(directory) if directory is not None else data_dir() / "bench"
    return sorted(directory.glob("moe_*.json"))


def load_bench(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    for key in ("model", "shape", "rows"):
        if key not in data:
            raise ValueError(f"{path}: missing top-level key {key!r} (bench schema)")
    for i, row in enumerate(data["rows"]):
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise ValueError(f"{path}: rows[{i}] misses {missing}")
    return data


def moe_layer_table(files: list[Path], n_layers_by_model: dict[str, int]):
    """One row per (file, contender, T) of op == 'moe': us, per-token MoE time, tok/s allowed."""
    import pandas as pd

    recs = []
    for f in files:
        data = load_bench(f)
        model = str(data["model"]).lower()
        if model not in n_layers_by_model:
            continue
        L = n_layers_by_model[model]
        gpu = (data.get("env") or {}).get("gpu")
        gpu_name = gpu.get("name") if isinstance(gpu, dict) else gpu
        for row in data["rows"]:
            if row.get("op") != "moe" or not row.get("us_median") or row["us_median"] <= 0:
                continue
            T, us = float(row["T"]), float(row["us_median"])
            step_s = L * us * 1e-6
            timing = str(row.get("timing", ""))
            recs.append({
                "file": f.name, "gpu": gpu_name, "model": model, "contender": row["contender"],
                "timing": "graph" if timing.startswith("cuda_graph") else ("eager" if timing else ""),
                "T": int(row["T"]), "us_median": us, "us_p10": row.get("us_p10"),
                "us_p90": row.get("us_p90"), "GBps": row.get("GBps"),
                "pct_copy_bw": row.get("pct_copy_bw"),
                "moe_ms_per_step": step_s * 1e3, "moe_us_per_token": step_s * 1e6 / T,
                "moe_only_per_user_tok_s": 1.0 / step_s, "moe_only_aggregate_tok_s": T / step_s,
            })
    return pd.DataFrame.from_records(recs)


def measured_active_experts(files: list[Path]) -> list[dict]:
    """The benchmark's mean distinct experts per T (``active_experts``), per file."""
    out = []
    for f in files:
        data = load_bench(f)
        for t, n in (data.get("active_experts") or {}).items():
            out.append({"file": f.name, "model": str(data["model"]).lower(), "T": int(t),
                        "active_experts": float(n), **{k: data["shape"][k] for k in ("E", "k")}})
    return out
