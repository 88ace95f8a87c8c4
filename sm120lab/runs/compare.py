"""Compare run folders: what changed between drivers, toolkits, FlashInfer or vLLM releases.

Each later run is compared with the first (the baseline), over the schema sections of
``results/*.json`` (see :mod:`sm120lab.runs.results`). Any loss of correctness evidence is a
**regression**:

- notebooks: ``ok`` before and ``failed`` / ``not run`` / absent now;
- verdicts: ``correct`` -> ``degraded`` -> ``garbage`` is worse; a verdict that became ``error``, one
  that is ``skipped`` where it ran before, and one that is missing now are regressions too; the
  reverse is a fix;
- compile_matrix: a cell that vanished is a regression; other changed cells are listed as changed;
- bench: relative change ``(b - a) / |a|`` of each figure, called a regression or improvement only
  when it exceeds the noise band ``max(spread_a, spread_b, min_rel)``, where ``spread`` is the
  recorded relative repeat spread (p90-p10 over median) and ``min_rel`` a floor (default 5%). A
  figure that is no longer finite (NaN, inf) or vanished is a regression; a baseline of 0 compares
  by sign (any rise of a lower-is-better figure is a regression).

When the two runs ran on different devices (GPU name or compute capability differ, a CPU-only run
included), a check that ran on one side only (its verdict skipped on either side, or absent from the
later run) and every bench figure are **not comparable (device differs)**, never a regression (a
check absent from the baseline is ``new``, as on one device): a CPU run cannot lose
evidence it could never produce, and a timing on another GPU is no slowdown. A verdict that got
worse, an error, a failed notebook and a bench figure that is no longer finite still count.

Also the environment (driver, CUDA, package versions, compared with ``packaging.version``).
Every input file is validated first (:mod:`sm120lab.runs.results`): a malformed one raises
:class:`~sm120lab.runs.results.SchemaError` with one line naming it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sm120lab.enums import StrEnum

from .files import regular_files
from .results import (
    RESULTS_ENV,
    VERDICT_ORDER,
    NotebookStatus,
    SchemaError,
    load_json,
    validate_environment,
    validate_results,
    validate_summary,
)

__all__ = ["DEVICE_DIFFERS", "Assessment", "Change", "ChangeKind", "Comparison", "Run", "SchemaError",
           "against_recorded", "bench_rows", "compare_many", "compare_runs", "current_run_dir", "device_of", "load_run",
           "plot_bench_runs", "recorded_runs", "run_overview", "timeline"]


class ChangeKind(StrEnum):
    """What a :class:`Change` is about."""

    ENVIRONMENT = "environment"
    STATUS = "status"
    VERDICT = "verdict"
    COMPILE = "compile"
    BENCH = "bench"


class Assessment(StrEnum):
    """How a :class:`Change` is judged; only ``regression`` fails the gate."""

    REGRESSION = "regression"
    FIX = "fix"
    IMPROVEMENT = "improvement"
    CHANGED = "changed"
    WITHIN_NOISE = "within-noise"
    NEW = "new"
    GONE = "gone"
    NOT_COMPARABLE = "not comparable"


#: the detail of every :attr:`Assessment.NOT_COMPARABLE` change
DEVICE_DIFFERS = "device differs"


#: verdicts that mean the backend ran and produced an output to judge
RAN = frozenset(VERDICT_ORDER)
ERROR, SKIPPED = "error", "skipped"


@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    environment: dict[str, Any]
    results: dict[str, dict[str, Any]]

    @property
    def label(self) -> str:
        return self.path.name


@dataclass
class Change:
    kind: ChangeKind
    notebook: str
    key: str
    before: Any
    after: Any
    assessment: Assessment
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "notebook": self.notebook, "key": self.key, "before": self.before,
                "after": self.after, "assessment": self.assessment.value, "detail": self.detail}


@dataclass
class Comparison:
    baseline: str
    other: str
    changes: list[Change] = field(default_factory=list)
    #: ``(baseline device, other device)``: GPU name and compute capability, ``"none"`` without a GPU
    devices: tuple[str, str] = ("none", "none")

    @property
    def device_differs(self) -> bool:
        return self.devices[0] != self.devices[1]

    @property
    def not_comparable(self) -> list[Change]:
        """Checks that ran on one device only, and bench figures from another device."""
        return [c for c in self.changes if c.assessment is Assessment.NOT_COMPARABLE]

    def count(self, *assessments: Assessment, kinds: tuple[ChangeKind, ...] | None = None) -> int:
        return sum(c.assessment in assessments and (kinds is None or c.kind in kinds) for c in self.changes)

    def summary_line(self, regressions: int | None = None) -> str:
        """One line: regressions (of correctness evidence), fixes, not comparable, new, environment.

        Args:
            regressions: the regressions the caller gates on, when it leaves some out (default all).
        """
        regs = len(self.regressions) if regressions is None else regressions
        env = self.count(Assessment.CHANGED, kinds=(ChangeKind.ENVIRONMENT,))
        parts = [f"{regs} regression(s) ({len(self.correctness_regressions)} of correctness evidence)",
                 f"{self.count(Assessment.FIX, Assessment.IMPROVEMENT)} fix(es)/improvement(s)"]
        if self.device_differs:
            parts.append(f"{len(self.not_comparable)} not comparable (device differs: "
                         f"{self.devices[0]} -> {self.devices[1]})")
        parts += [f"{self.count(Assessment.NEW)} new", f"{env} environment fact(s) differ"]
        return f"{self.other} vs {self.baseline}: " + ", ".join(parts)

    @property
    def regressions(self) -> list[Change]:
        """Every change judged a regression (correctness evidence lost, a compile cell gone, slower)."""
        return [c for c in self.changes if c.assessment is Assessment.REGRESSION]

    @property
    def correctness_regressions(self) -> list[Change]:
        """Regressions of correctness evidence: worse, errored, skipped or missing verdicts, failed notebooks."""
        return [c for c in self.regressions if c.kind in (ChangeKind.VERDICT, ChangeKind.STATUS)]

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "other": self.other, "devices": list(self.devices),
                "device_differs": self.device_differs, "changes": [c.to_json() for c in self.changes]}


def load_run(path: str | Path) -> Run:
    """Read and validate a run folder.

    Raises:
        FileNotFoundError: the folder or its ``summary.json`` is missing.
        SchemaError: a file is not JSON or not in the schema's shape (one line naming the file).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run folder not found: {path}")
    summary_path = path / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{path} is not a run folder: no summary.json (made by `sm120lab run`)")
    summary = validate_summary(load_json(summary_path, path), summary_path)
    env_path = path / "environment.json"
    environment = validate_environment(load_json(env_path, path), env_path) if env_path.exists() else {}
    results = {}
    if (path / "results").is_dir():
        for f in regular_files(path / "results", "*.json"):
            results[f.stem] = validate_results(load_json(f, path), f)
    return Run(path=path, summary=summary, environment=environment, results=results)


