"""Machine-readable notebook results for run folders.

A notebook calls ``record("03_grouped_gemm_correctness", {...})``. Under ``sm120lab run`` the
environment variable ``SM120LAB_RESULTS_DIR`` points at ``<run>/results/`` and the payload is
merged into ``<run>/results/<notebook>.json`` atomically; outside a run it is a no-op that
returns the payload, so notebooks run the same everywhere.

Three sections have a fixed schema so ``sm120lab compare`` can diff runs (see
:mod:`sm120lab.compare`); record them with the helpers below:

- ``verdicts``: ``{check id: "correct" | "degraded" | "garbage" | "skipped" | "error" | ...}``
- ``compile_matrix``: ``{"probe|toolkit|target": "accepted" | "rejected-arch" | "rejected-ptxas" | ...}``
- ``bench``: ``{figure id: {"value": float, "unit": str, "spread": relative p90-p10 spread or None,
  "lower_is_better": bool}}``
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .atomic_io import write_json_atomic

RESULTS_ENV = "SM120LAB_RESULTS_DIR"
VERDICT_ORDER = {"correct": 0, "degraded": 1, "garbage": 2}


def results_dir() -> Path | None:
    value = os.environ.get(RESULTS_ENV)
    return Path(value) if value else None


def record(notebook: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Merge ``payload`` (JSON-serialisable) into this run's ``results/<notebook>.json``.

    Top-level keys are replaced, except the schema sections (verdicts, compile_matrix, bench),
    whose entries are merged so several cells can each add theirs.
    """
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, got {type(payload).__name__}")
    directory = results_dir()
    if directory is None:
        return payload
    path = directory / f"{notebook}.json"
    merged: dict[str, Any] = {}
    if path.exists():
        try:
            merged = json.loads(path.read_text())
        except json.JSONDecodeError:
            merged = {}
    for key, value in payload.items():
        if key in ("verdicts", "compile_matrix", "bench") and isinstance(value, dict):
            if not isinstance(merged.get(key), dict):
                merged[key] = {}
            merged[key].update(value)
        else:
            merged[key] = value
    write_json_atomic(path, merged)
    return merged


def record_verdicts(notebook: str, verdicts: dict[str, str]) -> dict[str, Any]:
    """Record correctness verdicts per backend / check."""
    bad = {k: v for k, v in verdicts.items() if not isinstance(v, str)}
    if bad:
        raise TypeError(f"verdicts must map ids to strings, got {bad}")
    return record(notebook, {"verdicts": dict(verdicts)})


def record_compile_matrix(notebook: str, cells: dict[str, str]) -> dict[str, Any]:
    """Record compile-matrix cells keyed ``probe|toolkit|target``."""
    return record(notebook, {"compile_matrix": dict(cells)})


def record_bench(notebook: str, figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Record benchmark figures ``{id: {"value", "unit", "spread", "lower_is_better"}}``."""
    clean = {}
    for key, fig in figures.items():
        value = float(fig["value"])
        if not math.isfinite(value):
            raise ValueError(f"bench figure {key!r} is not finite: {value}")
        clean[key] = {"value": value, "unit": fig.get("unit", ""),
                      "spread": None if fig.get("spread") is None else float(fig["spread"]),
                      "lower_is_better": bool(fig.get("lower_is_better", True))}
    return record(notebook, {"bench": clean})
