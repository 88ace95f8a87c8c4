"""The audit table: for one tree, each patch's classification, state in the files, and advice."""

from __future__ import annotations

from . import textmatch as tm
from .engine import PatchState, status
from .site import SiteTree
from .spec import SpecSet


def advice(state: PatchState) -> str:
    """One phrase: what a user of this version should do about the patch."""
    p, st = state.patch, state.status
    if p.classification == "harmful":
        return "do not apply: unlocks a path with no SM120 kernels" + (" (applied here: revert)" if st == tm.APPLIED else "")
    if p.classification == "upstreamed":
        return f"not needed: upstream in {p.upstreamed_in}"
    if p.classification == "no-op":
        return "not needed: changes nothing on SM120"
    if st == tm.APPLIED:
        return "needed: applied"
    if st == tm.APPLICABLE:
        return "needed: apply it" if p.default_apply else "needed: apply with --only"
    return f"needed, but {st}: the spec does not fit this tree"


def rows(tree: SiteTree, specs: SpecSet) -> list[dict]:
    """One dict per patch (JSON-ready), in spec order."""
    out = []
    for s in status(tree, specs):
        p = s.patch
        out.append({
            "id": p.id, "file": p.file, "line": s.line, "classification": p.classification,
            "upstreamed_in": p.upstreamed_in, "status": s.status, "advice": advice(s),
            "default_apply": p.default_apply, "seed_ref": p.seed_ref, "purpose": p.purpose,
            "evidence": p.evidence, "source": p.source,
        })
    return out


def settings_rows(specs: SpecSet) -> list[dict]:
    return [{"id": s.id, "env": s.env, "replaces": list(s.replaces), "purpose": s.purpose,
             "evidence": s.evidence} for s in specs.settings]


def summary(rows_: list[dict]) -> dict[str, int]:
    """``{classification: count}`` plus ``{status: count}`` under ``status:<name>`` keys."""
    out: dict[str, int] = {}
    for r in rows_:
        out[r["classification"]] = out.get(r["classification"], 0) + 1
        key = f"status:{r['status']}"
        out[key] = out.get(key, 0) + 1
    return out
