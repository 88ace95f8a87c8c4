"""Numbers the guide's texts quote, read from the recorded data (never typed into the rules).

:func:`facts` answers the ``{name}`` fields of ``data/recommendations.yaml``;
:func:`compute_value` computes the decode ceiling (sm120lab.roofline) and the kernel time (the
bench file a rule names); :func:`here_notes` compares this machine with the guide (``--gpu auto``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..constants import SM120_SMEM_LIMIT
from ..paths import data_dir, repo_root

ARCH_SUFFIX_FILE = "flashinfer-{version}.json"


def _load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _cell(cells: list[dict], probe: str, toolkit: str, target: str) -> str:
    for c in cells:
        if c["probe"] == probe and c["toolkit"] == toolkit and c["target"] == target:
            if c["status"] == "accepted":
                return "stub (no MMA in SASS)" if c.get("stub") else "accepted (FP4 MMA in SASS)"
            return c["status"]
    return "not recorded"


def matrix_facts(path: Path | None = None) -> dict[str, str]:
    """Cells of ``data/archflags/matrix.json`` the guide quotes."""
    cells = _load(path or data_dir() / "archflags" / "matrix.json")["cells"]
    return {
        "nvfp4_120f_12_8": _cell(cells, "mma_nvfp4", "12.8", "sm_120f"),
        "nvfp4_120f_12_9": _cell(cells, "mma_nvfp4", "12.9", "sm_120f"),
        "nvfp4_120f_13_0": _cell(cells, "mma_nvfp4", "13.0", "sm_120f"),
        "nvfp4_121f_12_8": _cell(cells, "mma_nvfp4", "12.8", "sm_121f"),
        "nvfp4_120f_to_121": _cell(cells, "mma_nvfp4", "13.0", "compute_120f->sm_121"),
        "nvfp4_120a_to_121a": _cell(cells, "mma_nvfp4", "13.0", "compute_120a->sm_121a"),
        "stub_120_13_0": _cell(cells, "arch_conditional", "13.0", "sm_120"),
    }


def smem_overflow(version: str, patched: bool = False, data: Path | None = None) -> dict:
    """Overflowing SM120 grouped-GEMM kernel types of one recorded FlashInfer version.

    Returns:
        ``{"over": n, "total": n, "tiles": ["256x128x128", ...], "bytes": [...], "selection": str}``
        where a kernel type is one record of ``data/cutlass_smem/<version>.json`` (tile, epilogue,
        swap_ab, dtypes, output type) and "over" means ``kernel_smem > SM120_SMEM_LIMIT``.
    """
    from ..cutlass_smem import store

    d = store.load(version, patched, data)
    recs = d["records"]
    over = [r for r in recs if r["kernel_smem"] > SM120_SMEM_LIMIT]
    tiles = sorted({f"{r['tile_m']}x{r['tile_n']}x{r['tile_k']}" for r in over}, reverse=True)
    return {"over": len(over), "total": len(recs), "tiles": tiles,
            "bytes": sorted({r["kernel_smem"] for r in over}), "selection": d.get("selection", "all"),
            "max_bytes": max(r["kernel_smem"] for r in recs)}


def _count(o: dict) -> str:
    sel = "" if o["selection"] in ("all", None) else f" ({o['selection']})"
    return f"{o['over']} of {o['total']} kernel types{sel}"


def smem_facts() -> dict[str, str]:
    a, b = smem_overflow("0.6.5"), smem_overflow("0.7.4")
    pa = smem_overflow("0.6.5", patched=True)
    over_recs = [r for r in _load(data_dir() / "cutlass_smem" / "0.6.5.json")["records"]
                 if r["kernel_smem"] > SM120_SMEM_LIMIT]
    keys = {(r["tile_m"], r["tile_n"], r["tile_k"], r["act"], r["fusion"], r["swap_ab"]) for r in over_recs}
    patched = [r["kernel_smem"] for r in _load(data_dir() / "cutlass_smem" / "0.6.5-patched.json")["records"]
               if (r["tile_m"], r["tile_n"], r["tile_k"], r["act"], r["fusion"], r["swap_ab"]) in keys]
    return {
        "over_065": _count(a), "over_074": _count(b),
        "over_tiles": " and ".join(a["tiles"]),
        "over_bytes": f"{a['bytes'][0]:,}" if len(a["bytes"]) == 1 else "/".join(f"{x:,}" for x in a["bytes"]),
        "patched_bytes": "/".join(f"{x:,}" for x in sorted(set(patched))) if patched else "not recorded",
        "patched_max": f"{pa['max_bytes']:,}",
        "smem_limit": f"{SM120_SMEM_LIMIT:,}",
    }


def seed_patch_facts() -> dict[str, str]:
    """How the seed report's edits are classified in the patch kit's specs (0.6.5 + vLLM 0.17)."""
    import yaml

    specs = repo_root() / "sm120lab" / "patches" / "specs"
    entries = []
    for name in ("flashinfer_0_6_5.yaml", "vllm_0_17.yaml"):
        entries += yaml.safe_load((specs / name).read_text())["patches"]
    cls = [e["classification"] for e in entries]
    return {"seed_edits": str(len(entries)), "seed_harmful": str(cls.count("harmful")),
            "seed_noop": str(sum(c in ("no-op", "upstreamed", "documented-only") for c in cls)),
            "seed_needed": str(cls.count("needed"))}


def arch_suffix_facts() -> dict[str, str]:
    out = {}
    for v, key in (("0.6.5", "suffix_units_065"), ("0.7.4", "suffix_units_074")):
        p = data_dir() / "arch_suffix" / ARCH_SUFFIX_FILE.format(version=v)
        if not p.exists():
            out[key] = "not recorded"
            continue
        d = _load(p)
        same = sum(u["identical"] for u in d["units"])
        out[key] = f"{same} of {len(d['units'])}"
    p = data_dir() / "arch_suffix" / ARCH_SUFFIX_FILE.format(version="0.6.5")
    ptx = _load(p).get("ptx") if p.exists() else None
    if ptx:
        fa, ff = ptx["feature_instructions"]["120a"], ptx["feature_instructions"]["120f"]
        same = "the same" if fa == ff else "DIFFERENT"
        out["suffix_ptx"] = (f"{ptx['instructions']['120a']:,} vs {ptx['instructions']['120f']:,} PTX instructions "
                             f"(120a vs 120f) with {same} {fa['mma.sync']} block-scaled MMAs and TMA, barrier and "
                             "memory instructions")
    env_lines = [u for u in _load(p)["python_uses"] if u.startswith("flashinfer/jit/env.py")] if p.exists() else []
    out["jit_cache_key"] = env_lines[0].split(": ", 1)[0] if env_lines else "flashinfer/jit/env.py"
    return out


def correctness_facts() -> dict[str, str]:
    d = _load(data_dir() / "correctness" / "h200_moe_check.json")
    rows = [b for run in d["runs"] for b in run["backends"] if b["backend"] == "torch-bf16"]
    errs = [b["rel_fro"] for b in rows if b.get("rel_fro") is not None]
    verdicts = sorted({b["verdict"] for b in rows})
    return {"h200_bf16_rel": f"{min(errs):.2%}-{max(errs):.2%}" if errs else "not recorded",
            "h200_bf16_verdict": "/".join(verdicts) or "not recorded"}


def aot_facts() -> dict[str, str]:
    d = _load(data_dir() / "triton_aot" / "sm120.json")
    rows = [r for r in d["rows"] if r.get("cc") == 120]
    fit = sum(bool(r.get("fits_sm120")) for r in rows)
    native = sum(r.get("n_nvfp4_mma", 0) > 0 for r in rows)
    return {"aot_fit": f"{fit} of {len(rows)} sm_120 configs fit, {native} use the NVFP4 MMA; Triton {d['triton']}"}


def published_facts() -> dict[str, str]:
    """Per GPU, the published decode numbers of ``data/published/tok_s.csv`` in one line
    (``published_rtx_pro_6000`` ...): single-user rows when there are any, else all rows."""
    import csv
    from collections import defaultdict

    rows = list(csv.DictReader((data_dir() / "published" / "tok_s.csv").open()))
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_gpu[r["gpu"]].append(r)
    out = {}
    for gpu, rs in by_gpu.items():
        ones = [r for r in rs if r["concurrency"] == "1"] or rs
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in ones:
            groups[(r["n_gpus"], r["model"], r["concurrency"], r["tok_s_basis"])].append(r)
        parts = []
        for (n, model, conc, basis), grp in groups.items():
            ok = [f"{r['backend']} {r['tok_s_low']}" + (f"-{r['tok_s_high']}" if r["tok_s_high"] != r["tok_s_low"] else "")
                  for r in grp if r["tok_s_low"]]
            bad = [r["backend"] for r in grp if r["correct_output"] == "no"]
            text = f"{n}x {model}, {conc} user(s), tok/s {basis.replace('_', ' ')}: " + ", ".join(ok)
            if bad:
                text += "; no correct output: " + ", ".join(bad)
            parts.append(text)
        out[f"published_{gpu.replace('-', '_')}"] = "; ".join(parts)
    for r in rows:  # the seed's two FlashInfer CUTLASS builds, single user
        if r["gpu"] == "rtx-pro-6000" and r["concurrency"] == "1" and r["backend"].startswith("FlashInfer CUTLASS 12"):
            key = "seed_" + r["backend"].rsplit(" ", 1)[1]
            rng = r["tok_s_low"] + (f"-{r['tok_s_high']}" if r["tok_s_high"] != r["tok_s_low"] else "")
            out[key] = f"{rng} tok/s (CUDA {r['cuda']})"
    return out


class Facts(dict):
    """The facts; a name whose data file is missing or unreadable reads "(not recorded)"."""

    def __missing__(self, key: str) -> str:
        return "(not recorded)"


@lru_cache(maxsize=1)
def _facts_cached(stamp: tuple) -> dict[str, str]:
    import yaml

    out: dict[str, str] = {}
    for fn in (matrix_facts, smem_facts, seed_patch_facts, arch_suffix_facts, correctness_facts, aot_facts,
               published_facts):
        try:
            out.update(fn())
        except (OSError, UnicodeDecodeError, KeyError, IndexError, ValueError, TypeError, yaml.YAMLError):
            continue  # its names then read "(not recorded)"
    return out


def facts() -> Facts:
    """Every ``{name}`` the rules may use, from the recorded data (cached per data-file mtimes)."""
    files = sorted(p for p in data_dir().rglob("*") if p.is_file() and "runs" not in p.parts)
    return Facts(_facts_cached(tuple((str(p), p.stat().st_mtime) for p in files)))


# ----------------------------------------------------------------------------------------------
# computed values


def published_yaml(name: str) -> dict:
    """``data/published/<name>`` parsed (once per file version, :func:`~sm120lab.recommend.core.read_yaml`).

    Raises:
        ValueError: ``data: cannot read ...``.
    """
    import yaml

    from .core import read_yaml

    path = data_dir() / "published" / name
    try:
        return read_yaml(path) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"data: cannot read {path}: {exc}") from None


def checkpoint_precision(checkpoint: str, kv_cache: str = "fp8"):
    """``(Precision, text)``: what the published checkpoint stores in FP4 and what at 16 bits
    (``data/published/checkpoints.yaml``); a component whose format is unknown takes the
    ``linear-quantized`` plan's format, and the text says it was assumed."""
    from ..roofline import precision_plan
    from ..roofline.decode import Precision

    base = precision_plan("linear-quantized", "nvfp4", kv_cache=kv_cache)
    doc = published_yaml("checkpoints.yaml")
    entry = next((c for c in doc.get("checkpoints", []) if c.get("id") == checkpoint), None)
    if entry is None:
        return base, f"{checkpoint}: no recorded layer formats; counted as the linear-quantized plan"
    fmts, groups = {}, {}
    for comp, info in (entry.get("components") or {}).items():
        f = str((info or {}).get("format", "unknown"))
        if f == "unknown":
            f, tag = getattr(base, _FIELD.get(comp, comp)), "assumed"
        elif f == "n/a":
            continue
        else:
            tag = "stated" if (info or {}).get("basis") == "stated" else "inferred"
        fmts[comp] = f
        groups.setdefault(("FP4" if f in ("nvfp4", "mxfp4") else "16-bit" if f in ("bf16", "fp16") else f.upper()), []).append(f"{comp.replace('_', ' ')} ({tag})")
    kw = {_FIELD.get(c, c): f for c, f in fmts.items() if _FIELD.get(c, c) in Precision.__dataclass_fields__}
    prec = Precision(**{**base.__dict__, **kw})
    text = "; ".join(f"{g}: {', '.join(v)}" for g, v in sorted(groups.items()))
    return prec, f"{checkpoint} ({entry.get('url', '')}): {text}"


