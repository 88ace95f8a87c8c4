"""Planted faults: real backends, each broken in exactly one step of the grouped-GEMM chain.

They run the exact grouped forward of :mod:`.grouping` (dequantized NVFP4 weights, 16-bit-free
fp64/fp32 math) with one deliberate bug, so a healthy expert's error is ~0 and the harness must
both catch the fault (verdict ``garbage``) and localize it (``flagged_experts``/``flagged_tokens``)
to exactly what :meth:`FaultyBackend.expected_experts` / ``expected_tokens`` say (the tokens whose
(token, expert) cells the fault breaks). The tests and notebook 03
use them; they are not in the default registry (:func:`register_faults` adds them).

Faults: swapped experts (an expert-id map bug), one expert's group zeroed, linear block scales read
as 128x4-swizzled (a scale-layout mix-up: nothing crashes, every expert is wrong), per-expert global
scales ignored, weights read in the wrong major order (transposed), an off-by-one group offset, a
kernel that writes zeros, NaN in one token's row; and (in ``SUBTLE_FAULTS``) gate/up (w1/w3)
halves swapped. Each is a plausible bug class of a grouped NVFP4 GEMM, planted to test the
harness; none is claimed to be the cause of any reported failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sm120lab.nvfp4 import NVFP4Tensor

from .backends.base import Backend, Needs
from .grouping import group_by_expert, grouped_moe_forward
from .reference import dequantize_expert

__all__ = ["FAULTS", "SUBTLE_FAULTS", "TOKEN_RECALL", "FaultOutcome", "FaultyBackend", "SoftmaxOverAllExperts", "all_faults", "judge_fault",
           "register_faults", "target_expert"]


def _dtype(device) -> torch.dtype:
    return torch.float64 if torch.device(device).type == "cpu" else torch.float32


def _routed(problem) -> list[int]:
    return sorted(set(problem.topk_ids.reshape(-1).tolist()))


def _by_load(problem) -> list[int]:
    counts = problem.expert_counts().tolist()
    return sorted((e for e in range(len(counts)) if counts[e] > 0), key=lambda e: (-counts[e], e))


class FaultyBackend(Backend):
    """Exact grouped forward with hooks; subclasses override one hook."""

    needs = Needs()
    out_dtype = torch.float32
    numerics = "w4a16"
    fault = ""
    #: True: the fault breaks every expert alike; the harness must say "shared by all experts"
    shared = False
    #: True: the verdict is left to the envelope (the fault need not be garbage, only localized)
    envelope_judged = False

    def output_dtype(self, device) -> torch.dtype:
        return _dtype(device)

    # hooks ---------------------------------------------------------------------------------
    def w13_of(self, problem, e: int, dtype) -> torch.Tensor:
        return dequantize_expert(problem.w13, e, dtype)

    def w2_of(self, problem, e: int, dtype) -> torch.Tensor:
        return dequantize_expert(problem.w2, e, dtype)

    def offsets(self, problem):
        return None

    def group_hook(self, problem):
        return None

    def finish(self, problem, out: torch.Tensor) -> None:
        pass

    def _altered(self, q: NVFP4Tensor, alter) -> NVFP4Tensor:
        """``alter(q)``, built once per weight tensor (the harness runs a backend k+1 times)."""
        memo = self.__dict__.setdefault("_memo", {})
        hit = memo.get(id(q))
        if hit is None or hit[0] is not q:
            if len(memo) >= 4:
                memo.clear()
            hit = memo[id(q)] = (q, alter(q))
        return hit[1]

    # what the harness must find ---------------------------------------------------------------
    def expected_experts(self, problem) -> set[int]:
        return set(_routed(problem))

    def expected_tokens(self, problem) -> set[int]:
        """Tokens routed to an expected expert (their cells are the broken ones)."""
        experts = torch.tensor(sorted(self.expected_experts(problem)), dtype=torch.long)
        hit = torch.isin(problem.topk_ids.cpu(), experts).any(dim=1)
        return {int(t) for t in torch.nonzero(hit).flatten()}

    def run(self, problem, out):
        dtype = out.dtype
        y = grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, problem.topk_weights, problem.config.E,
                                lambda e: self.w13_of(problem, e, dtype), lambda e: self.w2_of(problem, e, dtype),
                                offsets=self.offsets(problem), group_hook=self.group_hook(problem))
        out.copy_(y)
        self.finish(problem, out)
        return {"fault": self.fault}


class SwappedExperts(FaultyBackend):
    name, fault = "fault-swapped-experts", "the two most-loaded experts' weights swapped (expert-id map bug)"

    def _pair(self, problem):
        by_load = _by_load(problem)
        return (by_load[0], by_load[1]) if len(by_load) > 1 else (by_load[0], (by_load[0] + 1) % problem.config.E)

    def _map(self, problem, e):
        a, b = self._pair(problem)
        return b if e == a else a if e == b else e

    def w13_of(self, problem, e, dtype):
        return dequantize_expert(problem.w13, self._map(problem, e), dtype)

    def w2_of(self, problem, e, dtype):
        return dequantize_expert(problem.w2, self._map(problem, e), dtype)

    def expected_experts(self, problem):
        return set(self._pair(problem)) & set(_routed(problem))


class ZeroedGroup(FaultyBackend):
    name, fault = "fault-zeroed-group", "the most-loaded expert's group output left at zero"

    def group_hook(self, problem):
        target = _by_load(problem)[0]
        return lambda e, y: torch.zeros_like(y) if e == target else y

    def expected_experts(self, problem):
        return {_by_load(problem)[0]}


def _linear_bytes_as_swizzled(q: NVFP4Tensor) -> NVFP4Tensor:
    """The linear scale buffer handed to a kernel that reads it as 128x4-swizzled."""
    e, n, k = q.shape
    kb = k // q.block_size
    np_, kbp = -(-n // 128) * 128, -(-kb // 4) * 4
    raw = q.linear_scale().contiguous().view(torch.uint8).reshape(-1)
    buf = torch.zeros(e * np_ * kbp, dtype=torch.uint8, device=raw.device)
    buf[: raw.numel()] = raw
    wrong = buf.reshape(e, np_, kbp).view(torch.float8_e4m3fn)
    return NVFP4Tensor(data=q.data, scale=wrong, global_scale=q.global_scale, shape=q.shape, scale_layout="swizzled")


class LinearScalesAsSwizzled(FaultyBackend):
    name, fault = "fault-linear-as-swizzled", "linear block scales passed where 128x4-swizzled scales are expected"
    shared = True

    def w13_of(self, problem, e, dtype):
        return dequantize_expert(self._altered(problem.w13, _linear_bytes_as_swizzled), e, dtype)

    def w2_of(self, problem, e, dtype):
        return dequantize_expert(self._altered(problem.w2, _linear_bytes_as_swizzled), e, dtype)


class MissingGlobalScale(FaultyBackend):
    name, fault = "fault-missing-global-scale", "per-expert global scales ignored (alpha = 1)"
    shared = True

    @staticmethod
    def _no_gs(q: NVFP4Tensor) -> NVFP4Tensor:
        return NVFP4Tensor(data=q.data, scale=q.scale, global_scale=torch.ones_like(q.global_scale), shape=q.shape,
                           scale_layout=q.scale_layout)

    def w13_of(self, problem, e, dtype):
        return dequantize_expert(self._altered(problem.w13, self._no_gs), e, dtype)

    def w2_of(self, problem, e, dtype):
        return dequantize_expert(self._altered(problem.w2, self._no_gs), e, dtype)


class TransposedWeights(FaultyBackend):
    name, fault = "fault-transposed-weights", "[N, K] weights read as if stored [K, N] (wrong major order)"
    shared = True

    def w13_of(self, problem, e, dtype):
        w = dequantize_expert(problem.w13, e, dtype)
        return w.reshape(w.shape[1], w.shape[0]).T

    def w2_of(self, problem, e, dtype):
        w = dequantize_expert(problem.w2, e, dtype)
        return w.reshape(w.shape[1], w.shape[0]).T


class OffByOneOffsets(FaultyBackend):
    """The end offset of one routed group is one too small, so the group's last row (one (token, expert)
    cell) runs with expert ``target + 1``'s weights (:meth:`Grouping.bounds`).

    Which group: a routed expert below ``E - 1`` whose last row's token is not also routed to
    ``target + 1`` (there the cell would only move between two experts the token already uses, and no
    single expert is to blame). Among those, in order of the cell's routing weight (at most
    :attr:`TRIED`), the first whose cell changes by ``|y_{e+1}(h) - y_e(h)| >= MIN_CHANGE * |y_e(h)|``,
    else the one that changes most: two experts can answer one token alike (0.38 apart on one
    "hot" draw), and a fault that changes nothing visible is not one the harness can be asked to see.
    With no such group the fault changes nothing and is counted not applicable.
    """

    name, fault = "fault-offset-off-by-one", "one group end offset one too small: its last row runs with the next expert"
    #: candidate groups whose moved cell is computed; the relative change that ends the search
    TRIED, MIN_CHANGE = 8, 1.0

    def _target(self, problem) -> int | None:
        """Chosen once per routing (``topk_ids`` object): the harness's per-slot probes reuse the
        main run's ``topk_ids`` with one-hot weights, and a real offset bug does not move between them."""
        hit = self.__dict__.get("_target_memo")
        if hit is not None and hit[0] is problem.topk_ids:
            return hit[1]
        t = self._pick(problem)
        self._target_memo = (problem.topk_ids, t)
        return t

    def _pick(self, problem) -> int | None:
        g = group_by_expert(problem.topk_ids, problem.config.E)
        cands = []
        for e in _routed(problem):
            if e >= problem.config.E - 1:
                continue
            tok = int(g.tokens[int(g.offsets[e]) - 1])
            ids = problem.topk_ids[tok].tolist()
            if e + 1 not in ids:
                cands.append((-abs(float(problem.topk_weights[tok][ids.index(e)])), e, tok))
        best = None
        for _, e, tok in sorted(cands)[:self.TRIED]:
            change = self._change(problem, g, e, tok)
            if best is None or change > best[0]:
                best = (change, e)
            if change >= self.MIN_CHANGE:
                break
        return None if best is None else best[1]

    @staticmethod
    def _change(problem, g, e: int, tok: int) -> float:
        """The moved cell's deviation as the harness measures it (:func:`.metrics.cell_rel`):
        ``||y_{e+1}(h) - y_e(h)|| / max(||y_e(h)||, DEV_FLOOR * median ||y_e||)`` over expert ``e``'s rows."""
        from .metrics import DEV_FLOOR
        from .reference import moe_reference_slots

        start = int(g.offsets[e - 1]) if e else 0
        rows = g.tokens[start:int(g.offsets[e])].to(problem.hidden.device)
        dt = _dtype(problem.device)
        y_e = moe_reference_slots(problem.hidden[rows], torch.full((len(rows), 1), e, device=rows.device),
                                  problem.w13, problem.w2, dtype=dt)[:, 0]
        y_n = moe_reference_slots(problem.hidden[tok:tok + 1], torch.tensor([[e + 1]], device=rows.device),
                                  problem.w13, problem.w2, dtype=dt)[0, 0]
        norms = y_e.norm(dim=-1)
        floor = DEV_FLOOR * float(norms[norms > 0].median()) if bool((norms > 0).any()) else 0.0
        den = max(float(y_e[-1].norm()), floor)
        diff = float((y_n - y_e[-1]).norm())
        return diff / den if den > 0 else (0.0 if diff == 0 else float("inf"))

    def offsets(self, problem):
        t = self._target(problem)
        if t is None:
            return None
        offs = group_by_expert(problem.topk_ids, problem.config.E).offsets.clone()
        offs[t] -= 1
        return offs

    def expected_experts(self, problem):
        t = self._target(problem)
        return set() if t is None else {t}

    def expected_tokens(self, problem):
        """The token of the target group's last row: the one cell that runs with the next expert."""
        t = self._target(problem)
        if t is None:
            return set()
        g = group_by_expert(problem.topk_ids, problem.config.E)
        return {int(g.tokens[int(g.offsets[t]) - 1])}


