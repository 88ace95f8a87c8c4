"""Property tests of the verdict rules (issue 21): random legitimate variants are never garbage, random
planted faults are always caught and localized, and the three bug classes that used to slip through
(one expert off by 0.2-0.5, a bug shared by every expert, tokens off by 18-49% through their routing
weights) are named where they live."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sm120lab.moe import make_moe_problem
from sm120lab.moe.backends import Backend, Needs
from sm120lab.moe.faults import FAULTS, SUBTLE_FAULTS, ActBlock32, judge_fault
from sm120lab.moe.harness import check
from sm120lab.moe.sweep import FAMILIES, problem_of
from sm120lab.moe.variants import VARIANTS, ActQuantVariant, GlobalScale, ScaleRounding
from sm120lab.moe.verdict import MIX_LIMIT, SHARED_MIN_EXPERTS, Verdict

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2 ** 31 - 1)
families = st.sampled_from(FAMILIES)


def _routed(p) -> set[int]:
    return set(p.topk_ids.reshape(-1).tolist())


@FAST
@given(family=families, seed=seeds, rounding=st.sampled_from(list(ScaleRounding)),
       gscale=st.sampled_from([g for g in GlobalScale if g != GlobalScale.PERCENTILE]))
def test_random_legitimate_quantizer_is_never_garbage_nor_pinned(family, seed, rounding, gscale):
    """Any mix of block-scale rounding and non-saturating global-scale choice: not garbage, no subset
    of experts blamed (a percentile scale saturates: judged by the envelope, see the sweep)."""
    p = problem_of("tiny", family, seed)
    v = ActQuantVariant(rounding, gscale)
    rep = check(p, [v], keep_output=False).reports[v.name]
    ctx = (v.difference, family, seed, rep.verdict, rep.reasons)
    assert rep.verdict in (Verdict.CORRECT, Verdict.DEGRADED), ctx
    assert not rep.flagged_tokens, ctx
    assert not rep.flagged_experts or (set(rep.flagged_experts) == _routed(p) and rep.shared), ctx


@FAST
@given(family=families, seed=seeds, cls=st.sampled_from(VARIANTS))
def test_random_variant_is_never_garbage(family, seed, cls):
    p = problem_of("tiny", family, seed)
    v = cls()
    rep = check(p, [v], keep_output=False).reports[v.name]
    assert rep.verdict in (Verdict.CORRECT, Verdict.DEGRADED), (v.name, family, seed, rep.reasons)


@FAST
@given(family=families, seed=seeds, cls=st.sampled_from(FAULTS + SUBTLE_FAULTS))
def test_random_planted_fault_is_caught_and_localized(family, seed, cls):
    """Exactly its experts (or "all experts"), exactly its tokens; envelope-judged faults never pinned."""
    p = problem_of("tiny", family, seed)
    f = cls()
    rep = check(p, [f], keep_output=False).reports[f.name]
    out = judge_fault(f, p, rep)
    assert out.exact, (f.name, family, seed, out, rep.verdict, rep.flagged_experts, rep.flagged_tokens, rep.reasons)


class _ScaledExpert(Backend):
    """The exact forward with one expert's output scaled by (1 + delta): a loader bug that keeps every
    output under the global limit (the issue's first bug class)."""

    needs, out_dtype, numerics, name = Needs(), torch.float64, "w4a16", "scaled-expert"

    def __init__(self, expert: int, delta: float):
        self.expert, self.delta = expert, delta

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference_slots

        slots = moe_reference_slots(problem.hidden, problem.topk_ids, problem.w13, problem.w2)
        scale = torch.where(problem.topk_ids == self.expert, 1.0 + self.delta, 1.0).double().unsqueeze(-1)
        out.copy_((slots * scale * problem.topk_weights.double().unsqueeze(-1)).sum(1))


@FAST
@given(seed=seeds, routing=st.sampled_from(["uniform", "zipf", "sparse"]), pick=st.integers(0, 63),
       delta=st.floats(0.2, 0.45) | st.floats(-0.45, -0.2))
def test_one_expert_off_by_a_fifth_to_a_half_is_flagged_alone(seed, routing, pick, delta):
    """Every cell of one expert 20-45% off, every other expert exact: that expert and all its tokens."""
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    routed = sorted(_routed(p))
    e = routed[pick % len(routed)]
    rep = check(p, [_ScaledExpert(e, delta)], keep_output=False).reports["scaled-expert"]
    tokens = {int(t) for t in torch.nonzero((p.topk_ids == e).any(dim=1)).flatten()}
    assert rep.verdict == Verdict.GARBAGE, rep.reasons
    assert rep.flagged_experts == [e] and set(rep.flagged_tokens) == tokens, (e, rep.reasons)


class _MixedTokens(Backend):
    """Renormalises the routing weights of chosen tokens by their L2 norm (one-hot weights stay one-hot)."""

    needs, out_dtype, numerics, name = Needs(), torch.float64, "w4a16", "mixed-tokens"

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference_slots

        slots = moe_reference_slots(problem.hidden, problem.topk_ids, problem.w13, problem.w2)
        w = problem.topk_weights.double().clone()
        w[self.tokens] = w[self.tokens] / w[self.tokens].norm(dim=1, keepdim=True)
        out.copy_((slots * w.unsqueeze(-1)).sum(1))


@FAST
@given(seed=seeds, n=st.integers(1, 8))
def test_tokens_off_by_18_to_49_percent_through_their_weights_are_named(seed, n):
    p = make_moe_problem("tiny", tokens=32, seed=seed)
    off = 1.0 / p.topk_weights.double().norm(dim=1) - 1.0  # each token's output is scaled by exactly this
    candidates = torch.nonzero((off >= 0.18) & (off <= 0.49)).flatten().tolist()
    chosen = candidates[:n]
    rep = check(p, [_MixedTokens(chosen)], keep_output=False).reports["mixed-tokens"]
    assert rep.verdict == (Verdict.GARBAGE if chosen else Verdict.CORRECT), rep.reasons
    assert rep.flagged_tokens == sorted(chosen) and rep.flagged_experts == [], rep.reasons
    assert all(rep.mixing[t] > MIX_LIMIT for t in chosen)


@pytest.mark.parametrize("seed_", [3, 11, 29])
def test_wrong_activation_block_size_is_shared_not_pinned(seed_):
    """32-element activation blocks: every expert alike; never 1-4 arbitrary experts."""
    p = make_moe_problem("small", routing="zipf", seed=seed_)
    rep = check(p, [ActBlock32()], keep_output=False).reports["fault-act-block-32"]
    assert len(_routed(p)) >= SHARED_MIN_EXPERTS
    if rep.verdict == Verdict.CORRECT:
        assert not rep.flagged_experts and not rep.shared
    else:
        assert set(rep.flagged_experts) in (set(), _routed(p)), rep.reasons
        assert not rep.flagged_experts or rep.shared
    assert np.isfinite(rep.diff.rel_fro)