_FIELD = {"routed_experts": "experts", "shared_expert": "shared"}


def allreduce_latency_us(gpu: str) -> tuple[float, str]:
    """The cited latency of one small all-reduce over PCIe (``data/published/latency.yaml``): the
    median of NCCL at one token's hidden state (bf16, 8 KB) on SM12x GPUs, fewest GPUs first.

    Returns:
        ``(microseconds, "<what> (<url>)")``; ``(0.0, reason)`` when none is recorded.
    """
    doc = published_yaml("latency.yaml")
    rows = [f for f in doc.get("figures", []) if str(f.get("sm")) in ("120", "121") and f.get("implementation") == "nccl"
            and f.get("message_bytes") == 8192 and isinstance(f.get("latency_us"), dict) and "p50" in f["latency_us"]]
    if not rows:
        return 0.0, "no cited PCIe all-reduce latency recorded"
    r = min(rows, key=lambda f: (f.get("gpu") != gpu, f.get("n_gpus", 99)))
    return float(r["latency_us"]["p50"]), (f"{r['latency_us']['p50']:g} us median per all-reduce of 8 KB with NCCL "
                                           f"on {r['n_gpus']}x {r['gpu']} over PCIe ({r['url']})")


@dataclass(frozen=True)
class CeilingAnswer:
    """The guide's decode ceiling for a setup, and what it counts (one computation for every page)."""

    ceiling: Any             # sm120lab.roofline.Ceiling, with the PCIe all-reduce latency
    without_latency: Any     # the same without it
    precision: Any           # sm120lab.roofline.Precision read from the checkpoint
    counted: str             # "what is FP4, what 16-bit" with the checkpoint's source
    latency_us: float        # per collective and pipeline hop
    latency_text: str

    @property
    def per_user_tok_s(self) -> float:
        return self.ceiling.per_user_tok_s


