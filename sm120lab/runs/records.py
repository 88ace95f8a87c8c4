"""Typed records of a run folder's files (pydantic v2), each with its schema version.

- :class:`RunSummaryRecord`: ``summary.json`` (per notebook a :class:`NotebookEntry`);
- :class:`NotebookResultsRecord`: ``results/NN_name.json`` (``verdicts``, ``compile_matrix``,
  ``bench`` of :class:`BenchFigure`, ``answer`` of :class:`AnswerItem`, plus any other key the
  notebook recorded);
- :class:`EnvironmentRecord`: ``environment.json`` (:func:`sm120lab.envinfo.collect`).

Every record validates strictly (no type coercion: ``"2"`` is not a version, ``true`` not a count)
and keeps unknown keys. Files written before the version was recorded are version 1 and load
unchanged. :func:`parse` turns the first validation error into one line naming the file and the
offending key, the form every run-folder error takes (:class:`~sm120lab.runs.files.SchemaError`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .files import SchemaError

#: the newest schema this package writes and reads
SCHEMA_VERSION = 2
SCHEMA_KEY = "schema_version"
#: a notebook name in summary.json: a file stem, no path separators, no leading dot
NOTEBOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")
STATUSES = ("ok", "failed", "not run")


def _file_name(value: str | None) -> str | None:
    if value is not None and (not NOTEBOOK_NAME.match(value) or ".." in value):
        raise ValueError(f"must be a file name in the run folder like '01_nvfp4_math', got {value[:60]!r}")
    return value


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Versioned(_Record):
    schema_version: int = Field(default=1, ge=1, le=SCHEMA_VERSION)


class NotebookEntry(_Record):
    """One notebook of a run: its status, wall time, first error line, and its files."""

    name: str
    status: Literal["ok", "failed", "not run"]
    wall_s: float | None = None
    error: str | None = None
    output: str | None = None
    html: str | None = None

    _names = field_validator("name", "output", "html")(_file_name)


class RunSummaryRecord(_Versioned):
    """``summary.json``."""

    notebooks: list[NotebookEntry]
    run_dir: str | None = None
    started_utc: str | None = None
    command: str | None = None
    ok: bool | None = None
    failed: list[str] | None = None
    resumed_utc: list[str] | None = None
    interrupted: bool = False
    interrupted_utc: str | None = None

    @model_validator(mode="after")
    def _unique(self) -> RunSummaryRecord:
        names = [n.name for n in self.notebooks]
        if len(set(names)) != len(names):
            raise ValueError("a notebook is listed twice in 'notebooks'")
        return self


class BenchFigure(_Record):
    """One benchmark figure: value (NaN/inf kept, so a lost number is seen), unit, relative spread."""

    value: float
    unit: str = ""
    spread: float | None = None
    lower_is_better: bool = True

    @field_validator("spread")
    @classmethod
    def _spread(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise ValueError(f"must be null or a finite number >= 0, got {v!r}")
        return v


class AnswerItem(_Record):
    """One line of a notebook's verdict box (:mod:`sm120lab.runs.answer`)."""

    claim: str
    status: str
    value: str | int | float | None = ""
    why: str | int | float | None = ""


class NotebookResultsRecord(_Versioned):
    """``results/NN_name.json``: the schema sections; other recorded keys are kept as they are."""

    verdicts: dict[str, str] | None = None
    compile_matrix: dict[str, str] | None = None
    bench: dict[str, BenchFigure] | None = None
    answer: list[AnswerItem] | None = None


class GpuRecord(_Record):
    available: bool = False
    name: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    torch_cuda_runtime: str | None = None
    reason: str | None = None
    total_memory_bytes: int | float | None = None
    device_count: int | None = None
    multiprocessors: int | None = None
    shared_memory_per_block_optin: int | None = None


class ProvenanceRecord(_Record):
    version: str | None = None
    commit: str | None = None
    dirty: bool | None = None
    reason: str | None = None


class EnvironmentRecord(_Record):
    """``environment.json``: the parts the report, compare and resume read."""

    timestamp_utc: str | None = None
    host: str | None = None
    os: str | None = None
    python: str | None = None
    gpu: GpuRecord | None = None
    packages: dict[str, str | None] | None = None
    env: dict[str, str | None] | None = None
    nvcc: list[dict[str, Any]] | None = None
    sm120lab: ProvenanceRecord | None = None


R = TypeVar("R", bound=BaseModel)


def _where(loc: tuple[Any, ...]) -> str:
    """A validation error's location as ``a.b[0].c``; a key with unprintable characters (a line break, a
    control character) is shown as its repr, so the message stays one line."""
    out = ""
    for part in loc:
        name = str(part) if str(part).isprintable() else repr(part)
        out += f"[{part}]" if isinstance(part, int) else (f".{name}" if out else name)
    return out


def parse(model: type[R], obj: Any, path: Path | str) -> R:
    """``obj`` as a ``model`` record.

    Raises:
        SchemaError: one line naming ``path``, the offending key and what it holds.
    """
    if not isinstance(obj, dict):
        kind = "null" if obj is None else type(obj).__name__
        raise SchemaError(f"{path}: expected a JSON object, got {kind}")
    version = obj.get(SCHEMA_KEY, 1)
    if issubclass(model, _Versioned) and isinstance(version, int) and not isinstance(version, bool) \
            and version > SCHEMA_VERSION:
        raise SchemaError(f"{path}: {SCHEMA_KEY} {version} is newer than this sm120lab reads ({SCHEMA_VERSION}); "
                          "upgrade sm120lab")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = _where(tuple(err["loc"])) or "the file"
        got = repr(err.get("input"))[:60]
        msg = err["msg"].removeprefix("Value error, ")
        raise SchemaError(f"{path}: {where}: {msg}" + ("" if "got" in msg else f", got {got}")) from None
