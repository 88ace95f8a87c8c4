"""Machine-readable notebook results for run folders.

A notebook calls ``record("03_grouped_gemm_correctness", {...})``. Under ``sm120lab run`` the
environment variable ``SM120LAB_RESULTS_DIR`` points at ``<run>/results/`` and the payload is
merged into ``<run>/results/<notebook>.json`` atomically; outside a run it is a no-op that
returns the payload, so notebooks run the same everywhere.

Three sections have a fixed schema so ``sm120lab compare`` can diff runs (see
:mod:`sm120lab.runs.compare`); record them with the helpers below:

- ``verdicts``: ``{check id: "correct" | "degraded" | "garbage" | "skipped" | "error" | ...}``
- ``compile_matrix``: ``{"probe|toolkit|target": "accepted" | "rejected-arch" | "rejected-ptxas" | ...}``
- ``bench``: ``{figure id: {"value": float, "unit": str, "spread": relative p90-p10 spread or None,
  "lower_is_better": bool}}``

A fourth, ``answer`` (the notebook's verdict box, written by :mod:`sm120lab.runs.answer`), is a list of
``{"claim", "value", "status", "why"}`` dicts.

Every file a run writes carries ``"schema_version": SCHEMA_VERSION``. Files without it are version 1
(the same shapes, written before the version was recorded). The shapes are the typed records of
:mod:`sm120lab.runs.records`; :func:`load_json` and the ``validate_*`` / ``load_*`` functions check a
file against its record and raise :class:`SchemaError` with one line naming the file and the
offending key, so ``sm120lab compare`` never meets a shape it cannot read.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from sm120lab.enums import StrEnum

from ..atomic_io import write_json_atomic
from .files import MAX_JSON_BYTES, SchemaError, read_json
from .records import (
    SCHEMA_KEY,
    SCHEMA_VERSION,
    EnvironmentRecord,
    NotebookResultsRecord,
    RunSummaryRecord,
    parse,
)

RESULTS_ENV = "SM120LAB_RESULTS_DIR"
VERDICT_ORDER = {"correct": 0, "degraded": 1, "garbage": 2}
SECTIONS = ("verdicts", "compile_matrix", "bench")
ANSWER_KEYS = ("claim", "value", "status", "why")


class NotebookStatus(StrEnum):
    """What became of one notebook in a run (``summary.json``)."""

    OK = "ok"
    FAILED = "failed"
    NOT_RUN = "not run"


def load_json(path: Path, root: Path | None = None) -> Any:
    """Parse ``path`` as JSON (a regular file of at most 64 MiB, inside ``root`` when given);
    :class:`SchemaError` naming the file for anything unreadable or not JSON."""
    return read_json(path, MAX_JSON_BYTES, root)


def validate_summary(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check a ``summary.json`` against :class:`~sm120lab.runs.records.RunSummaryRecord`; return it."""
    parse(RunSummaryRecord, obj, path)
    return obj


def validate_environment(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check an ``environment.json`` against :class:`~sm120lab.runs.records.EnvironmentRecord`; return it."""
    parse(EnvironmentRecord, obj, path)
    return obj


def validate_results(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check one ``results/NN_name.json`` against :class:`~sm120lab.runs.records.NotebookResultsRecord`."""
    parse(NotebookResultsRecord, obj, path)
    return obj


def load_summary(path: Path, root: Path | None = None) -> RunSummaryRecord:
    """``summary.json`` as its typed record (:func:`load_json`, then validated)."""
    return parse(RunSummaryRecord, load_json(path, root), path)


def load_environment(path: Path, root: Path | None = None) -> EnvironmentRecord:
    """``environment.json`` as its typed record."""
    return parse(EnvironmentRecord, load_json(path, root), path)


def load_results(path: Path, root: Path | None = None) -> NotebookResultsRecord:
    """``results/NN_name.json`` as its typed record."""
    return parse(NotebookResultsRecord, load_json(path, root), path)


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
            merged = load_json(path)
        except SchemaError:
            merged = {}
    if not isinstance(merged, dict):
        merged = {}
    merged[SCHEMA_KEY] = SCHEMA_VERSION
    for key, value in payload.items():
        if key in SECTIONS and isinstance(value, dict):
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