#: the label of the guide's basis, printed next to every number computed on it (notebook 04, `sm120lab roofline`)
GUIDE_BASIS = "guide basis: the checkpoint's own FP4/16-bit split, with all-reduce latency"


def guide_basis(kv_cache: str = "fp8"):
    """The decision guide's :class:`~sm120lab.roofline.basis.Basis`: each model's checkpoint
    (:func:`checkpoint_of`) counted in its own layer formats (:func:`checkpoint_precision`), and on
    an SM12x GPU over PCIe the cited latency of each all-reduce and pipeline hop
    (:func:`allreduce_latency_us`); on other GPUs no latency is cited, and the label says so."""
    from ..roofline.basis import Basis

    def precision_for(model):
        return checkpoint_precision(checkpoint_of(model.name), kv_cache)[0]

    def latency_for(spec, n_gpus):
        if not str(spec.compute_capability).startswith("12.") or spec.nvlink_GBps_per_dir:
            return None
        lat, _ = allreduce_latency_us(spec.gpu)
        return lat or None

    return Basis(GUIDE_BASIS, precision_for, latency_for, counts_latency=True,
                 formats="the checkpoint's own FP4/16-bit split")


def ceiling_of(gpu: str, setup) -> CeilingAnswer:
    """Decode ceiling of ``setup`` on ``gpu`` (sm120lab.roofline, datasheet bandwidth) on the guide's
    basis (:func:`guide_basis`): the checkpoint's real layer formats and the cited per-collective PCIe
    latency.

    Raises:
        ValueError: an unknown model (``model: ...``) or a TP/PP the model refuses.
    """
    from ..roofline import ceiling, get_gpu, get_model

    try:
        model = get_model(setup.model)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"model: {exc}") from None
    ckpt = checkpoint_of(setup.model)
    kv = "fp8" if setup.kv_cache_dtype.startswith("fp8") else "bf16"
    prec, counted = checkpoint_precision(ckpt, kv)
    basis, spec = guide_basis(kv), get_gpu(gpu)
    lat = basis.latency_us(spec, setup.n_gpus)
    lat_text = allreduce_latency_us(gpu)[1] if lat else ""
    try:
        kw = dict(tp=setup.tp, pp=setup.pp, batch=setup.users, context=setup.context)
        c = basis.ceiling(model, spec, **kw)
        c0 = ceiling(model, spec, prec, **kw)
    except ValueError as exc:
        raise ValueError(f"tp/--pp: {exc} ({gpu}, TP{setup.tp} PP{setup.pp})") from None
    return CeilingAnswer(c, c0, prec, counted, lat, lat_text)


