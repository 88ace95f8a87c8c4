"""Machine-readable notebook results for run folders.

A notebook calls ``record("03_grouped_gemm_correctness", {...})``. Under ``sm120lab run`` the
environment variable ``SM120LAB_RESULTS_DIR`` points at ``<run>/results/`` and the payload is
merged into ``<run>/results/<notebook>.json`` atomically; outside a run it is a no-op that
returns the payload, so notebooks run the same everywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .atomic_io import write_json_atomic

RESULTS_ENV = "SM120LAB_RESULTS_DIR"


def results_dir() -> Path | None:
    value = os.environ.get(RESULTS_ENV)
    return Path(value) if value else None


def record(notebook: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Merge ``payload`` (JSON-serialisable) into this run's ``results/<notebook>.json``."""
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
    merged.update(payload)
    write_json_atomic(path, merged)
    return merged
