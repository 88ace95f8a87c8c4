"""Our measured MoE-layer sweeps (``data/bench/moe_<gpu>_<date>.json``, written by the Triton
kernel benchmark) turned into what they mean for decode.

The files are read through their typed record (:func:`sm120lab.bench.records.load_bench`, a
:class:`~sm120lab.bench.records.BenchDoc` of :class:`~sm120lab.bench.records.BenchRow`).

For op == 'moe' rows (one full MoE layer for T tokens): a decode step with T concurrent
sequences runs n_layers such layers, so the MoE layers ALONE allow
per-user tok/s = 1 / (n_layers * us) and aggregate = T / (n_layers * us); the per-token MoE
time is n_layers * us / T. This is MoE-layer-only: attention, lm_head, collectives and launch
gaps come on top. ``timing`` says whether the row was timed as CUDA-graph replay ('graph') or
eager launches ('eager'); the benchmark records both for some contenders.
"""

from __future__ import annotations

from pathlib import Path

from sm120lab.bench.records import Timing, load_bench
from sm120lab.paths import data_dir


def bench_files(directory: str | Path | None = None) -> list[Path]:
    directory = Path(directory) if directory is not None else data_dir() / "bench"
    return sorted(directory.glob("moe_*.json"))


def moe_layer_table(files: list[Path], n_layers_by_model: dict[str, int]):
    """One row per (file, contender, T) of op == 'moe': us, per-token MoE time, tok/s allowed."""
    import pandas as pd

    recs = []
    for f in files:
        data = load_bench(f)
        model = data.model.lower()
        if model not in n_layers_by_model:
            continue
        L = n_layers_by_model[model]
        for row in data.rows_for(op="moe", timing=None):
            if row.us_median <= 0:
                continue
            T, us = float(row.T), row.us_median
            step_s = L * us * 1e-6
            recs.append({
                "file": f.name, "gpu": data.gpu, "model": model, "contender": row.contender,
                "timing": {Timing.CUDA_GRAPH: "graph", Timing.EAGER: "eager", None: ""}[row.timing],
                "T": row.T, "us_median": us, "us_p10": row.us_p10,
                "us_p90": row.us_p90, "GBps": row.GBps,
                "pct_copy_bw": row.pct_copy_bw,
                "moe_ms_per_step": step_s * 1e3, "moe_us_per_token": step_s * 1e6 / T,
                "moe_only_per_user_tok_s": 1.0 / step_s, "moe_only_aggregate_tok_s": T / step_s,
            })
    return pd.DataFrame.from_records(recs)


def measured_active_experts(files: list[Path]) -> list[dict]:
    """The benchmark's mean distinct experts per T (``active_experts``), per file."""
    out = []
    for f in files:
        data = load_bench(f)
        for t, n in data.active_experts.items():
            out.append({"file": f.name, "model": data.model.lower(), "T": int(t),
                        "active_experts": float(n), **{k: data.shape[k] for k in ("E", "k")}})
    return out