def ceiling_value(gpu: str, setup) -> tuple[str, str]:
    """``(value, extra why)`` of the ceiling item (:func:`ceiling_of`)."""
    from ..roofline import get_model

    ca = ceiling_of(gpu, setup)
    c = ca.ceiling
    value = (f"{c.per_user_tok_s:.0f} tok/s per user at {setup.users} user{'s' if setup.users > 1 else ''} "
             f"({setup.model}, {setup.n_gpus}x {gpu}, TP{setup.tp} PP{setup.pp}, {c.bound}-bound)")
    if not c.fits:
        value += f"; does NOT fit: {c.weights_per_gpu_GB:.1f} GB of weights per GPU"
    n_ar = 2 * get_model(setup.model).n_layers if setup.tp > 1 else 0
    extra = f"Counted as: {ca.counted}."
    if ca.latency_us:
        extra += (f" Each of the {n_ar} all-reduces per token (2 per layer at TP{setup.tp}) and each pipeline hop "
                  f"costs {ca.latency_text}; without that latency the ceiling would be "
                  f"{ca.without_latency.per_user_tok_s:.0f} tok/s.")
    pub = _published_ratio(gpu, setup, c.per_user_tok_s)
    if pub:
        extra += " " + pub
    return value, extra


def _published_ratio(gpu: str, setup, ceiling_tok_s: float) -> str:
    """Published tok/s for the same setup as a share of the ceiling (data/published/tok_s.csv)."""
    import csv

    path = data_dir() / "published" / "tok_s.csv"
    try:
        rows = list(csv.DictReader(path.open()))
    except (OSError, UnicodeDecodeError, csv.Error):
        return ""
    parts = []
    for r in rows:
        try:
            same = (r["gpu"] == gpu and r["model"] == setup.model and int(r["tp"]) == setup.tp
                    and int(r["pp"]) == setup.pp and int(r["concurrency"]) == setup.users
                    and r["tok_s_basis"].startswith("per_user") and r["correct_output"] == "yes")
        except (KeyError, ValueError):
            continue
        if same:
            from ..roofline.published import reported_tok_s

            mid = (float(r["tok_s_low"]) + float(r["tok_s_high"])) / 2
            parts.append(f"{r['backend']} {reported_tok_s(r['tok_s_low'], r['tok_s_high'])} = "
                         f"{100 * mid / ceiling_tok_s:.0f}%")
    return ("Published for this setup (data/published/tok_s.csv): " + ", ".join(parts) + ".") if parts else ""


