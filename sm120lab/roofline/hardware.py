"""GPU specifications from ``data/hardware.csv`` (one row per GPU, every value with its source).

Datasheet columns and measured columns are kept apart. Measured values come only from recorded
runs: :func:`load_gpus` fills ``measured_copy_GBps`` / ``measured_bf16_TFLOPs`` from the
``ceilings`` of the newest ``data/bench/moe_<gpu>_<date>.json`` of each GPU (today: the H200);
``data/hardware.csv`` keeps those columns for GPUs measured by other means.
Values whose source starts with ``UNSOURCED`` are derived, not read from a datasheet.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from sm120lab.paths import data_dir


class Bandwidth(str, Enum):
    """Which memory bandwidth a ceiling uses: the datasheet's, or our own copy measurement."""

    datasheet = "datasheet"
    measured = "measured"


def check_bandwidth(which: str) -> Bandwidth:
    """``which`` as a :class:`Bandwidth`; a one-line ValueError naming the choices otherwise."""
    try:
        return Bandwidth(getattr(which, "value", which))
    except ValueError:
        raise ValueError(f"bandwidth must be one of {[b.value for b in Bandwidth]}, got {which!r}") from None

REQUIRED = ("gpu", "product", "compute_capability", "mem_bw_GBps", "mem_GB", "bf16_dense_TFLOPs",
            "fp8_dense_TFLOPs", "fp4_dense_TFLOPs", "smem_per_block_bytes", "pcie_GBps_per_dir",
            "nvlink_GBps_per_dir", "measured_copy_GBps", "measured_bf16_TFLOPs", "measured_source")


def _num(value) -> float | None:
    if value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


