"""Typed records of the MoE benchmark's files (pydantic v2), each with its schema version.

- :class:`BenchDoc`: ``data/bench/moe_<gpu>_<date>[_<model>].json`` (``sm120lab bench moe``), its
  ``rows`` of :class:`BenchRow`: one timing of one contender (``op``: the whole MoE layer or one
  of its parts) at ``T`` tokens;
- :class:`BenchCheckDoc`: the kernel-check files beside the early benches (``*_check.json``);
- :class:`GpuTestsDoc`: a recorded run of the GPU test suite (``gpu_tests_<gpu>_<date>.json``).

Every record keeps unknown keys (later benchmark versions add fields). Files written before the
version was recorded are version 1 and load unchanged; :data:`BENCH_SCHEMA_VERSION` is what
``sm120lab bench moe`` writes now. :func:`load_bench` is the one reader of a bench file and
:meth:`BenchDoc.rows_for` the one row filter (op, timing, contender, T).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: the newest bench schema this package writes and reads (1: recorded before the field existed)
BENCH_SCHEMA_VERSION = 2


class Op(str, Enum):
    """What one row timed: the whole MoE layer, one of its grouped GEMMs, or the token sort."""

    MOE = "moe"
    W13 = "w13"
    W2 = "w2"
    SORT = "sort"


class Timing(str, Enum):
    """How a row was timed: CUDA-graph replay or eager launches."""

    CUDA_GRAPH = "cuda_graph"
    EAGER = "eager"


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class BenchRow(_Record):
    """One timing: ``contender`` running ``op`` at ``T`` tokens, median / p10 / p90 in microseconds,
    with the bytes it moved and its share of the run's measured ceilings (``pct_copy_bw``,
    ``pct_bf16``) and of the NVFP4 weight-byte floor (``x_floor`` = us / floor_us)."""

    T: int
    contender: str
    op: Op = Op.MOE
    timing: Timing | None = None
    us_median: float
    us_p10: float | None = None
    us_p90: float | None = None
    n_reps: int | None = None
    calls_per_pass: int | None = None
    weight_bytes: int | None = None
    GBps: float | None = None
    TFLOPs: float | None = None
    pct_copy_bw: float | None = None
    pct_bf16: float | None = None
    x_floor: float | None = None
    x_own_floor: float | None = None
    path: str | None = None
    w13_config: str | None = None
    w2_config: str | None = None
    block_m: int | None = None
    format: str | None = None
    plan: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row as it was recorded (no keys the file did not have; enums as their strings)."""
        return self.model_dump(mode="json", exclude_unset=True)


class BenchDoc(_Record):
    """One benchmark file: where it ran (``env``), the model shape, the measured ceilings, the rows."""

    schema_version: int = Field(default=1, ge=1, le=BENCH_SCHEMA_VERSION)
    model: str
    shape: dict[str, int]
    rows: list[BenchRow]
    env: dict[str, Any] = Field(default_factory=dict)
    command: str | None = None
    ceilings: dict[str, Any] = Field(default_factory=dict)
    floor_us: dict[str, dict[str, float]] = Field(default_factory=dict)
    active_experts: dict[str, float] = Field(default_factory=dict)
    checks: list[dict[str, Any]] = Field(default_factory=list)
    checks_ok: bool | None = None
    errors: list[str] = Field(default_factory=list)
    notes: dict[str, Any] = Field(default_factory=dict)
    sweep: list[dict[str, Any]] = Field(default_factory=list)
    targets: dict[str, Any] = Field(default_factory=dict)

    @property
    def gpu(self) -> str | None:
        """The GPU's name as the run's ``env`` recorded it (a dict with ``name``, or a plain string)."""
        gpu = self.env.get("gpu")
        return gpu.get("name") if isinstance(gpu, dict) else gpu

    def rows_for(self, op: Op | str | None = Op.MOE, timing: Timing | str | None = Timing.CUDA_GRAPH, *,
                 contender: str | None = None, T: int | None = None) -> list[BenchRow]:
        """The rows of one ``op`` and ``timing`` (None: any), optionally one contender and one T (:func:`select`)."""
        return select(self.rows, op, timing, contender=contender, T=T)

    def find(self, T: int, contender: str, op: Op | str = Op.MOE,
             timing: Timing | str = Timing.CUDA_GRAPH) -> BenchRow | None:
        """The row of (T, contender, op) with this timing, or None."""
        hit = self.rows_for(op, timing, contender=contender, T=T)
        return hit[0] if hit else None