def kernel_bench_for(model: str) -> str:
    """The newest recorded H200 MoE bench file of ``model`` (``data/bench/moe_h200_*.json`` whose
    ``model`` is it; :func:`sm120lab.roofline.lesson.newest_bench_file`, as notebook 04 picks it), as a
    repo-relative path.

    Raises:
        ValueError: none recorded for that model (``model: ...``).
    """
    from ..roofline.lesson import newest_bench_file
    from ..roofline.measured import bench_files

    path = newest_bench_file([p for p in bench_files() if p.name.startswith("moe_h200_")], model=model)
    if path is None:
        raise ValueError(f"model: no H200 MoE bench recorded for {model!r} in data/bench")
    return path.relative_to(repo_root()).as_posix()


def kernel_time_value(source: str) -> tuple[str, str]:
    """Triton W4A16 MoE layer time at T=1 (CUDA graph) and its ratio to bf16 grouped GEMM."""
    s = kernel_summary(repo_root() / source)
    value = (f"{s['us_T1']:.0f} us per MoE layer at T=1 on {s['gpu']} ({s['vs_bf16_T1']:.2f}x bf16 grouped GEMM); "
             f"{s['vs_bf16_Tmax']:.2f}x at T={s['Tmax']}")
    if s["vs_marlin"]:
        ahead = [t for t, v in s["vs_marlin"].items() if v > 1.0]
        behind = [t for t, v in s["vs_marlin"].items() if v <= 1.0]
        value += ("; vs vLLM's Marlin (Marlin time / ours, same weights and routings): "
                  + ", ".join(f"T={t} {v:.2f}x" for t, v in s["vs_marlin"].items())
                  + (f" (ahead at T={','.join(map(str, ahead))}" if ahead else " (ahead at no T")
                  + (f"; behind at T={','.join(map(str, behind))})" if behind else ")"))
    return value, ""


