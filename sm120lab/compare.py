"""Compare run folders: what changed between drivers, toolkits, FlashInfer or vLLM releases.

Each later run is compared with the first (the baseline), over the schema sections of
``results/*.json`` (see :mod:`sm120lab.results`):

- verdicts: a change from ``correct`` to ``degraded``/``garbage`` (or from ``degraded`` to
  ``garbage``) is a **correctness regression**; the reverse is a fix;
- compile_matrix: every cell whose status changed;
- bench: relative change ``(b - a) / a`` of each figure, called a regression or improvement only
  when it exceeds the noise band ``max(spread_a, spread_b, min_rel)``, where ``spread`` is the
  recorded relative repeat spread (p90-p10 over median) and ``min_rel`` a floor (default 5%).

Also the environment (driver, CUDA, package versions) and notebook statuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .results import VERDICT_ORDER


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
    kind: str          # environment | status | verdict | compile | bench
    notebook: str
    key: str
    before: Any
    after: Any
    assessment: str    # regression | fix | improvement | changed | within-noise | new | gone
    detail: str = ""


@dataclass
class Comparison:
    baseline: str
    other: str
    changes: list[Change] = field(default_factory=list)

    @property
    def correctness_regressions(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "verdict" and c.assessment == "regression"]


def load_run(path: str | Path) -> Run:
    """Read a run folder; raise ``FileNotFoundError`` naming what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run folder not found: {path}")
    summary_path = path / "summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{path} is not a run folder: no summary.json (made by `sm120lab run`)")
    summary = json.loads(summary_path.read_text())
    env_path = path / "environment.json"
    environment = json.loads(env_path.read_text()) if env_path.exists() else {}
    results = {}
    for f in sorted((path / "results").glob("*.json")):
        try:
            results[f.stem] = json.loads(f.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{f}: not valid JSON ({exc})") from exc
    return Run(path=path, summary=summary, environment=environment, results=results)


def environment_facts(env: dict[str, Any]) -> dict[str, Any]:
    """Flat facts of an ``environment.json``: GPU, driver, CUDA, ``pkg:<name>``, nvccs, ``env:<VAR>``."""
    gpu = env.get("gpu", {}) or {}
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


def _section(result: dict[str, Any], name: str) -> dict[str, Any]:
    """A schema section of one notebook's results; anything not in the schema's shape is ignored."""
    value = result.get(name, {})
    return value if isinstance(value, dict) else {}


def _verdict_assessment(before: str | None, after: str | None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "gone"
    rb, ra = VERDICT_ORDER.get(before), VERDICT_ORDER.get(after)
    if rb is not None and ra is not None:
        return "regression" if ra > rb else "fix"
    return "changed"


def compare_runs(a: Run, b: Run, *, min_rel: float = 0.05) -> Comparison:
    """All differences of ``b`` against the baseline ``a``."""
    cmp = Comparison(baseline=a.label, other=b.label)
    fa, fb = environment_facts(a.environment), environment_facts(b.environment)
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key) != fb.get(key):
            cmp.changes.append(Change("environment", "-", key, fa.get(key), fb.get(key), "changed"))

    sa = {n["name"]: n["status"] for n in a.summary.get("notebooks", [])}
    sb = {n["name"]: n["status"] for n in b.summary.get("notebooks", [])}
    for name in sorted(set(sa) | set(sb)):
        if sa.get(name) != sb.get(name):
            assess = "regression" if sa.get(name) == "ok" else ("fix" if sb.get(name) == "ok" else "changed")
            cmp.changes.append(Change("status", name, "notebook", sa.get(name), sb.get(name), assess))

    for nb in sorted(set(a.results) | set(b.results)):
        ra, rb = a.results.get(nb, {}), b.results.get(nb, {})
        va, vb = _section(ra, "verdicts"), _section(rb, "verdicts")
        for key in sorted(set(va) | set(vb)):
            if va.get(key) != vb.get(key):
                cmp.changes.append(Change("verdict", nb, key, va.get(key), vb.get(key),
                                          _verdict_assessment(va.get(key), vb.get(key))))
        ca, cb = _section(ra, "compile_matrix"), _section(rb, "compile_matrix")
        for key in sorted(set(ca) | set(cb)):
            if ca.get(key) != cb.get(key):
                assess = "new" if key not in ca else ("gone" if key not in cb else "changed")
                cmp.changes.append(Change("compile", nb, key, ca.get(key), cb.get(key), assess))
        ba, bb = _section(ra, "bench"), _section(rb, "bench")
        for key in sorted(set(ba) | set(bb)):
            if key not in ba or key not in bb:
                cmp.changes.append(Change("bench", nb, key, (ba.get(key) or {}).get("value"),
                                          (bb.get(key) or {}).get("value"), "new" if key not in ba else "gone"))
                continue
            x, y = ba[key], bb[key]
            if x["value"] == 0:
                continue
            rel = (y["value"] - x["value"]) / abs(x["value"])
            band = max(x.get("spread") or 0.0, y.get("spread") or 0.0, min_rel)
            lower_better = x.get("lower_is_better", True)
            if abs(rel) <= band:
                assess = "within-noise"
            else:
                worse = rel > 0 if lower_better else rel < 0
                assess = "regression" if worse else "improvement"
            cmp.changes.append(Change("bench", nb, key, x["value"], y["value"], assess,
                                      f"{rel:+.1%} (noise band ±{band:.1%}) {x.get('unit', '')}".strip()))
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


def run_overview(paths: list[str | Path]) -> list[dict[str, Any]]:
    """One row per run: when, GPU, driver, CUDA, torch/triton/flashinfer, notebooks ok of total."""
    rows = []
    for p in paths:
        run = load_run(p)
        facts = environment_facts(run.environment)
        books = run.summary.get("notebooks", [])
        rows.append({"run": run.label, "started": run.summary.get("started_utc"), "gpu": facts["gpu"],
                     "driver": facts["driver"], "cuda": facts["cuda_runtime"], "torch": facts.get("pkg:torch"),
                     "triton": facts.get("pkg:triton"), "flashinfer": facts.get("pkg:flashinfer-python"),
                     "notebooks ok": sum(n["status"] == "ok" for n in books), "notebooks": len(books)})
    return rows