def select(rows: Iterable[BenchRow], op: Op | str | None = Op.MOE, timing: Timing | str | None = Timing.CUDA_GRAPH,
           *, contender: str | None = None, T: int | None = None) -> list[BenchRow]:
    """The one bench-row filter: rows of ``op`` timed with ``timing`` (None: any), optionally one contender
    and one T, in their order."""
    op = Op(op) if op is not None else None
    timing = Timing(timing) if timing is not None else None
    return [r for r in rows if (op is None or r.op == op) and (timing is None or r.timing == timing)
            and (contender is None or r.contender == contender) and (T is None or r.T == T)]


def bench_rows(doc: BenchDoc | dict) -> list[BenchRow]:
    """The typed rows of a bench document, or of a document still being written (a dict with ``rows``)."""
    if isinstance(doc, BenchDoc):
        return doc.rows
    try:
        return [BenchRow.model_validate(r) for r in doc["rows"]]
    except ValidationError as exc:
        raise ValueError(_one_line("bench rows", exc)) from None


class BenchCheckDoc(_Record):
    """``*_check.json``: the kernel checks recorded beside an early benchmark."""

    schema_version: int = Field(default=1, ge=1, le=BENCH_SCHEMA_VERSION)
    all_ok: bool
    checks: list[dict[str, Any]]


class GpuTestsDoc(_Record):
    """``gpu_tests_<gpu>_<date>.json``: the GPU test suite's command, exit status and summary line."""

    schema_version: int = Field(default=1, ge=1, le=BENCH_SCHEMA_VERSION)
    command: str
    rc: int
    summary: list[str]
    env: dict[str, Any] = Field(default_factory=dict)
    driver_command: str | None = None
    wall_s: float | None = None


def _one_line(path: Path | str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) if str(p).isprintable() else repr(p) for p in err["loc"]) or "(top level)"
    return f"{path}: {where}: {err['msg']} ({exc.error_count()} error(s), bench schema)"


def bench_doc(doc: BenchDoc | dict, source: Path | str = "bench document") -> BenchDoc:
    """``doc`` as a :class:`BenchDoc` (a dict is validated; one-line ValueError naming the key)."""
    if isinstance(doc, BenchDoc):
        return doc
    try:
        return BenchDoc.model_validate(doc)
    except ValidationError as exc:
        raise ValueError(_one_line(source, exc)) from None


def load_bench(path: str | Path) -> BenchDoc:
    """Read one bench file (any recorded format) into a :class:`BenchDoc`; one-line ValueError if it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON bench file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object (bench schema), got {type(data).__name__}")
    return bench_doc(data, path)


def ratios_vs(doc: BenchDoc, other: str, ours: str = "triton-w4a16") -> dict[int, float]:
    """``{T: t(other) / t(ours)}`` over the T where both have a CUDA-graph MoE-layer row (above 1: ours is
    faster), e.g. ``ratios_vs(doc, "vllm-marlin")`` is Marlin time / ours."""
    def t(name):
        return {r.T: r.us_median for r in doc.rows_for(op="moe", timing="cuda_graph") if r.contender == name}

    a, b = t(other), t(ours)
    return {T: a[T] / b[T] for T in sorted(a) if T in b}


def load_record(path: str | Path) -> BenchDoc | BenchCheckDoc | GpuTestsDoc:
    """Any JSON file under ``data/bench/`` by its kind: ``*_check.json``, ``gpu_tests_*.json`` or a bench."""
    path = Path(path)
    if path.name.startswith("gpu_tests_"):
        model: type[_Record] = GpuTestsDoc
    elif path.name.endswith("_check.json"):
        model = BenchCheckDoc
    else:
        return load_bench(path)
    try:
        return model.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise ValueError(_one_line(path, exc)) from None