def kernel_summary(path: Path, contender: str = "triton-w4a16", baseline: str = "torch-bf16-grouped") -> dict:
    """The numbers a MoE bench file (``sm120lab bench moe``) gives for one contender.

    Returns:
        ``{"gpu", "us_T1", "vs_bf16_T1", "Tmax", "vs_bf16_Tmax", "pct_copy_bw": {T: %}, "copy_GBps",
        "vs_peer": {T: ratio}}`` where ``vs_bf16 = t(baseline) / t(contender)`` (> 1: the contender is
        faster), ``vs_peer`` the same against the triton_kernels peer (:data:`sm120lab.bench.peer.PEER`; empty
        when the file has no peer rows), ``vs_marlin`` against vLLM's Marlin (``vllm-marlin`` rows) and ``pct_copy_bw`` is the whole layer's achieved bytes/s over the
        measured copy bandwidth.
    """
    from ..bench.peer import PEER
    from ..bench.records import load_bench, ratios_vs

    d = load_bench(path)
    rows = d.rows_for(op="moe", timing="cuda_graph")

    def t(name, T):
        hit = [r.us_median for r in rows if r.contender == name and r.T == T]
        return hit[0] if hit else None

    Ts = sorted({r.T for r in rows if r.contender == contender and t(baseline, r.T)})
    return {
        "gpu": d.gpu.replace("NVIDIA ", ""),
        "us_T1": t(contender, 1),
        "vs_bf16_T1": t(baseline, 1) / t(contender, 1),
        "Tmax": Ts[-1],
        "vs_bf16_Tmax": t(baseline, Ts[-1]) / t(contender, Ts[-1]),
        "pct_copy_bw": {r.T: r.pct_copy_bw for r in rows if r.contender == contender},
        "copy_GBps": d.ceilings["copy_GBps"],
        "vs_peer": {T: t(PEER, T) / t(contender, T) for T in Ts if t(PEER, T)},
        "vs_marlin": {T: v for T, v in ratios_vs(d, "vllm-marlin", contender).items() if T in Ts},
    }


def checkpoint_of(model: str) -> str:
    """The checkpoint ``vllm serve`` loads for a model preset (rules ``checkpoints``).

    Raises:
        ValueError: a preset without a checkpoint (``model: ...``).
    """
    from .core import load_rules

    ck = (load_rules().get("checkpoints") or {}).get(model)
    if not ck:
        raise ValueError(f"model: no checkpoint recorded for {model!r} in data/recommendations.yaml (checkpoints)")
    return str(ck)


