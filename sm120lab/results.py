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

A fourth, ``answer`` (the notebook's verdict box, written by :mod:`sm120lab.answer`), is a list of
``{"claim", "value", "status", "why"}`` dicts.

Every file a run writes carries ``"schema_version": SCHEMA_VERSION``. Files without it are version 1
(the same shapes, written before the version was recorded). :func:`load_json` and the
``validate_*`` functions check a file against its schema and raise :class:`SchemaError` with one
line naming the file and the offending key, so ``sm120lab compare`` never meets a shape it cannot read.
"""

from __future__ import annotations

import math
import os
import re
from enum import Enum
from numbers import Real
from pathlib import Path
from typing import Any

from .atomic_io import write_json_atomic
from .runs.files import MAX_JSON_BYTES, SchemaError, read_json

RESULTS_ENV = "SM120LAB_RESULTS_DIR"
VERDICT_ORDER = {"correct": 0, "degraded": 1, "garbage": 2}
SCHEMA_VERSION = 2
SCHEMA_KEY = "schema_version"
SECTIONS = ("verdicts", "compile_matrix", "bench")
ANSWER_KEYS = ("claim", "value", "status", "why")


class NotebookStatus(str, Enum):
    """What became of one notebook in a run (``summary.json``)."""

    OK = "ok"
    FAILED = "failed"
    NOT_RUN = "not run"

    def __str__(self) -> str:
        return self.value


#: a notebook name in summary.json: a file stem, no path separators, no leading dot
NOTEBOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")


def load_json(path: Path, root: Path | None = None) -> Any:
    """Parse ``path`` as JSON (a regular file of at most 64 MiB, inside ``root`` when given);
    :class:`SchemaError` naming the file for anything unreadable or not JSON."""
    return read_json(path, MAX_JSON_BYTES, root)


def _fail(path: Path | str, what: str) -> SchemaError:
    return SchemaError(f"{path}: {what}")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def schema_version(obj: dict[str, Any], path: Path | str) -> int:
    """The file's schema version (1 when absent); error if it is not an int or newer than this package."""
    version = obj.get(SCHEMA_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _fail(path, f"{SCHEMA_KEY} must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise _fail(path, f"{SCHEMA_KEY} {version} is newer than this sm120lab reads ({SCHEMA_VERSION}); "
                          "upgrade sm120lab")
    return version


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def validate_summary(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check a ``summary.json``: a mapping whose ``notebooks`` is a list of ``{"name", "status", ...}``."""
    if not isinstance(obj, dict):
        raise _fail(path, f"expected a JSON object, got {_type(obj)}")
    schema_version(obj, path)
    books = obj.get("notebooks")
    if not isinstance(books, list):
        raise _fail(path, f"'notebooks' must be a list, got {_type(books)}")
    statuses = {s.value for s in NotebookStatus}
    for i, nb in enumerate(books):
        if not isinstance(nb, dict):
            raise _fail(path, f"notebooks[{i}] must be an object, got {_type(nb)}")
        if not isinstance(nb.get("name"), str) or not NOTEBOOK_NAME.match(nb["name"]) or ".." in nb["name"]:
            raise _fail(path, f"notebooks[{i}].name must be a file stem like '01_nvfp4_math', got {nb.get('name')!r}")
        for key in ("output", "html"):
            value = nb.get(key)
            if value is not None and not (isinstance(value, str) and NOTEBOOK_NAME.match(value) and ".." not in value):
                raise _fail(path, f"notebooks[{i}].{key} must be null or a file name in the run folder, got {value!r}")
        for key in ("error",):
            if nb.get(key) is not None and not isinstance(nb[key], str):
                raise _fail(path, f"notebooks[{i}].{key} must be null or a string, got {_type(nb[key])}")
        wall = nb.get("wall_s")
        if wall is not None and not _is_number(wall):
            raise _fail(path, f"notebooks[{i}].wall_s must be null or a number, got {_type(wall)}")
        if nb.get("status") not in statuses:
            raise _fail(path, f"notebooks[{i}].status must be one of {sorted(statuses)}, got {nb.get('status')!r}")
    names = [nb["name"] for nb in books]
    if len(set(names)) != len(names):
        raise _fail(path, "a notebook is listed twice in 'notebooks'")
    for key in ("started_utc", "command", "run_dir"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise _fail(path, f"'{key}' must be a string, got {_type(obj[key])}")
    resumed = obj.get("resumed_utc")
    if resumed is not None and not (isinstance(resumed, list) and all(isinstance(r, str) for r in resumed)):
        raise _fail(path, "'resumed_utc' must be a list of strings")
    if not isinstance(obj.get("interrupted", False), bool):
        raise _fail(path, f"'interrupted' must be true or false, got {_type(obj.get('interrupted'))}")
    return obj


def validate_environment(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check an ``environment.json`` (:func:`sm120lab.envinfo.collect`): the parts compare reads."""
    if not isinstance(obj, dict):
        raise _fail(path, f"expected a JSON object, got {_type(obj)}")
    for key in ("gpu", "packages", "env", "sm120lab"):
        if obj.get(key) is not None and not isinstance(obj[key], dict):
            raise _fail(path, f"'{key}' must be an object, got {_type(obj[key])}")
    for key in ("packages", "env"):
        for name, value in (obj.get(key) or {}).items():
            if value is not None and not isinstance(value, str):
                raise _fail(path, f"{key}[{name!r}] must be null or a string, got {_type(value)}")
    gpu = obj.get("gpu") or {}
    if not isinstance(gpu.get("available", False), bool):
        raise _fail(path, f"gpu.available must be true or false, got {_type(gpu.get('available'))}")
    for key in ("name", "compute_capability", "driver", "torch_cuda_runtime", "reason"):
        if gpu.get(key) is not None and not isinstance(gpu[key], str):
            raise _fail(path, f"gpu.{key} must be null or a string, got {_type(gpu[key])}")
    for key in ("total_memory_bytes", "device_count", "multiprocessors", "shared_memory_per_block_optin"):
        if gpu.get(key) is not None and not _is_number(gpu[key]):
            raise _fail(path, f"gpu.{key} must be null or a number, got {_type(gpu[key])}")
    for key in ("host", "os", "python", "timestamp_utc"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise _fail(path, f"'{key}' must be null or a string, got {_type(obj[key])}")
    nvcc = obj.get("nvcc")
    if nvcc is not None and not (isinstance(nvcc, list) and all(isinstance(n, dict) for n in nvcc)):
        raise _fail(path, "'nvcc' must be a list of objects")
    return obj


def validate_results(obj: Any, path: Path | str) -> dict[str, Any]:
    """Check one ``results/NN_name.json``: the schema sections and ``answer`` have their shapes."""
    if not isinstance(obj, dict):
        raise _fail(path, f"expected a JSON object, got {_type(obj)}")
    schema_version(obj, path)
    for name in ("verdicts", "compile_matrix"):
        section = obj.get(name)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise _fail(path, f"'{name}' must be an object of id -> string, got {_type(section)}")
        for key, value in section.items():
            if not isinstance(value, str):
                raise _fail(path, f"{name}[{key!r}] must be a string, got {_type(value)}")
    bench = obj.get("bench")
    if bench is not None:
        if not isinstance(bench, dict):
            raise _fail(path, f"'bench' must be an object of figure id -> figure, got {_type(bench)}")
        for key, fig in bench.items():
            where = f"bench[{key!r}]"
            if not isinstance(fig, dict):
                raise _fail(path, f"{where} must be an object with 'value', got {_type(fig)}")
            if not _is_number(fig.get("value")):
                raise _fail(path, f"{where}.value must be a number, got {fig.get('value')!r}")
            spread = fig.get("spread")
            if spread is not None and not (_is_number(spread) and math.isfinite(spread) and spread >= 0):
                raise _fail(path, f"{where}.spread must be null or a finite number >= 0, got {spread!r}")
            if not isinstance(fig.get("lower_is_better", True), bool):
                raise _fail(path, f"{where}.lower_is_better must be true or false")
            if not isinstance(fig.get("unit", ""), str):
                raise _fail(path, f"{where}.unit must be a string")
    answer = obj.get("answer")
    if answer is not None:
        if not isinstance(answer, list):
            raise _fail(path, f"'answer' must be a list of {{claim, value, status, why}}, got {_type(answer)}")
        for i, item in enumerate(answer):
            if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("claim", "status")):
                raise _fail(path, f"answer[{i}] must be an object with string 'claim' and 'status'")
            for k in ("value", "why"):
                if item.get(k) is not None and not isinstance(item[k], (str, int, float)):
                    raise _fail(path, f"answer[{i}].{k} must be a string, got {_type(item[k])}")
    return obj


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