def environment_facts(env: dict[str, Any]) -> dict[str, Any]:
    """Flat facts of an ``environment.json``: GPU, driver, CUDA, ``pkg:<name>``, nvccs, ``env:<VAR>``."""
    gpu = env.get("gpu") or {}
    facts = {"gpu": gpu.get("name", "none") if gpu.get("available") else "none",
             "compute_capability": gpu.get("compute_capability"), "driver": gpu.get("driver"),
             "cuda_runtime": gpu.get("torch_cuda_runtime")}
    for name, ver in (env.get("packages") or {}).items():
        facts[f"pkg:{name}"] = ver
    nvccs = env.get("nvcc") or []
    facts["nvcc"] = ",".join(sorted(str(n.get("version")) for n in nvccs)) or None
    for k, v in (env.get("env") or {}).items():
        facts[f"env:{k}"] = v
    return facts


def device_of(env: dict[str, Any]) -> str:
    """``NVIDIA H200 (sm 9.0)``, or ``none`` for a run without a GPU."""
    facts = environment_facts(env)
    if facts["gpu"] == "none":
        return "none"
    return f"{facts['gpu']} (sm {facts['compute_capability']})" if facts["compute_capability"] else str(facts["gpu"])


def _version(text: Any) -> Version | None:
    try:
        return Version(str(text)) if text is not None else None
    except InvalidVersion:
        return None


