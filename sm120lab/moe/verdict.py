"""correct / degraded / garbage for one backend report.

Rules: any NaN/Inf, untouched element or exact-zero row (main run or a per-slot probe), a global
error above the envelope's ``garbage_rel``, a cosine below its ``garbage_cosine`` (<= 0.9), or a (token, expert) cell deviating
from the expected numerics by more than ``DEV_GARBAGE`` -> ``garbage``. Global error <=
``correct_rel`` and every cell deviation <= ``DEV_CORRECT`` -> ``correct``; else ``degraded``.
Flagged experts: those with a cell deviation > ``DEV_GARBAGE`` or a bad/zero cell; flagged
tokens: per-token error vs the reference non-finite or > 1 (the output row is unrelated to the
right one). The worst experts/tokens are listed by error.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEV_CORRECT", "DEV_GARBAGE", "TOKEN_GARBAGE", "judge"]

#: a correct backend reproduces its expected numerics per cell to within rounding (bf16: ~0.5%;
#: a W4A4 kernel with other rounding of scales: a few %); a fault is O(1)
DEV_CORRECT = 0.1
DEV_GARBAGE = 0.5
TOKEN_GARBAGE = 1.0


def _fmt(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3g}"


def judge(report, env) -> tuple[str, list[str], list[int], list[int]]:
    """-> (verdict, reasons, flagged experts, flagged tokens)."""
    d = report.diff
    reasons: list[str] = []
    garbage = False
    for label, count in (("NaN", d.nan), ("Inf", d.inf), ("untouched (sentinel)", d.untouched)):
        if count:
            garbage = True
            reasons.append(f"{count} {label} output element(s)")
    if d.zero_rows:
        garbage = True
        reasons.append(f"{len(d.zero_rows)} exact-zero output row(s) where the reference is nonzero (tokens {d.zero_rows[:5]})")
    if np.isfinite(d.rel_fro) and d.rel_fro > env.garbage_rel:
        garbage = True
        reasons.append(f"rel err {_fmt(d.rel_fro)} > garbage limit {_fmt(env.garbage_rel)}")
    if d.cosine < env.garbage_cosine:
        garbage = True
        reasons.append(f"cosine {d.cosine:.3f} < {env.garbage_cosine:.3f}")

    flagged_experts: list[int] = []
    max_dev = 0.0
    if report.cells is not None:
        dev = report.cells.dev
        max_dev = float(np.max(dev)) if dev.size else 0.0
        bad_cells = report.cells.bad | report.cells.zero | ~np.isfinite(dev)
        if bad_cells.any():
            garbage = True
            reasons.append(f"{int(bad_cells.sum())} (token, expert) cell(s) NaN/untouched/zero in the per-slot probes")
        if max_dev > DEV_GARBAGE:
            garbage = True
            reasons.append(f"worst (token, expert) cell deviates {_fmt(max_dev)} from the expected numerics (> {DEV_GARBAGE})")
        ids = report.cells.ids
        hot = (dev > DEV_GARBAGE) | bad_cells
        flagged_experts = sorted({int(e) for e in ids[hot]})
        if flagged_experts:
            per = report.per_expert
            worst = sorted(flagged_experts, key=lambda e: -np.nan_to_num(per[e], nan=0.0, posinf=1e300))[:8]
            reasons.append("worst experts (rel err vs reference): " + ", ".join(f"{e} ({_fmt(per[e])})" for e in worst))
    pt = d.per_token
    flagged_tokens = [int(t) for t in np.nonzero((pt > TOKEN_GARBAGE) | ~np.isfinite(pt))[0]]
    if flagged_tokens:
        worst_t = sorted(flagged_tokens, key=lambda t: -np.nan_to_num(pt[t], posinf=1e300))[:8]
        reasons.append(f"{len(flagged_tokens)} token(s) with error > {TOKEN_GARBAGE}, worst: "
                       + ", ".join(f"{t} ({_fmt(pt[t])})" for t in worst_t))

    if garbage:
        return "garbage", reasons, flagged_experts, flagged_tokens
    if d.rel_fro <= env.correct_rel and max_dev <= DEV_CORRECT:
        return "correct", reasons or [f"rel err {_fmt(d.rel_fro)} within band {_fmt(env.correct_rel)}"], flagged_experts, flagged_tokens
    reasons.insert(0, f"rel err {_fmt(d.rel_fro)} (band {_fmt(env.correct_rel)}) / worst cell deviation "
                      f"{_fmt(max_dev)} (correct <= {DEV_CORRECT}): outside the band but below garbage")
    return "degraded", reasons, flagged_experts, flagged_tokens
