"""Nsight Compute reports of the MoE layer, read back: what bounds each kernel, per (contender, T).

``scripts/ncu_moe.py`` runs one warmed-up layer call per window under ``ncu --csv --page details``
(sections SpeedOfLight, Occupancy, WarpStateStats, LaunchStats, MemoryWorkloadAnalysis), each window
opened by a ``spin_kernel`` marker. :func:`read_details` parses that CSV (ncu prints its own warnings
and the program's stderr lines before the header), :func:`windows` cuts the kernel sequence at the
markers and pairs it with the windows JSON, and :func:`summarize` keeps per kernel the numbers a
bound is read from:

    bound = "DRAM"     when DRAM throughput >= 60 % of peak
            "latency"  when both DRAM and SM throughput < 60 % (ncu's own SOL threshold)
            "compute"  when SM throughput >= 60 % > DRAM

plus achieved vs theoretical occupancy, what limits the theoretical one, registers and shared memory
per block, waves per SM, warp cycles per issued instruction and ncu's dominant-stall sentence.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

MARKER = "spin_kernel"
SOL_PCT = 60.0  # ncu's SpeedOfLight rule: below 60 % of peak on both axes reads as latency-bound

_KEEP = {
    "Duration": ("duration_us", None),  # scaled by its own unit (ncu picks ns, us, ms or s per row): _TIME_TO_US
    "DRAM Throughput": ("dram_pct", 1.0),
    "Compute (SM) Throughput": ("sm_pct", 1.0),
    "Achieved Occupancy": ("achieved_occupancy_pct", 1.0),
    "Theoretical Occupancy": ("theoretical_occupancy_pct", 1.0),
    "Registers Per Thread": ("registers", 1.0),
    "Dynamic Shared Memory Per Block": ("dyn_smem_bytes", 1.0),
    "Static Shared Memory Per Block": ("static_smem_bytes", 1.0),
    "Waves Per SM": ("waves_per_sm", 1.0),
    "Warp Cycles Per Issued Instruction": ("warp_cycles_per_issue", 1.0),
    "L2 Hit Rate": ("l2_hit_pct", 1.0),
}


_TIME_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
               "second": 1e6}


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def read_details(path: str | Path) -> list[dict]:
    """Kernels in launch order (``path`` may be xz-compressed, ``.csv.xz``): ``{"id", "name", "block", "grid", <_KEEP fields>, "limiter", "stall"}``.

    Durations are converted to us from each row's own unit: ncu prints ns, us or ms per kernel unless run with
    ``--print-units base``, so one report can mix them.

    Raises:
        ValueError: no ``"ID",...`` header in the file (not an ``ncu --csv --page details`` report), or a
            duration in a unit other than ns, us, ms or s.
    """
    path = Path(path)
    if path.suffix == ".xz":
        import lzma

        lines = lzma.open(path, "rt", errors="replace").read().splitlines()
    else:
        lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu --csv --page details header")
    kernels: dict[str, dict] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        k = kernels.setdefault(r["ID"], {"id": int(r["ID"]), "name": r["Kernel Name"], "block": r["Block Size"],
                                         "grid": r["Grid Size"], "limiter": None, "stall": None})
        field = _KEEP.get(r["Metric Name"])
        if field and r["Section Name"] != "Memory Workload Analysis":
            v = _num(r["Metric Value"])
            scale = field[1]
            if scale is None:
                unit = (r.get("Metric Unit") or "").strip()
                if unit not in _TIME_TO_US:
                    raise ValueError(f"{path}: kernel {r['ID']} {r['Metric Name']} has unit {unit!r}; expected one of "
                                     f"{', '.join(_TIME_TO_US)}")
                scale = _TIME_TO_US[unit]
            if v is not None:
                k[field[0]] = v * scale
        desc = r.get("Rule Description") or ""
        if r.get("Rule Name") == "TheoreticalOccupancy" and "limited by" in desc:
            k["limiter"] = desc.split("limited by", 1)[1].strip().rstrip(".")
        if r.get("Rule Name") == "CPIStall" and "cycles being stalled" in desc and k["stall"] is None:
            k["stall"] = re.split(r"(?<=\.)\s", desc, maxsplit=1)[0]
    return sorted(kernels.values(), key=lambda k: k["id"])


def bound(k: dict) -> str:
    """``DRAM``, ``compute`` or ``latency`` from the SpeedOfLight percentages (module docstring)."""
    dram, sm = k.get("dram_pct") or 0.0, k.get("sm_pct") or 0.0
    if dram >= SOL_PCT:
        return "DRAM"
    return "compute" if sm >= SOL_PCT else "latency"


def windows(kernels: list[dict], order: list[dict]) -> list[dict]:
    """Pair the kernels between markers with the recorded window order (``scripts/ncu_moe.py --windows``).

    Raises:
        ValueError: the number of marked windows differs from ``order``.
    """
    groups: list[list[dict]] = []
    for k in kernels:
        if MARKER in k["name"]:
            groups.append([])
        elif groups:
            groups[-1].append(k)
    if len(groups) != len(order):
        raise ValueError(f"{len(groups)} marked windows in the report, {len(order)} in the window list")
    return [{**w, "kernels": g} for w, g in zip(order, groups)]


def short_name(name: str) -> str:
    """A kernel's name without template arguments and parameter lists (``marlin_moe_wna16::Marlin``)."""
    base = re.sub(r"<.*", "", re.sub(r"\(.*", "", name)).strip()
    return base.replace("void ", "").replace("at::native::", "").replace("native::", "")


def summarize(wins: list[dict], min_us: float = 2.0) -> list[dict]:
    """One row per (window, kernel of at least ``min_us``): the numbers :data:`_KEEP` names and the bound."""
    rows = []
    for w in wins:
        total = sum(k.get("duration_us") or 0.0 for k in w["kernels"])
        for k in w["kernels"]:
            if (k.get("duration_us") or 0.0) < min_us:
                continue
            rows.append({"model": w["model"], "T": w["T"], "contender": w["contender"],
                         "plan": "/".join(str(w[x]) for x in ("path", "w13", "w2") if x in w) or None,
                         "kernel": short_name(k["name"]), "grid": k["grid"], "block": k["block"],
                         **{f: k.get(f) for f, _ in _KEEP.values()}, "pct_of_window": 100 * k["duration_us"] / total,
                         "bound": bound(k), "occupancy_limiter": k["limiter"], "dominant_stall": k["stall"]})
    return rows