@dataclass(frozen=True)
class GPUSpec:
    gpu: str
    product: str
    compute_capability: str
    mem_bw_GBps: float
    mem_GB: float
    bf16_TFLOPs: float | None
    fp8_TFLOPs: float | None
    fp4_TFLOPs: float | None
    smem_per_block_bytes: int | None
    pcie_GBps_per_dir: float | None
    nvlink_GBps_per_dir: float | None
    measured_copy_GBps: float | None = None
    measured_bf16_TFLOPs: float | None = None
    measured_source: str = ""

    def bandwidth_GBps(self, which: str = "datasheet") -> float:
        """Memory bandwidth: 'datasheet', or 'measured' (falls back to datasheet if none)."""
        return self.bandwidth_with_source(which)[0]

    def bandwidth_with_source(self, which: str = "datasheet") -> tuple[float, str]:
        """(GB/s, label): label is 'datasheet', 'measured', or 'datasheet (no measurement)' when
        'measured' was asked for a GPU that has none (the datasheet value is used, and said so)."""
        which = check_bandwidth(which)
        if which is Bandwidth.measured:
            if self.measured_copy_GBps:
                return float(self.measured_copy_GBps), "measured"
            return float(self.mem_bw_GBps), "datasheet (no measurement)"
        return float(self.mem_bw_GBps), "datasheet"

    def rate_TFLOPs(self, key: str, which: str = "datasheet") -> float:
        """Dense tensor rate for 'bf16' | 'fp8' | 'fp4'; a missing FP4/FP8 rate falls back to
        the next wider format that exists (FP4 GEMMs upcast on Hopper)."""
        order = {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",)}
        if key not in order:
            raise ValueError(f"rate key must be one of {sorted(order)}, got {key!r}")
        for k in order[key]:
            value = {"bf16": self.bf16_TFLOPs, "fp8": self.fp8_TFLOPs, "fp4": self.fp4_TFLOPs}[k]
            if k == "bf16" and which == "measured" and self.measured_bf16_TFLOPs:
                value = self.measured_bf16_TFLOPs
            if value:
                return float(value)
        raise ValueError(f"{self.gpu}: no tensor rate for {key}")

    def link_GBps(self, interconnect: str = "auto") -> float | None:
        """Per-direction GPU-GPU bandwidth: 'nvlink', 'pcie', or 'auto' (NVLink when present)."""
        if interconnect == "auto":
            return self.nvlink_GBps_per_dir or self.pcie_GBps_per_dir
        if interconnect == "nvlink":
            return self.nvlink_GBps_per_dir
        if interconnect == "pcie":
            return self.pcie_GBps_per_dir
        raise ValueError(f"interconnect must be 'auto', 'nvlink' or 'pcie', got {interconnect!r}")


def load_hardware_table(path: str | Path | None = None):
    """``data/hardware.csv`` as a pandas DataFrame (all columns, sources included)."""
    import pandas as pd

    path = Path(path) if path is not None else data_dir() / "hardware.csv"
    df = pd.read_csv(path, dtype={"compute_capability": str})
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return df


def load_gpus(path: str | Path | None = None, *, measurements: bool = True) -> dict[str, GPUSpec]:
    """Every GPU of ``data/hardware.csv``; with ``measurements`` the recorded bench ceilings applied.

    Args:
        path: a hardware CSV (default ``data/hardware.csv``).
        measurements: apply :func:`apply_bench_ceilings` for every GPU that has a
            ``data/bench/moe_<gpu>_<date>.json`` file.
    """
    gpus = _load_csv(path)
    if measurements:
        from .measured import bench_files

        files = bench_files()
        for name in gpus:
            mine = [f for f in files if f.name.startswith(f"moe_{name}_")]
            if mine:
                gpus, _ = apply_bench_ceilings(gpus, mine, gpu=name)
    return gpus


def _load_csv(path: str | Path | None) -> dict[str, GPUSpec]:
    df = load_hardware_table(path)
    out: dict[str, GPUSpec] = {}
    for row in df.to_dict("records"):
        smem = _num(row["smem_per_block_bytes"])
        out[row["gpu"]] = GPUSpec(
            gpu=row["gpu"], product=row["product"], compute_capability=str(row["compute_capability"]),
            mem_bw_GBps=float(row["mem_bw_GBps"]), mem_GB=float(row["mem_GB"]),
            bf16_TFLOPs=_num(row["bf16_dense_TFLOPs"]), fp8_TFLOPs=_num(row["fp8_dense_TFLOPs"]),
            fp4_TFLOPs=_num(row["fp4_dense_TFLOPs"]),
            smem_per_block_bytes=int(smem) if smem is not None else None,
            pcie_GBps_per_dir=_num(row["pcie_GBps_per_dir"]),
            nvlink_GBps_per_dir=_num(row["nvlink_GBps_per_dir"]),
            measured_copy_GBps=_num(row["measured_copy_GBps"]),
            measured_bf16_TFLOPs=_num(row["measured_bf16_TFLOPs"]),
            measured_source=str(row["measured_source"]) if isinstance(row["measured_source"], str) else "")
    return out


def get_gpu(name: str, gpus: dict[str, GPUSpec] | None = None) -> GPUSpec:
    gpus = gpus if gpus is not None else load_gpus()
    if name not in gpus:
        raise ValueError(f"unknown gpu {name!r}; expected one of {sorted(gpus)} (data/hardware.csv)")
    return gpus[name]


def apply_bench_ceilings(gpus: dict[str, GPUSpec], bench_files: list[Path],
                         gpu: str = "h200") -> tuple[dict[str, GPUSpec], str | None]:
    """Replace ``gpu``'s measured ceilings by the newest bench file's ``ceilings`` (if any).

    Returns the new table and the file used (None when no file carries ceilings). The source
    names the file as a repository path (``data/bench/...``).
    """
    chosen = None
    for path in sorted(bench_files):
        try:
            ceil = json.loads(Path(path).read_text()).get("ceilings") or {}
        except (OSError, json.JSONDecodeError):
            continue
        if _num(ceil.get("copy_GBps")) and _num(ceil.get("bf16_TFLOPs")):
            chosen = (path, ceil)
    if chosen is None or gpu not in gpus:
        return gpus, None
    path, ceil = chosen
    new = dict(gpus)
    new[gpu] = replace(gpus[gpu], measured_copy_GBps=float(ceil["copy_GBps"]),
                       measured_bf16_TFLOPs=float(ceil["bf16_TFLOPs"]),
                       measured_source=f"data/bench/{Path(path).name} ceilings")
    return new, str(path)
