"""The verdict vocabulary, and correct / degraded / garbage for one backend report.

A backend is judged against two expected outputs the harness computes on the same problem:

- the *twin*: its expected numerics (``emulated-w4a4`` for a W4A4 backend, the reference
  otherwise);
- the *unquantized-weight forward* of the envelope (bf16 weights, exact math; for backends
  that are not W4A4): what a correct backend whose weights are in a different, more precise
  format than the NVFP4 checkpoint (FP8, bf16) computes. Its distance from the reference is the
  per-cell NVFP4 weight error, which reaches ~1 on small shapes.

Per (token, expert) cell (per-slot probes) and per token (main run), the deviation is
``||O - X|| / max(||X||, 0.1 median ||X||)`` against each expected output X. A cell or token is
*out of envelope* when it is NaN/Inf/untouched, exactly zero where X is not, or farther than
``DEV_GARBAGE`` from the twin AND (where the unquantized forward exists) from it too: the cell
limit is set per problem and per cell by the nearest expected output the envelope measured.

Rules:

- ``garbage``: any out-of-envelope cell or token, any NaN/Inf/untouched element or exact-zero row,
  or a global error above the envelope's ``garbage_rel`` / a cosine below ``garbage_cosine``
  against the reference AND against each other expected output (twin, unquantized forward);
- ``correct``: global error <= ``correct_rel`` and every cell within ``DEV_CORRECT`` of the twin;
- ``degraded``: otherwise. When the cells sit farther than ``DEV_CORRECT`` from the twin but every
  cell is at most ``FORMAT_CLOSER`` x that worst deviation from the unquantized forward, the
  reason says *weight-format mismatch* (the backend computes with more precise weights than the
  checkpoint's NVFP4) and ``format_mismatch`` is set.

Every out-of-envelope cell flags both its expert and its token; within a flagged expert, every
cell deviating more than ``DEV_CORRECT`` from its nearest expected output (beyond rounding, but
under the floor-relative cell limit: a near-cancelling output) flags its token too; every
out-of-envelope main-run row flags its token and the experts of its cells that deviate more than
``DEV_CORRECT``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

__all__ = ["DEV_CORRECT", "DEV_GARBAGE", "FORMAT_CLOSER", "TOKEN_GARBAGE", "Judgement", "Verdict", "judge"]


class Verdict(str, Enum):
    """What the harness concluded about one backend on one problem (a str: JSON and ``==`` work)."""

    CORRECT = "correct"
    DEGRADED = "degraded"
    GARBAGE = "garbage"
    SKIPPED = "skipped"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


#: a correct backend reproduces its expected numerics per cell to within rounding (bf16: ~1.5%;
#: a W4A4 kernel with other rounding of scales: a few %); a fault is O(1)
DEV_CORRECT = 0.1
#: deviation (from the nearest expected output) beyond which a cell or token is out of envelope
DEV_GARBAGE = 0.5
#: format mismatch: every cell at most this fraction of the worst NVFP4 deviation from the unquantized weights
FORMAT_CLOSER = 0.5
#: kept for callers that printed it: main-run tokens use ``DEV_GARBAGE`` like the cells
TOKEN_GARBAGE = DEV_GARBAGE


@dataclass
class Judgement:
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    flagged_experts: list[int] = field(default_factory=list)
    flagged_tokens: list[int] = field(default_factory=list)
    format_mismatch: bool = False


def _fmt(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3g}"


def _worst(items, score, n: int = 8) -> list[int]:
    return sorted(items, key=lambda i: -np.nan_to_num(score[i], nan=0.0, posinf=1e300))[:n]


def _beyond(dev: np.ndarray, dev_alt: np.ndarray | None) -> np.ndarray:
    """Out of envelope by deviation: farther than DEV_GARBAGE from the twin and from the alternative."""
    far = ~(dev <= DEV_GARBAGE)  # NaN counts as far
    if dev_alt is not None:
        far &= ~(dev_alt <= DEV_GARBAGE)
    return far


def judge(report, env) -> Judgement:
    """Verdict, reasons, flagged experts and tokens of one ``BackendReport`` under ``env``."""
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
    others = [x for x in (getattr(report, "diff_twin", None), getattr(report, "diff_alt", None)) if x is not None]
    rel_near = min([d.rel_fro] + [x.rel_fro for x in others])
    cos_near = max([d.cosine] + [x.cosine for x in others])
    nearest = "" if not others else " (and vs every expected output)"
    if np.isfinite(rel_near) and rel_near > env.garbage_rel:
        garbage = True
        reasons.append(f"rel err {_fmt(d.rel_fro)} > garbage limit {_fmt(env.garbage_rel)}{nearest}")
    if cos_near < env.garbage_cosine:
        garbage = True
        reasons.append(f"cosine {d.cosine:.3f} < {env.garbage_cosine:.3f}{nearest}")

    tokens: set[int] = set()
    experts: set[int] = set()
    max_dev = max_alt = 0.0
    format_mismatch = False
    cells = report.cells
    if cells is not None:
        dev, dev_alt = cells.dev, cells.dev_alt
        max_dev = float(np.max(dev)) if dev.size else 0.0
        broken = cells.bad | cells.zero | ~np.isfinite(dev)
        far = _beyond(dev, dev_alt) & ~broken
        hot = broken | far
        if broken.any():
            garbage = True
            reasons.append(f"{int(broken.sum())} (token, expert) cell(s) NaN/untouched/zero in the per-slot probes")
        if far.any():
            garbage = True
            worst = float(np.max(np.where(far, dev, 0.0)))
            reasons.append(f"{int(far.sum())} (token, expert) cell(s) deviate > {DEV_GARBAGE} from the expected "
                           f"numerics{'' if dev_alt is None else ' and from the unquantized weights'} (worst {_fmt(worst)})")
        t_idx, _ = np.nonzero(hot)
        tokens |= {int(t) for t in t_idx}
        experts = {int(e) for e in cells.ids[hot]}
        if experts:  # within a broken expert, every cell off by more than rounding names its token
            near = dev if dev_alt is None else np.minimum(dev, dev_alt)
            off = np.isin(cells.ids, sorted(experts)) & ~(near <= DEV_CORRECT)
            tokens |= {int(t) for t in np.nonzero(off)[0]}
        if dev_alt is not None and dev_alt.size and max_dev > DEV_CORRECT and not hot.any():
            max_alt = float(np.max(dev_alt))
            format_mismatch = max_alt <= FORMAT_CLOSER * max_dev
        if experts:
            per = report.per_expert
            reasons.append("worst experts (rel err vs reference): "
                           + ", ".join(f"{e} ({_fmt(per[e])})" for e in _worst(sorted(experts), per)))
    tok = report.token_dev
    if tok is not None:
        far_t = _beyond(tok.dev, tok.dev_alt) | tok.bad | tok.zero
        if far_t.any():
            garbage = True
            tokens |= {int(t) for t in np.nonzero(far_t)[0]}
            if cells is not None:
                near = dev if dev_alt is None else np.minimum(dev, dev_alt)
                off = far_t[:, None] & ~(near <= DEV_CORRECT)
                experts |= {int(e) for e in cells.ids[off]}
            reasons.append(f"{int(far_t.sum())} main-run token row(s) out of envelope (NaN/untouched/zero or deviating "
                           f"> {DEV_GARBAGE} from the expected numerics)")
    flagged_tokens = sorted(tokens)
    if flagged_tokens:
        pt = d.per_token
        reasons.append(f"{len(flagged_tokens)} token(s) flagged, worst (rel err vs reference): "
                       + ", ".join(f"{t} ({_fmt(pt[t])})" for t in _worst(flagged_tokens, pt)))
    flagged_experts = sorted(experts)

    if garbage:
        return Judgement(Verdict.GARBAGE, reasons, flagged_experts, flagged_tokens)
    if d.rel_fro <= env.correct_rel and max_dev <= DEV_CORRECT:
        return Judgement(Verdict.CORRECT, reasons or [f"rel err {_fmt(d.rel_fro)} within band {_fmt(env.correct_rel)}"],
                         flagged_experts, flagged_tokens)
    if format_mismatch:
        reasons.insert(0, f"weight-format mismatch: cells deviate up to {_fmt(max_dev)} from the NVFP4 numerics but "
                          f"only {_fmt(max_alt)} from the unquantized weights (the backend computes with weights more "
                          f"precise than the checkpoint's NVFP4; rel err {_fmt(d.rel_fro)}, band {_fmt(env.correct_rel)})")
    else:
        reasons.insert(0, f"rel err {_fmt(d.rel_fro)} (band {_fmt(env.correct_rel)}) / worst cell deviation "
                          f"{_fmt(max_dev)} (correct <= {DEV_CORRECT}): outside the band but below garbage")
    return Judgement(Verdict.DEGRADED, reasons, flagged_experts, flagged_tokens, format_mismatch)