def _environment_detail(key: str, before: Any, after: Any) -> str:
    """``upgrade`` / ``downgrade`` for package, driver and CUDA versions (``packaging.version``)."""
    if not (key.startswith("pkg:") or key in ("driver", "cuda_runtime")):
        return ""
    vb, va = _version(before), _version(after)
    if vb is None or va is None or vb == va:
        return ""
    return "upgrade" if va > vb else "downgrade"


def _section(result: dict[str, Any], name: str) -> dict[str, Any]:
    """A schema section of one (validated) notebook result; absent sections are empty."""
    return result.get(name) or {}


def _verdict_assessment(before: str | None, after: str | None) -> Assessment:
    """Judge one verdict change; any loss of correctness evidence is a regression."""
    if before is None:
        return Assessment.NEW
    if after is None:
        return Assessment.REGRESSION  # the verdict is missing now
    if before in RAN and after in RAN:
        return Assessment.REGRESSION if VERDICT_ORDER[after] > VERDICT_ORDER[before] else Assessment.FIX
    if after == ERROR:
        return Assessment.REGRESSION  # crashed where it ran, or was skipped, before
    if after == SKIPPED:
        return Assessment.REGRESSION if before in RAN else Assessment.CHANGED
    if before in (ERROR, SKIPPED) and after in RAN:
        return Assessment.FIX
    return Assessment.CHANGED


def _status_assessment(before: str | None, after: str | None) -> Assessment:
    if before is None:
        return Assessment.NEW
    if before == NotebookStatus.OK:
        return Assessment.REGRESSION  # failed, not run, or absent now
    if after == NotebookStatus.OK:
        return Assessment.FIX
    return Assessment.CHANGED


def _bench_change(nb: str, key: str, x: dict[str, Any], y: dict[str, Any], min_rel: float) -> Change | None:
    """One bench figure in both runs; ``None`` when nothing changed."""
    a, b = float(x["value"]), float(y["value"])
    unit = x.get("unit") or y.get("unit") or ""
    lower_better = x.get("lower_is_better", True)

    def change(assess: Assessment, detail: str) -> Change:
        return Change(ChangeKind.BENCH, nb, key, x["value"], y["value"], assess, f"{detail} {unit}".strip())

    if not math.isfinite(b):
        if not math.isfinite(a) and repr(a) == repr(b):
            return None
        return change(Assessment.REGRESSION, "no longer a finite number")
    if not math.isfinite(a):
        return change(Assessment.FIX, "baseline was not a finite number")
    if a == b:
        return None
    if a == 0:
        worse = b > 0 if lower_better else b < 0
        return change(Assessment.REGRESSION if worse else Assessment.IMPROVEMENT, "baseline 0: no relative change")
    rel = (b - a) / abs(a)
    band = max(x.get("spread") or 0.0, y.get("spread") or 0.0, min_rel)
    if abs(rel) <= band:
        assess = Assessment.WITHIN_NOISE
    else:
        worse = rel > 0 if lower_better else rel < 0
        assess = Assessment.REGRESSION if worse else Assessment.IMPROVEMENT
    return change(assess, f"{rel:+.1%} (noise band ±{band:.1%})")