class SilentZero(FaultyBackend):
    name, fault = "fault-silent-zero", "kernel returns success and writes zeros"
    shared = True

    def run(self, problem, out):
        out.zero_()
        return {"fault": self.fault}


class NaNToken(FaultyBackend):
    name, fault = "fault-nan-token", "one token's output row is NaN (uninitialized read)"

    def finish(self, problem, out):
        out[problem.tokens // 2] = float("nan")

    def expected_experts(self, problem):
        return set(problem.topk_ids[problem.tokens // 2].tolist())

    def expected_tokens(self, problem):
        return {problem.tokens // 2}


class SwappedGateUp(FaultyBackend):
    name, fault = "fault-swapped-gate-up", "w13 halves swapped: SiLU applied to up, not gate (w1/w3 order)"
    shared = envelope_judged = True

    def w13_of(self, problem, e, dtype):
        w = dequantize_expert(problem.w13, e, dtype)
        i = w.shape[0] // 2
        return torch.cat([w[i:], w[:i]])


# --- projection-level faults: one expert's weights loaded wrong ---------------------------------

def target_expert(problem) -> int:
    """The expert a one-expert fault breaks: ``routed[seed % len(routed)]`` (any load, seed-replayable)."""
    routed = _routed(problem)
    return routed[problem.seed % len(routed)]


class OneExpertFault(FaultyBackend):
    """A loader bug confined to :func:`target_expert`; the other experts are exact.

    Expected: the target expert and every token it served, where the bug moves the expert's
    outputs beyond the harness's resolution for a systematic expert, a pooled deviation of
    :data:`sm120lab.moe.verdict.EXPERT_DEV` (computed exactly, fp64); below it (e.g. a gate/up swap
    on one token with tiny pre-activations: SiLU(u) g ~ SiLU(g) u) nothing is expected.
    """

    def pooled_deviation(self, problem) -> float:
        """The target expert's exact pooled deviation (floored like the harness's) from the reference."""
        from .metrics import expert_pool
        from .reference import moe_reference_slots

        e = target_expert(problem)
        # on the problem's own device (its weights live there), pooled on the CPU
        hidden, ids, f64 = problem.hidden, problem.topk_ids, torch.float64
        ref = moe_reference_slots(hidden, ids, problem.w13, problem.w2)
        bad = grouped_moe_forward(hidden.to(f64), ids, None, problem.config.E, lambda x: self.w13_of(problem, x, f64),
                                  lambda x: self.w2_of(problem, x, f64), per_slot=True)
        num = ((bad - ref) ** 2).sum(-1).cpu().numpy()
        den = (ref ** 2).sum(-1).cpu().numpy()
        return float(expert_pool(num, den, ids.cpu().numpy(), problem.config.E)[e])

    def expected_experts(self, problem):
        from .verdict import EXPERT_DEV

        return {target_expert(problem)} if self.pooled_deviation(problem) > EXPERT_DEV else set()


class ExpertGateUpSwapped(OneExpertFault):
    name, fault = "fault-expert-gate-up-swapped", "one expert's gate and up projections swapped by its loader"

    def w13_of(self, problem, e, dtype):
        w = dequantize_expert(problem.w13, e, dtype)
        if e != target_expert(problem):
            return w
        i = w.shape[0] // 2
        return torch.cat([w[i:], w[:i]])


class ExpertForeignW2(OneExpertFault):
    name, fault = "fault-expert-foreign-w2", "one expert runs the next expert's down projection (w2 index bug)"

    def w2_of(self, problem, e, dtype):
        src = (e + 1) % problem.config.E if e == target_expert(problem) else e
        return dequantize_expert(problem.w2, src, dtype)


class ExpertShardInterleave(OneExpertFault):
    name, fault = ("fault-expert-shard-interleave",
                   "one expert's w13 de-interleaved as two TP shards [g0; u0; g1; u1]: gate = [g0; u0], up = [g1; u1]")

    def w13_of(self, problem, e, dtype):
        w = dequantize_expert(problem.w13, e, dtype)
        if e != target_expert(problem):
            return w
        q = w.shape[0] // 4  # g0, g1, u0, u1
        return torch.cat([w[:q], w[2 * q:3 * q], w[q:2 * q], w[3 * q:]])


# --- routing-normalization faults: the experts are right, the mixing weights are not ------------

class RoutingFault(FaultyBackend):
    """Applies ``weights(problem, w)`` to the routing weights it is given (one-hot weights stay one-hot).

    Expected: no expert; the tokens whose output the wrong weights move by more than the harness's
    mixing resolution :data:`sm120lab.moe.verdict.MIX_LIMIT` (relative to the token's output,
    floored at ``DEV_FLOOR`` x the median token norm), computed exactly from the reference slots.
    """

    def weights(self, problem, w: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, problem, out):
        dtype = out.dtype
        w = self.weights(problem, problem.topk_weights.double()).to(torch.float32)
        out.copy_(grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, w, problem.config.E,
                                      lambda e: dequantize_expert(problem.w13, e, dtype),
                                      lambda e: dequantize_expert(problem.w2, e, dtype)))
        return {"fault": self.fault}

    def expected_experts(self, problem):
        return set()

    def expected_tokens(self, problem):
        from .metrics import DEV_FLOOR, cell_rel
        from .reference import moe_reference_slots
        from .verdict import MIX_LIMIT

        # on the problem's own device (its weights live there), compared on the CPU
        slots = moe_reference_slots(problem.hidden, problem.topk_ids, problem.w13, problem.w2)
        w = problem.topk_weights.double()
        good = (slots * w.unsqueeze(-1)).sum(1)
        bad = (slots * self.weights(problem, w).to(torch.float32).double().unsqueeze(-1)).sum(1)
        dev = cell_rel(((bad - good) ** 2).sum(1).cpu().numpy(), (good ** 2).sum(1).cpu().numpy(),
                       torch.zeros(problem.tokens, dtype=torch.long).numpy(), floor=DEV_FLOOR)
        return {int(t) for t in (dev > MIX_LIMIT).nonzero()[0]}


class WeightsTemperature(RoutingFault):
    name, fault = ("fault-routing-temperature",
                   "top-k weights from softmax(2 x logits): the router's logit scaling applied twice")

    def weights(self, problem, w):
        sq = w * w
        return sq / sq.sum(dim=1, keepdim=True).clamp_min(1e-30)


class RenormPerRank(RoutingFault):
    name, fault = ("fault-routing-renorm-per-rank",
                   "top-k weights renormalised per expert-parallel rank (2 ranks of E/2 experts), not over all k")

    def weights(self, problem, w):
        half = -(-problem.config.E // 2)
        rank = (problem.topk_ids.cpu() // half).to(w.device)
        out = torch.zeros_like(w)
        for r in (0, 1):
            m = rank == r
            s = (w * m).sum(dim=1, keepdim=True)
            out = torch.where(m, w / torch.where(s > 0, s, torch.ones_like(s)), out)
        return out


class RenormL2(RoutingFault):
    name, fault = "fault-routing-l2-renorm", "top-k weights renormalised by their L2 norm instead of their sum"

    def weights(self, problem, w):
        return w / w.norm(dim=1, keepdim=True).clamp_min(1e-30)


class SoftmaxOverAllExperts(FaultyBackend):
    """Routing weights a softmax over all E router logits instead of over the k chosen (vLLM's
    ``renormalize=False`` where the model wants True): each token's weights are its softmax-over-k
    weights times ``m_t``, the share of the full softmax its k experts hold, in every run (the wrong
    denominator does not depend on the weights the kernel is handed, so the per-slot probes are scaled
    too and the mixing check cannot see it). Every output of token t, and every one of its cells, is
    ``m_t`` times the right one: the harness must name exactly the tokens with ``1 - m_t`` beyond
    rounding (``DEV_CORRECT``; issue 32: 38-43 of 46-48 were named). Needs the problem's router logits.
    Not in ``FAULTS``: its expert-level localization ("shared by all experts" where every routed
    expert's cells are scaled) is not yet held to the sweep's rule."""

    name, fault = ("fault-routing-softmax-all-experts",
                   "top-k weights from a softmax over all E router logits, not over the k chosen")

    def token_scale(self, problem) -> torch.Tensor:
        """``m_t`` [T] (float64): the full-softmax probability mass of each token's k chosen experts."""
        if problem.router_logits is None:
            raise ValueError("fault-routing-softmax-all-experts needs the problem's router logits "
                             "(problems drawn by make_moe_problem carry them)")
        full = torch.softmax(problem.router_logits.double(), dim=-1)
        return full.gather(1, problem.topk_ids.to(full.device)).sum(dim=1)

    def run(self, problem, out):
        dtype = out.dtype
        m = self.token_scale(problem).to(problem.topk_weights.device)
        w = (problem.topk_weights.double() * m.unsqueeze(1)).to(torch.float32)
        out.copy_(grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, w, problem.config.E,
                                      lambda e: dequantize_expert(problem.w13, e, dtype),
                                      lambda e: dequantize_expert(problem.w2, e, dtype)))
        return {"fault": self.fault}

    def expected_tokens(self, problem):
        from .verdict import DEV_CORRECT

        off = (1.0 - self.token_scale(problem)).cpu().numpy()
        return {int(t) for t in (off > DEV_CORRECT).nonzero()[0]}


# --- a bug shared by every expert: the activation quantizer ----------------------------------------

class ActBlock32(FaultyBackend):
    name, fault = "fault-act-block-32", "activation quantizer with 32-element blocks instead of NVFP4's 16 (W4A4)"
    numerics = "w4a4"
    shared = True
    #: its error stays near the W4A4 band: judged against the envelope (correct, degraded or garbage),
    #: never pinned on a subset of the experts
    envelope_judged = True

    def output_dtype(self, device) -> torch.dtype:
        return torch.float32

    def run(self, problem, out):
        from .variants import w4a4_forward

        out.copy_(w4a4_forward(problem, problem.topk_weights, block=32))
        return {"fault": self.fault}


#: faults the harness must catch and localize on every routing (the tests hold it to that)
FAULTS: tuple[type[FaultyBackend], ...] = (SwappedExperts, ZeroedGroup, LinearScalesAsSwizzled, MissingGlobalScale,
                                            TransposedWeights, OffByOneOffsets, SilentZero, NaNToken,
                                            ExpertGateUpSwapped, ExpertForeignW2, ExpertShardInterleave,
                                            WeightsTemperature, RenormPerRank, RenormL2)
#: shared by every expert and near the band: localized as "all experts", the verdict is the envelope's
#: (SiLU(up)*gate vs SiLU(gate)*up agree to first order, SiLU(z) ~ z/2 for small z; 32-element
#: activation blocks cost ~7% more quantization error than 16)
SUBTLE_FAULTS: tuple[type[FaultyBackend], ...] = (SwappedGateUp, ActBlock32)


#: a localized fault names at least this fraction of its expected tokens (and no other token)
TOKEN_RECALL = 0.9


@dataclass(frozen=True)
class FaultOutcome:
    """How the harness did on one planted fault (``applicable`` False: the fault changed nothing
    beyond the harness's resolution on this problem, e.g. a routing fault at T = 1 with equal weights)."""

    applicable: bool
    caught: bool      # garbage (envelope-judged faults: not pinned on a subset of the experts)
    localized: bool   # exactly the expected experts ("all experts": the shared flag), only expected tokens, >= recall
    exact: bool       # exactly the expected experts and tokens


def judge_fault(fault: FaultyBackend, problem, rep, token_recall: float = TOKEN_RECALL) -> FaultOutcome:
    """Compare a report's verdict and localization with what ``fault`` broke (module docstring).

    Shared faults must be called "shared by all experts" (``rep.shared``, every routed expert
    flagged) where at least ``SHARED_MIN_EXPERTS`` experts are routed; with fewer, every routed
    expert flagged. Envelope-judged faults pass when they are not pinned on a subset of the experts:
    nothing flagged when judged correct, else every routed expert (shared). One exception: an expert
    that served a single (token, expert) cell may be named, since one cell cannot tell the expert's
    own bug from a shared one that shows only there (the report says so). Tiny seed 73558534,
    T = 2: 32-element activation blocks moved the largest cell 42% (12.4x its band). And where the fault
    left a routed expert within the 16-bit rounding floor (pooled deviation <= ``EXPERT_DEV``), no
    harness can see it there: a garbage verdict naming exactly the experts it did move passes (the
    validation sweep's tiny/mostly-empty seed 60001621, T = 2: gate and up swapped moved expert 3's one
    cell by 0.027, experts 0 and 4 by 0.39 and 0.56).
    """
    from .verdict import EXPERT_DEV, SHARED_MIN_EXPERTS, Verdict, pooled_deviation

    routed = set(_routed(problem))
    got_e, got_t = set(rep.flagged_experts), set(rep.flagged_tokens)
    shared_ok = len(routed) < SHARED_MIN_EXPERTS or bool(rep.shared)
    if fault.envelope_judged:
        if rep.verdict == Verdict.CORRECT:
            ok = not got_e
        elif len(routed) < SHARED_MIN_EXPERTS:  # too few experts to tell "shared" from "each of them"
            ok = got_e <= routed
        else:
            load = problem.expert_counts().tolist()
            ok = (not got_e or (got_e == routed and bool(rep.shared))
                  or (rep.verdict == Verdict.GARBAGE and all(load[e] == 1 for e in got_e)))
            if not ok and rep.verdict == Verdict.GARBAGE and rep.cells is not None and got_e < routed:
                pooled = pooled_deviation(rep)  # the unflagged experts: did the fault move them at all?
                ok = all(pooled[e] <= EXPERT_DEV for e in routed - got_e)
        return FaultOutcome(True, ok, ok, ok)
    want_e = routed if fault.shared else fault.expected_experts(problem)
    want_t = fault.expected_tokens(problem)
    if not want_e and not want_t:
        ok = rep.verdict != Verdict.GARBAGE and not got_e and not got_t
        return FaultOutcome(False, ok, ok, ok)
    caught = rep.verdict == Verdict.GARBAGE
    experts_ok = caught and got_e == want_e and (not fault.shared or shared_ok)
    return FaultOutcome(True, caught, experts_ok and got_t <= want_t and len(got_t) >= token_recall * len(want_t),
                        experts_ok and got_t == want_t)


def all_faults(include_subtle: bool = True) -> list[FaultyBackend]:
    return [cls() for cls in FAULTS + (SUBTLE_FAULTS if include_subtle else ())]


def register_faults() -> list[FaultyBackend]:
    """Add every planted fault to the backend registry (for ``sm120lab check --faults`` and notebook 03)."""
    from .backends import all_backends, register

    have = all_backends()
    out = []
    for f in all_faults():
        out.append(have.get(f.name) or register(f))
    return out