def compute_value(kind: str, gpu, setup, source: str) -> tuple[str, str]:
    """``(value, extra why)`` of a computed rule (``compute: ceiling | kernel_time``)."""
    g = getattr(gpu, "value", gpu)
    if kind == "ceiling":
        return ceiling_value(g, setup)
    if kind == "kernel_time":
        return kernel_time_value(source)
    raise ValueError(f"compute: expected ceiling or kernel_time, got {kind!r}")


# ----------------------------------------------------------------------------------------------
# this machine (--gpu auto)


def detect_gpu(machine: dict) -> str:
    """``rtx-pro-6000`` / ``rtx-5090`` / ``dgx-spark`` from an envinfo record.

    Raises:
        ValueError: no SM120/SM121 GPU on this machine (the message says what was found).
    """
    gpu = machine.get("gpu") or {}
    if not gpu.get("available"):
        raise ValueError(f"--gpu auto: no CUDA GPU visible ({gpu.get('reason', 'none found')}); "
                         "pass --gpu rtx-pro-6000|rtx-5090|dgx-spark")
    cc, name = str(gpu.get("compute_capability")), str(gpu.get("name", ""))
    if cc == "12.1":
        return "dgx-spark"
    if cc == "12.0":
        return "rtx-5090" if "5090" in name else "rtx-pro-6000"
    raise ValueError(f"--gpu auto: this machine has {name} (compute capability {cc}), not SM120/SM121; "
                     "pass --gpu rtx-pro-6000|rtx-5090|dgx-spark")


def here_notes(machine: dict, gpu) -> dict[str, str]:
    """What this machine has, per rule id (only where it can be read)."""
    from packaging.version import InvalidVersion, Version

    def ver(text):
        try:
            return Version(str(text))
        except (InvalidVersion, TypeError):
            return None

    notes: dict[str, str] = {}
    nvccs = [ver(n.get("version")) for n in machine.get("nvcc") or []]
    nvccs = [v for v in nvccs if v is not None]
    if nvccs:
        top = max(nvccs)
        notes["toolkit"] = f"nvcc {top}: " + ("ok" if top >= Version("12.9") else "too old for 120f / sm_121")
    else:
        notes["toolkit"] = "no nvcc found (FlashInfer's JIT needs one)"
    torch_v = (machine.get("packages") or {}).get("torch")
    cuda_rt = (machine.get("gpu") or {}).get("torch_cuda_runtime")
    if torch_v:
        notes["toolkit"] += f"; torch {torch_v}" + (f" (CUDA {cuda_rt} runtime)" if cuda_rt else "")
    env = machine.get("env") or {}
    for rid, var in (("flashinfer-arch-list", "FLASHINFER_CUDA_ARCH_LIST"), ("torch-arch-list", "TORCH_CUDA_ARCH_LIST")):
        val = env.get(var)
        if val is None:
            notes[rid] = "unset"
        else:
            bare = any(a.startswith("12.") and a[-1].isdigit() for a in val.replace(";", " ").split())
            notes[rid] = f"{val!r}" + (": bare 12.x builds compute_12x (no FP4 MMA)" if bare else "")
    pk = machine.get("packages") or {}
    fi, vl = pk.get("flashinfer-python"), pk.get("vllm")
    notes["versions"] = (f"vllm {vl or 'not installed'}, flashinfer-python {fi or 'not installed'}, "
                         f"torch {pk.get('torch') or 'not installed'}")
    for var in ("NCCL_CUMEM_ENABLE", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_NVFP4_GEMM_BACKEND"):
        if var in env:
            notes["env-vars"] = notes.get("env-vars", "") + f"{var}={env[var]} "
    if "env-vars" not in notes:
        notes["env-vars"] = "none of them set"
    g = machine.get("gpu") or {}
    if g.get("available"):
        notes["ceiling"] = f"{g.get('device_count', 1)}x {g.get('name')}, driver {g.get('driver')}"
    return {k: v.strip() for k, v in notes.items()}