def compare_runs(a: Run, b: Run, *, min_rel: float = 0.05, skip_pending: bool = False) -> Comparison:
    """All differences of ``b`` against the baseline ``a``.

    Args:
        a: the baseline run.
        b: the run judged against it.
        min_rel: the smallest relative bench change ever called a regression or improvement.
        skip_pending: leave out notebooks that are ``not run`` in ``b`` (a run still in progress,
            e.g. the run that notebook 06 is part of).

    Returns:
        The :class:`Comparison`; ``comparison.regressions`` is what a gate fails on.
    """
    if not (isinstance(min_rel, (int, float)) and math.isfinite(min_rel) and min_rel >= 0):
        raise ValueError(f"min_rel: expected a finite number >= 0, got {min_rel!r}")
    cmp = Comparison(baseline=a.label, other=b.label, devices=(device_of(a.environment), device_of(b.environment)))
    fa, fb = environment_facts(a.environment), environment_facts(b.environment)
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key) != fb.get(key):
            cmp.changes.append(Change(ChangeKind.ENVIRONMENT, "-", key, fa.get(key), fb.get(key),
                                      Assessment.CHANGED, _environment_detail(key, fa.get(key), fb.get(key))))

    sa = {n["name"]: n["status"] for n in a.summary["notebooks"]}
    sb = {n["name"]: n["status"] for n in b.summary["notebooks"]}
    pending = {n for n, s in sb.items() if s == NotebookStatus.NOT_RUN} if skip_pending else set()
    for name in sorted((set(sa) | set(sb)) - pending):
        if sa.get(name) != sb.get(name):
            detail = "" if name in sb else "not in this run"
            cmp.changes.append(Change(ChangeKind.STATUS, name, "notebook", sa.get(name), sb.get(name),
                                      _status_assessment(sa.get(name), sb.get(name)), detail))

    for nb in sorted((set(a.results) | set(b.results)) - pending):
        ra, rb = a.results.get(nb, {}), b.results.get(nb, {})
        va, vb = _section(ra, "verdicts"), _section(rb, "verdicts")
        for key in sorted(set(va) | set(vb)):
            before, after = va.get(key), vb.get(key)
            if before != after:
                one_sided = before is not None and {before, after} & {None, SKIPPED}
                if cmp.device_differs and one_sided:
                    assess, detail = Assessment.NOT_COMPARABLE, DEVICE_DIFFERS
                else:
                    assess, detail = _verdict_assessment(before, after), "" if key in vb else "verdict missing"
                cmp.changes.append(Change(ChangeKind.VERDICT, nb, key, before, after, assess, detail))
        ca, cb = _section(ra, "compile_matrix"), _section(rb, "compile_matrix")
        for key in sorted(set(ca) | set(cb)):
            if ca.get(key) != cb.get(key):
                assess = (Assessment.NEW if key not in ca else
                          Assessment.REGRESSION if key not in cb else Assessment.CHANGED)
                cmp.changes.append(Change(ChangeKind.COMPILE, nb, key, ca.get(key), cb.get(key), assess,
                                          "" if key in cb else "cell missing"))
        ba, bb = _section(ra, "bench"), _section(rb, "bench")
        for key in sorted(set(ba) | set(bb)):
            if cmp.device_differs and (key not in ba or key not in bb or math.isfinite(float(bb[key]["value"]))):
                x, y = ba.get(key, {}).get("value"), bb.get(key, {}).get("value")
                if x is not None and y is not None and x == y:
                    continue
                cmp.changes.append(Change(ChangeKind.BENCH, nb, key, x, y, Assessment.NOT_COMPARABLE, DEVICE_DIFFERS))
            elif key not in ba:
                cmp.changes.append(Change(ChangeKind.BENCH, nb, key, None, bb[key]["value"], Assessment.NEW))
            elif key not in bb:
                cmp.changes.append(Change(ChangeKind.BENCH, nb, key, ba[key]["value"], None,
                                          Assessment.REGRESSION, "figure missing"))
            else:
                ch = _bench_change(nb, key, ba[key], bb[key], min_rel)
                if ch is not None:
                    cmp.changes.append(ch)
    return cmp


