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
  a systematic expert, a mis-mixed token (below), or a global error above the envelope's
  ``garbage_rel`` / a cosine below ``garbage_cosine`` (W4A4: ``garbage_rel_w4a4``) against the
  reference AND against each other expected output (twin, unquantized forward);
- ``correct``: global error <= ``correct_rel`` and every cell within ``DEV_CORRECT`` of the twin
  (W4A4 backends: nothing flagged; their cells carry their own activation rounding);
- ``degraded``: otherwise. When the cells sit farther than ``DEV_CORRECT`` from the twin but every
  cell is at most ``FORMAT_CLOSER`` x that worst deviation from the unquantized forward, the
  reason says *weight-format mismatch* (the backend computes with more precise weights than the
  checkpoint's NVFP4) and ``format_mismatch`` is set.

Every out-of-envelope cell flags both its expert and its token; within a flagged expert, every
cell deviating more than ``DEV_CORRECT`` from its nearest expected output (beyond rounding, but
under the floor-relative cell limit: a near-cancelling output) flags its token too; every
out-of-envelope main-run row flags its token and the experts of its cells that deviate more than
``DEV_CORRECT``. Completeness (issue 32): a garbage backend (not W4A4) also names every token whose
main-run row deviates more than ``DEV_CORRECT`` from its nearest expected output, and every token with
a cell beyond ``DEV_CORRECT`` in a flagged expert, the "shared by all experts" set included.

Per expert and per token (issue 21; thresholds and the measurements that set them in
``notes/correctness.md``):

- *systematic expert*: an expert whose pooled deviation (:func:`pooled_deviation`) is beyond its
  rounding band, consistently across its cells, is garbage even when every output is under the
  global limit (:func:`systematic_experts`); it names every token it served;
- *W4A4 backends* are judged in units of the null family's band: the largest deviation from
  emulated-w4a4 that any legitimate activation quantizer (block scales rounded up or down; per-expert,
  per-token or power-of-two global scales) reaches on the same problem in the same cell / expert /
  token / layer (:func:`sm120lab.moe.envelope.null_bands`): cells beyond ``W4A4_CELL_Z`` x band,
  experts beyond ``W4A4_EXPERT_Z`` x band, the layer beyond ``W4A4_GLOBAL_Z`` x band;
- *mixing*: a main-run token farther than ``MIX_LIMIT`` from the routing-weighted sum of the
  backend's own per-slot outputs got wrong routing weights: garbage, the token named, no expert;
- *shared by all experts*: with at least ``SHARED_MIN_EXPERTS`` routed experts each beyond its
  rounding and no majority singled out, the deviation is called shared (``Judgement.shared``,
  every routed expert flagged) and the verdict is the envelope's (correct, degraded or garbage).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sm120lab.enums import StrEnum

__all__ = ["DEV_CORRECT", "DEV_GARBAGE", "EXPERT_CONSISTENT", "EXPERT_DEV", "EXPERT_RATIO", "FORMAT_CLOSER", "MIX_LIMIT",
           "ROUNDING_FLOOR", "SHARED_CELL_SHARE", "SHARED_MIN_EXPERTS", "TOKEN_GARBAGE", "W4A4_CELL_Z", "W4A4_EXPERT_Z", "W4A4_GLOBAL_Z", "Judgement", "Verdict",
           "cosine_at", "judge", "pooled_deviation", "systematic_experts", "w4a4_expert_band", "w4a4_layer_limit"]


class Verdict(StrEnum):
    """What the harness concluded about one backend on one problem (a str: JSON and ``==`` work)."""

    CORRECT = "correct"
    DEGRADED = "degraded"
    GARBAGE = "garbage"
    SKIPPED = "skipped"
    ERROR = "error"


#: a correct backend reproduces its expected numerics per cell to within rounding (bf16: ~1.5%;
#: a W4A4 kernel with other rounding of scales: a few %); a fault is O(1)
DEV_CORRECT = 0.1
#: deviation (from the nearest expected output) beyond which a cell or token is out of envelope
DEV_GARBAGE = 0.5
#: format mismatch: every cell at most this fraction of the worst NVFP4 deviation from the unquantized weights
FORMAT_CLOSER = 0.5
#: kept for callers that printed it: main-run tokens use ``DEV_GARBAGE`` like the cells
TOKEN_GARBAGE = DEV_GARBAGE
#: systematic expert (16-bit-activation backends): pooled deviation above this ...
EXPERT_DEV = 0.03
#: ... and this many times its rounding band: the median pooled deviation of the other routed
#: experts, at least ``ROUNDING_FLOOR`` (bf16 output rounding)
EXPERT_RATIO = 8.0
ROUNDING_FLOOR = 0.003  # EXPERT_RATIO x this stays under EXPERT_DEV: EXPERT_DEV is the floor next to exact experts
#: ... with at least this fraction of its cells deviating more than ``EXPERT_DEV / 2`` (consistent)
EXPERT_CONSISTENT = 0.5
#: W4A4 backends are judged in units of the null family's band (``BackendReport.cell_band`` etc.: the largest
#: deviation from emulated-w4a4 any legitimate activation quantizer reaches on the same problem, at the same
#: level; :func:`sm120lab.moe.envelope.null_bands`). A cell or main-run token is out of envelope beyond
#: ``DEV_GARBAGE`` AND ``W4A4_CELL_Z`` x its band (a cell's band: at least its expert's); an expert is systematic
#: beyond ``W4A4_EXPERT_Z`` x its band; the layer is garbage beyond ``W4A4_GLOBAL_Z`` x the layer band (at
#: least the 16-bit limit). Each Z is the largest leave-one-out ratio measured over the calibration sweep
#: (each member judged by the others' band) times 2, rounded up (notes/correctness.md: the largest over 11,460
#: CPU problems, seeds 43000000 and 50000000, were token 8.55, expert 8.29, layer 5.70)
W4A4_CELL_Z = 18.0
W4A4_EXPERT_Z = 17.0
W4A4_GLOBAL_Z = 12.0
#: mixing: a main-run token farther than this from the weighted sum of the backend's own per-slot
#: probe outputs (relative, floored) combined its experts with wrong weights
MIX_LIMIT = 0.05
#: "shared by all experts" needs at least this many routed experts, every one's pooled deviation
#: beyond ``EXPERT_DEV`` (W4A4 backends: ``DEV_CORRECT``, their twin's rounding)
SHARED_MIN_EXPERTS = 3
#: ... and the experts beyond the shared limit hold at least this share of the routed cells
SHARED_CELL_SHARE = 0.95


@dataclass
class Judgement:
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    flagged_experts: list[int] = field(default_factory=list)
    flagged_tokens: list[int] = field(default_factory=list)
    format_mismatch: bool = False
    shared: bool = False   # the deviation lives in every routed expert alike (flagged_experts = all of them)


def _fmt(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3g}"


def _worst(items, score, n: int = 8) -> list[int]:
    return sorted(items, key=lambda i: -np.nan_to_num(score[i], nan=0.0, posinf=1e300))[:n]


def _beyond(dev: np.ndarray, dev_alt: np.ndarray | None) -> np.ndarray:
    """Out of envelope by deviation: farther than DEV_GARBAGE from the twin and from every member of the
    weight-format family (the nearest one)."""
    far = ~(dev <= DEV_GARBAGE)  # NaN counts as far
    if dev_alt is not None:
        far &= ~(dev_alt <= DEV_GARBAGE)
    return far


def _beyond_band(dev: np.ndarray, band: np.ndarray | None) -> np.ndarray:
    """W4A4: beyond DEV_GARBAGE and beyond W4A4_CELL_Z x the activation-rounding band (NaN counts as far)."""
    far = ~(dev <= DEV_GARBAGE)
    return far if band is None else far & ~(dev <= W4A4_CELL_Z * band)


def _w4a4(report) -> bool:
    return report.numerics == "w4a4" and getattr(report, "expert_band", None) is not None


def pooled_deviation(report, skip: np.ndarray | None = None) -> np.ndarray:
    """Per expert [E]: the pooled deviation from the nearest expected output (NaN: no cell counted).

    ``sqrt(sum ||O - X||^2 / sum max(||X||^2, floor^2))`` over the expert's cells (except those in the
    bool [T, k] mask ``skip``), X the twin, or the unquantized-weight forward where that is nearer for
    the expert as a whole.
    """
    from .metrics import expert_pool

    c = report.cells
    num_e = len(report.per_expert)
    keep = np.ones(c.ids.shape, dtype=bool) if skip is None else ~skip
    ids = np.where(keep, c.ids, num_e)  # skipped cells go to a spare bin, dropped below

    def pool(num, den):
        return expert_pool(np.where(keep, num, 0.0), np.where(keep, den, 0.0), ids, num_e + 1)[:num_e]

    pooled = pool(c.dev_num, c.dev_den)
    if c.alt_num is not None:
        pooled = np.fmin(pooled, pool(c.alt_num, c.alt_den))
    return pooled


def w4a4_expert_band(report) -> np.ndarray:
    """W4A4: each expert's band [E], the null family's largest pooled deviation from emulated-w4a4 there (at
    least 1e-12; NaN for experts nothing was routed to)."""
    return np.maximum(report.expert_band, 1e-12)


def w4a4_layer_limit(report, env) -> tuple[float, float]:
    """W4A4: (relative error, cosine) garbage limits of the whole output: ``max(garbage_rel, W4A4_GLOBAL_Z x
    layer band)``, the band of the report's own null family (itself left out when it is a member)."""
    band = getattr(report, "layer_band", None)
    if band is None or not np.isfinite(band):
        return env.garbage_rel_w4a4, env.garbage_cosine_w4a4
    rel = max(env.garbage_rel, W4A4_GLOBAL_Z * float(band))
    return rel, cosine_at(rel)


def cosine_at(rel: float) -> float:
    """min(0.9, 1/sqrt(1 + rel^2)): the cosine of an output whose uncorrelated error is ``rel``."""
    return min(0.9, 1.0 / float(np.sqrt(1.0 + rel ** 2)))


def systematic_experts(report, near: np.ndarray, hot: np.ndarray | None = None) -> tuple[list[int], np.ndarray]:
    """Experts whose deviation is systematic: consistent across their cells and beyond their rounding band.

    16-bit-activation backends: pooled deviation > ``EXPERT_DEV`` and > ``EXPERT_RATIO`` x the median
    pooled deviation of the other routed experts (at least ``ROUNDING_FLOOR``), with at least
    ``EXPERT_CONSISTENT`` of its cells beyond ``EXPERT_DEV / 2``; an expert that served one cell, while
    another routed expert deviates beyond ``ROUNDING_FLOOR`` too, only beyond ``DEV_GARBAGE`` (the cell rule).
    W4A4 backends: the pooled deviation in
    units of the expert's band (the null family's largest pooled deviation from emulated-w4a4 there) >
    ``W4A4_EXPERT_Z`` and > 2 x the other experts' median (a deviation of its own, not a shared one), with
    the same consistency beyond half that limit.

    Cells in ``hot`` (already out of envelope) are left out: the question is whether the rest of
    the expert is off too.

    Returns (experts, pooled deviation per expert [E]).
    """
    pooled = pooled_deviation(report, hot)
    ids = report.cells.ids
    cold = np.ones(ids.shape, dtype=bool) if hot is None else ~hot
    w4a4 = _w4a4(report)
    band = w4a4_expert_band(report) if w4a4 else None
    score = pooled / band if w4a4 else pooled
    routed = np.flatnonzero(np.isfinite(score))
    out = []
    for e in routed:
        others = score[np.setdiff1d(routed, [e])]
        others = others[np.isfinite(others)]
        mine = (ids == e) & cold
        if w4a4:
            base = max(1.0, float(np.median(others))) if others.size else 1.0
            beyond = score[e] > W4A4_EXPERT_Z and score[e] > 2.0 * base
            cell_limit = 0.5 * W4A4_EXPERT_Z * band[e]
        else:
            base = max(ROUNDING_FLOOR, float(np.median(others))) if others.size else ROUNDING_FLOOR
            beyond = score[e] > EXPERT_DEV and score[e] > EXPERT_RATIO * base
            if beyond and mine.sum() < 2 and others.size and float(np.max(others)) > ROUNDING_FLOOR:
                # one cell is a pattern only against an otherwise exact backend; where the other experts
                # deviate too (the backend's own numerics), a lone cell is judged by the cell rule
                beyond = score[e] > DEV_GARBAGE
            cell_limit = EXPERT_DEV / 2
        if beyond and mine.any() and np.mean(~(near[mine] <= cell_limit)) >= EXPERT_CONSISTENT:
            out.append(int(e))
    return out, pooled


def _cell_judgement(report, reasons: list[str]):
    """Out-of-envelope cells, systematic experts, shared deviation. Returns a dict of findings."""
    cells = report.cells
    w4a4 = _w4a4(report)
    dev, dev_alt = cells.dev, cells.dev_alt
    near = dev if dev_alt is None else np.minimum(dev, dev_alt)
    broken = cells.bad | cells.zero | ~np.isfinite(dev)
    if w4a4:
        band = np.maximum(report.cell_band, report.expert_band[cells.ids])
        far = _beyond_band(dev, band) & ~broken
    else:
        far = _beyond(dev, dev_alt) & ~broken
    hot = broken | far
    out = {"garbage": False, "tokens": set(), "experts": set(), "max_dev": float(np.max(dev)) if dev.size else 0.0,
           "near": near, "hot": hot, "shared": False}
    if broken.any():
        out["garbage"] = True
        reasons.append(f"{int(broken.sum())} (token, expert) cell(s) NaN/untouched/zero in the per-slot probes")
    if far.any():
        out["garbage"] = True
        worst = float(np.max(np.where(far, dev, 0.0)))
        limit = f"{DEV_GARBAGE} and {W4A4_CELL_Z:g}x its activation-rounding band" if w4a4 else str(DEV_GARBAGE)
        reasons.append(f"{int(far.sum())} (token, expert) cell(s) deviate > {limit} from the expected "
                       f"numerics{'' if dev_alt is None else ' and from the unquantized weights'} (worst {_fmt(worst)})")
    systematic, _ = systematic_experts(report, near, hot)
    pooled = pooled_deviation(report)
    routed = np.flatnonzero(~np.isnan(pooled))
    out["experts"] = {int(e) for e in cells.ids[hot]} | set(systematic)
    if systematic:
        out["garbage"] = True
        unit = "x its activation-rounding band" if w4a4 else ""
        score = pooled / w4a4_expert_band(report) if w4a4 else pooled
        lone = [e for e in systematic if np.count_nonzero(cells.ids == e) == 1]
        many = [e for e in systematic if e not in lone]

        def listed(es):
            return ", ".join(f"{e} ({_fmt(score[e])}{unit})" for e in es[:8])

        if many:
            reasons.append(f"{len(many)} expert(s) deviate systematically (every cell alike, beyond the rounding "
                           f"band of the other experts): {listed(many)}")
        if lone:
            reasons.append(f"{len(lone)} expert(s) deviate in the one cell each served, beyond the rounding band of "
                           f"the other experts: {listed(lone)}; one cell cannot tell the expert's own bug from one "
                           "shared by all experts that shows only there")
    shared_limit = DEV_CORRECT if w4a4 else EXPERT_DEV
    beyond_all = False
    if routed.size >= SHARED_MIN_EXPERTS:
        # every routed expert beyond the limit, but for experts too lightly loaded to show a shared bug: those
        # beyond it hold >= SHARED_CELL_SHARE of the routed cells (a gate/up swap is invisible on an expert
        # whose 2 tokens have small pre-activations, where silu(g) u ~ g u / 2 ~ silu(u) g)
        beyond = ~(pooled[routed] <= shared_limit)
        load = np.array([np.count_nonzero(cells.ids == e) for e in routed])
        beyond_all = (int(beyond.sum()) >= SHARED_MIN_EXPERTS
                      and float(load[beyond].sum()) >= SHARED_CELL_SHARE * float(load.sum()))
    out["shared"] = beyond_all and len(systematic) < routed.size // 2 + 1
    out["routed"] = [int(e) for e in routed]
    out["pooled"] = pooled
    t_idx, _ = np.nonzero(hot)
    out["tokens"] |= {int(t) for t in t_idx}
    if systematic:  # an expert broken as a whole names every token it served
        out["tokens"] |= {int(t) for t in np.nonzero(np.isin(cells.ids, systematic))[0]}
    if out["experts"] and not w4a4:  # within a broken expert, every cell off by more than rounding names its token
        off = np.isin(cells.ids, sorted(out["experts"])) & ~(near <= DEV_CORRECT)
        out["tokens"] |= {int(t) for t in np.nonzero(off)[0]}
    if dev_alt is not None and dev_alt.size and out["max_dev"] > DEV_CORRECT and not hot.any() and not systematic:
        out["max_alt"] = float(np.max(dev_alt))
    return out


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
    w4a4 = _w4a4(report) and getattr(env, "garbage_rel_w4a4", None) is not None
    g_rel, g_cos = (w4a4_layer_limit(report, env) if w4a4 else (env.garbage_rel, env.garbage_cosine))
    if np.isfinite(rel_near) and rel_near > g_rel:
        garbage = True
        reasons.append(f"rel err {_fmt(d.rel_fro)} > garbage limit {_fmt(g_rel)}{nearest}")
    if cos_near < g_cos:
        garbage = True
        reasons.append(f"cosine {d.cosine:.3f} < {g_cos:.3f}{nearest}")

    tokens: set[int] = set()
    experts: set[int] = set()
    max_dev = 0.0
    max_alt = None
    shared = False
    routed: list[int] = []
    found = None
    if report.cells is not None:
        found = _cell_judgement(report, reasons)
        garbage |= found["garbage"]
        tokens |= found["tokens"]
        experts |= found["experts"]
        max_dev, max_alt, shared, routed = found["max_dev"], found.get("max_alt"), found["shared"], found["routed"]
    tok = report.token_dev
    if tok is not None:
        tband = getattr(report, "token_band", None) if _w4a4(report) else None
        far_main = _beyond_band(tok.dev, tband) if _w4a4(report) else _beyond(tok.dev, tok.dev_alt)
        far_t = far_main | tok.bad | tok.zero
        if far_t.any():
            garbage = True
            tokens |= {int(t) for t in np.nonzero(far_t)[0]}
            if found is not None:
                off = far_t[:, None] & ~(found["near"] <= DEV_CORRECT)
                if not _w4a4(report):
                    experts |= {int(e) for e in report.cells.ids[off]}
            reasons.append(f"{int(far_t.sum())} main-run token row(s) out of envelope (NaN/untouched/zero or deviating "
                           f"> {DEV_GARBAGE} from the expected numerics)")
    mix = getattr(report, "mixing", None)
    if mix is not None:
        mixed = (mix > MIX_LIMIT) & np.isfinite(mix)  # NaN/untouched rows are reported above
        if mixed.any():
            garbage = True
            tokens |= {int(t) for t in np.nonzero(mixed)[0]}
            worst = _worst(list(np.nonzero(mixed)[0]), mix)
            reasons.append(f"{int(mixed.sum())} token(s) whose main-run output is not the routing-weighted sum of its "
                           f"experts' own outputs (> {MIX_LIMIT} off; routing weights wrong), worst: "
                           + ", ".join(f"{t} ({_fmt(mix[t])})" for t in worst))
    format_mismatch = max_alt is not None and max_alt <= FORMAT_CLOSER * max_dev and not garbage
    correct = (not garbage and d.rel_fro <= env.correct_rel
               and (max_dev <= DEV_CORRECT or (_w4a4(report) and not experts and not tokens)))
    shared = shared and not correct and not format_mismatch
    if shared:
        experts |= set(routed)
        pooled = found["pooled"][routed]
        reasons.append(f"shared by all {len(routed)} routed experts: each deviates from the expected numerics "
                       f"(pooled {_fmt(float(np.min(pooled)))}-{_fmt(float(np.max(pooled)))}); a bug common to every "
                       "expert (e.g. the activation quantizer or the weight layout), not in one of them")
    if garbage and not _w4a4(report):
        # completeness (issue 32): a garbage backend names every token off by more than rounding, through its
        # main-run row or through a cell of a flagged expert (the shared set included: a fault that scales each
        # token in every run, such as weights from a softmax over all E logits, moves no mixing and leaves
        # cells between DEV_CORRECT and DEV_GARBAGE in experts that no out-of-envelope cell named)
        if tok is not None:
            near_t = tok.dev if tok.dev_alt is None else np.fmin(tok.dev, tok.dev_alt)
            tokens |= {int(t) for t in np.nonzero(~(near_t <= DEV_CORRECT))[0]}
        if found is not None and experts:
            off = np.isin(report.cells.ids, sorted(experts)) & ~(found["near"] <= DEV_CORRECT)
            tokens |= {int(t) for t in np.nonzero(off)[0]}
    flagged_tokens = sorted(tokens)
    if flagged_tokens:
        pt = d.per_token
        reasons.append(f"{len(flagged_tokens)} token(s) flagged, worst (rel err vs reference): "
                       + ", ".join(f"{t} ({_fmt(pt[t])})" for t in _worst(flagged_tokens, pt)))
    flagged_experts = sorted(experts)
    if experts and not shared and report.per_expert is not None:
        per = report.per_expert
        reasons.append("worst experts (rel err vs reference): "
                       + ", ".join(f"{e} ({_fmt(per[e])})" for e in _worst(flagged_experts, per)))

    if garbage:
        return Judgement(Verdict.GARBAGE, reasons, flagged_experts, flagged_tokens, shared=shared)
    if correct:
        return Judgement(Verdict.CORRECT, reasons or [f"rel err {_fmt(d.rel_fro)} within band {_fmt(env.correct_rel)}"],
                         flagged_experts, flagged_tokens)
    if format_mismatch:
        reasons.insert(0, f"weight-format mismatch: cells deviate up to {_fmt(max_dev)} from the NVFP4 numerics but "
                          f"only {_fmt(max_alt)} from the unquantized weights (the backend computes with weights more "
                          f"precise than the checkpoint's NVFP4; rel err {_fmt(d.rel_fro)}, band {_fmt(env.correct_rel)})")
    else:
        reasons.insert(0, f"rel err {_fmt(d.rel_fro)} (band {_fmt(env.correct_rel)}) / worst cell deviation "
                          f"{_fmt(max_dev)} (correct <= {DEV_CORRECT}): outside the band but below garbage")
    return Judgement(Verdict.DEGRADED, reasons, flagged_experts, flagged_tokens, format_mismatch, shared)