def compare_many(paths: list[str | Path], *, min_rel: float = 0.05) -> list[Comparison]:
    """Every run after the first, compared with the first."""
    if len(paths) < 2:
        raise ValueError(f"need at least two run folders to compare, got {len(paths)}")
    runs = [load_run(p) for p in paths]
    return [compare_runs(runs[0], r, min_rel=min_rel) for r in runs[1:]]


def timeline(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Long-format rows (run, environment facts, notebook, kind, key, value) for plotting many runs."""
    rows = []
    for p in paths:
        run = load_run(p)
        facts = environment_facts(run.environment)
        base = {"run": run.label, "started": run.summary.get("started_utc"), "driver": facts["driver"],
                "cuda": facts["cuda_runtime"], "gpu": facts["gpu"]}
        for nb, res in run.results.items():
            for key, v in _section(res, "verdicts").items():
                rows.append({**base, "notebook": nb, "kind": "verdict", "key": key, "value": v})
            for key, v in _section(res, "compile_matrix").items():
                rows.append({**base, "notebook": nb, "kind": "compile", "key": key, "value": v})
            for key, v in _section(res, "bench").items():
                rows.append({**base, "notebook": nb, "kind": "bench", "key": key, "value": v["value"],
                             "unit": v.get("unit"), "spread": v.get("spread")})
    return rows


#: bench figure ids ``metric:contender:mode:T<tokens>`` (notebook 04), e.g. ``moe_us:triton-w4a16:graph:T1``
BENCH_KEY = re.compile(r"^(?P<metric>[^:]+):(?P<contender>[^:]+):(?P<mode>[^:]+):T(?P<tokens>\d+)$")


def bench_rows(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Bench figures of the runs whose id parses as :data:`BENCH_KEY`, one row per run and figure:
    ``run, metric, contender, mode, tokens, value, unit, spread``."""
    rows = []
    for r in timeline(paths):
        m = BENCH_KEY.match(str(r["key"])) if r["kind"] == "bench" else None
        if m is not None:
            rows.append({"run": r["run"], "metric": m["metric"], "contender": m["contender"], "mode": m["mode"],
                         "tokens": int(m["tokens"]), "value": r["value"], "unit": r.get("unit") or "",
                         "spread": r.get("spread")})
    return rows


def plot_bench_runs(paths: list[str | Path], max_panels: int = 9):
    """Runs side by side: one panel per metric and contender (``moe_us`` of ``triton-w4a16 graph``...),
    x the token count T, one bar per run at each T, error bars the recorded repeat spread.

    Args:
        paths: run folders, in legend order.
        max_panels: most panels drawn (the first by metric and contender name).

    Returns:
        ``(figure, runs without bench figures)``; the figure is ``None`` when no run has any.
    """
    import matplotlib.pyplot as plt

    rows = bench_rows(paths)
    labels = [Path(p).name for p in paths]
    measured = [lab for lab in labels if any(r["run"] == lab for r in rows)]
    missing = [lab for lab in labels if lab not in measured]
    if not rows:
        return None, missing
    panels = sorted({(r["metric"], r["contender"], r["mode"]) for r in rows})[:max_panels]
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.2 * nrows + 0.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(measured)
    for ax, (metric, contender, mode) in zip(axes.flat, panels):
        mine = [r for r in rows if (r["metric"], r["contender"], r["mode"]) == (metric, contender, mode)]
        tokens = sorted({r["tokens"] for r in mine})
        for i, run in enumerate(measured):
            got = {r["tokens"]: r for r in mine if r["run"] == run}
            xs = [j + (i - (len(measured) - 1) / 2) * width for j, t in enumerate(tokens) if t in got]
            vals = [got[t]["value"] for t in tokens if t in got]
            errs = [got[t]["value"] * (got[t]["spread"] or 0) / 2 for t in tokens if t in got]
            ax.bar(xs, vals, width, yerr=errs, capsize=2, color=colours[i % len(colours)], label=run)
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens])
        ax.set_xlabel("tokens T")
        unit = next((r["unit"] for r in mine if r["unit"]), "")
        ax.set_ylabel(f"{metric.removesuffix('_' + unit)} time ({unit})" if unit else metric)
        values = [r["value"] for r in mine if r["value"] > 0]
        if values and max(values) > 10 * min(values):
            ax.set_yscale("log")
        ax.set_title(f"{metric}: {contender} ({mode})", fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(3, len(names)), fontsize=8, frameon=False)
    fig.suptitle("bench figures per run, side by side (lower is faster; error bars: recorded repeat spread)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.08 if len(names) <= 3 else 0.14, 1, 1))
    return fig, missing


def run_overview(paths: list[str | Path], in_progress: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per run: when, GPU, driver, CUDA, sm120lab commit, torch/triton/flashinfer, notebooks ok.

    Args:
        paths: run folders.
        in_progress: the run folder still executing (notebook 06's own run, :func:`current_run_dir`);
            its ``not run`` notebooks are counted as still to run, not as finished.

    Returns:
        Rows of strings and numbers, no ``None``: a CPU run's driver and CUDA read ``none (no GPU)``,
        a package that is not installed ``not installed``.
    """
    from ..envinfo import provenance_text

    running = Path(in_progress).resolve() if in_progress is not None else None
    rows = []
    for p in paths:
        run = load_run(p)
        facts = environment_facts(run.environment)
        books = run.summary.get("notebooks", [])
        pending = sum(n["status"] == NotebookStatus.NOT_RUN for n in books) if run.path.resolve() == running else 0
        ok = sum(n["status"] == NotebookStatus.OK for n in books)
        no_gpu = "none (no GPU)" if facts["gpu"] == "none" else "not recorded"
        rows.append({"run": run.label, "started": run.summary.get("started_utc") or "not recorded",
                     "gpu": facts["gpu"], "driver": facts["driver"] or no_gpu, "cuda": facts["cuda_runtime"] or no_gpu,
                     "sm120lab": provenance_text(run.environment),
                     **{name: facts.get(f"pkg:{pkg}") or "not installed"
                        for name, pkg in (("torch", "torch"), ("triton", "triton"), ("flashinfer", "flashinfer-python"))},
                     "notebooks": f"{ok} ok of {len(books) - pending}" + (f" finished, {pending} still running"
                                                                          if pending else "")})
    return rows


def current_run_dir() -> Path | None:
    """The run folder of the ``sm120lab run`` this process is part of (from ``SM120LAB_RESULTS_DIR``)."""
    value = os.environ.get(RESULTS_ENV)
    return Path(value).parent if value else None


def recorded_runs(recorded_root: str | Path | None = None) -> list[Path]:
    """The run folders under ``recorded_root`` (default ``<checkout>/data/runs``), oldest first by name."""
    if recorded_root is None:
        from ..paths import data_dir

        recorded_root = data_dir() / "runs"
    root = Path(recorded_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "summary.json").is_file())


def against_recorded(run_dir: str | Path | None = None, recorded_root: str | Path | None = None, *,
                     min_rel: float = 0.05) -> list[Comparison]:
    """This run judged against every recorded run: one :class:`Comparison` per recorded baseline.

    Args:
        run_dir: the run to judge. Default: the run this process belongs to (:func:`current_run_dir`),
            whose notebooks still ``not run`` are left out (it is in progress).
        recorded_root: folder of recorded runs (default ``<checkout>/data/runs``). ``run_dir`` itself
            is skipped if it lies there.
        min_rel: bench noise floor, as in :func:`compare_runs`.

    Returns:
        ``[compare_runs(recorded, run), ...]`` in recorded-run order; empty when there is no run to
        judge or nothing is recorded.
    """
    in_progress = run_dir is None
    run_dir = current_run_dir() if run_dir is None else Path(run_dir)
    if run_dir is None:
        return []
    run = load_run(run_dir)
    mine = run_dir.resolve()
    baselines = [load_run(p) for p in recorded_runs(recorded_root) if p.resolve() != mine]
    return [compare_runs(base, run, min_rel=min_rel, skip_pending=in_progress) for base in baselines]
