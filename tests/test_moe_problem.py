"""MoE problems and the exact reference (issue 4): properties on fresh random problems."""

import pytest
import torch

from sm120lab.moe import PRESETS, ROUTINGS, make_moe_problem, moe_reference, moe_reference_slots
from sm120lab.nvfp4 import dequantize_nvfp4


@pytest.mark.parametrize("routing", ROUTINGS)
def test_problem_shapes_and_routing(routing, seed):
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    c = p.config
    t = 1 if routing == "single" else c.default_tokens
    assert p.hidden.shape == (t, c.H) and p.hidden.dtype == torch.bfloat16, seed
    assert p.topk_ids.shape == (t, c.k) and p.topk_ids.dtype == torch.int64
    assert p.w13.shape == (c.E, 2 * c.I, c.H) and p.w2.shape == (c.E, c.H, c.I)
    assert p.w13.global_scale.shape == (c.E, 1) and p.w2.global_scale.shape == (c.E, 1)
    # distinct experts per token, weights a softmax over k
    assert all(len(set(row)) == c.k for row in p.topk_ids.tolist()), seed
    torch.testing.assert_close(p.topk_weights.sum(-1), torch.ones(t), rtol=1e-6, atol=1e-6)
    assert bool((p.topk_weights > 0).all())
    # linear and swizzled copies hold the same scales
    assert torch.equal(p.w13_swizzled.linear_scale().view(torch.uint8), p.w13.scale.view(torch.uint8))
    assert torch.equal(p.w2_swizzled.linear_scale().view(torch.uint8), p.w2.scale.view(torch.uint8))
    counts = p.expert_counts()
    if routing == "hot":
        assert bool((p.topk_ids == p.hot_expert).any(dim=1).all()), seed
    if routing == "sparse":
        assert int((counts == 0).sum()) >= c.E // 2, seed
    if routing == "zipf":
        assert int(counts.max()) > 2 * t * c.k / c.E, seed  # skewed: the top expert well above the mean
    # per-expert global scales: encode-side 448*6/amax of each expert
    assert float(p.w13.global_scale.max() / p.w13.global_scale.min()) > 1.05
    # static activation scales: a1 from amax(hidden)
    assert float(p.a1_gscale) == pytest.approx(448 * 6 / float(p.hidden.float().abs().max()), rel=1e-6)


@pytest.mark.parametrize("kwargs, word", [({"preset": "nope"}, "preset"), ({"routing": "gauss"}, "routing"),
                                          ({"tokens": 0}, "tokens"), ({"tokens": 2.5}, "tokens"),
                                          ({"routing": "single", "tokens": 4}, "tokens")])
def test_bad_arguments_name_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        make_moe_problem(**kwargs)


def _naive(p):
    """Token-by-token, dequantizing the whole stacked tensors at once (a different path)."""
    w13 = dequantize_nvfp4(p.w13_swizzled, dtype=torch.float64)
    w2 = dequantize_nvfp4(p.w2_swizzled, dtype=torch.float64)
    out = torch.zeros(p.tokens, p.config.H, dtype=torch.float64)
    i = p.config.I
    for t in range(p.tokens):
        h = p.hidden[t].double()
        for j in range(p.config.k):
            e = int(p.topk_ids[t, j])
            g, u = w13[e, :i] @ h, w13[e, i:] @ h
            out[t] += float(p.topk_weights[t, j]) * (w2[e] @ (g * torch.sigmoid(g) * u))
    return out


@pytest.mark.parametrize("routing", ["uniform", "hot", "single"])
def test_reference_matches_naive_loop(routing, seed):
    p = make_moe_problem("tiny", tokens=None if routing == "single" else 12, routing=routing, seed=seed)
    ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2)
    torch.testing.assert_close(ref, _naive(p), rtol=1e-12, atol=1e-14, msg=f"seed {seed}")
    # scale layout does not matter to the reference
    assert torch.equal(ref, moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13_swizzled, p.w2_swizzled))


def test_reference_is_linear_in_routing_weights(seed):
    p = make_moe_problem("tiny", tokens=16, seed=seed)
    slots = moe_reference_slots(p.hidden, p.topk_ids, p.w13, p.w2)
    w = torch.rand(p.topk_weights.shape, generator=torch.Generator().manual_seed(seed))
    ref = moe_reference(p.hidden, p.topk_ids, w, p.w13, p.w2)
    torch.testing.assert_close(ref, (slots * w.double().unsqueeze(-1)).sum(1), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(moe_reference(p.hidden, p.topk_ids, 2 * w, p.w13, p.w2), 2 * ref, rtol=1e-13, atol=1e-15)


def test_reference_rejects_bad_routing(seed):
    p = make_moe_problem("tiny", tokens=4, seed=seed)
    bad = p.topk_ids.clone()
    bad[0, 0] = p.config.E
    with pytest.raises(ValueError, match="topk_ids"):
        moe_reference(p.hidden, bad, p.topk_weights, p.w13, p.w2)
    with pytest.raises(ValueError, match="topk_weights"):
        moe_reference(p.hidden, p.topk_ids, p.topk_weights[:, :1], p.w13, p.w2)


def test_take_tokens_recalibrates(seed):
    p = make_moe_problem("tiny", tokens=20, seed=seed)
    q = p.take_tokens(3)
    assert q.tokens == 3 and torch.equal(q.topk_ids, p.topk_ids[:3])
    assert float(q.a1_gscale) == pytest.approx(448 * 6 / float(q.hidden.float().abs().max()), rel=1e-6)
    with pytest.raises(ValueError, match="n must be"):
        p.take_tokens(21)


def test_presets_from_landscape():
    q = PRESETS["qwen3.5-397b-a17b"]
    assert (q.E, q.k, q.H, q.I) == (512, 10, 4096, 1024)
    assert {"qwen3-next-80b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "tiny"} <= set(PRESETS)


def test_one_forward_builds_reference_calibration_and_envelope(seed):
    """The reference, the a2 calibration and the unquantized forward are grouped_moe_forward itself."""
    from sm120lab.moe.envelope import unquantized_reference_slots
    from sm120lab.moe.grouping import grouped_moe_forward
    from sm120lab.moe.problem import intermediate_amax
    from sm120lab.moe.reference import dequantize_expert

    p = make_moe_problem("tiny", tokens=10, routing="zipf", seed=seed)
    f64 = torch.float64
    slots = grouped_moe_forward(p.hidden.to(f64), p.topk_ids, None, p.config.E,
                                lambda e: dequantize_expert(p.w13, e, f64), lambda e: dequantize_expert(p.w2, e, f64),
                                per_slot=True)
    assert torch.equal(slots, moe_reference_slots(p.hidden, p.topk_ids, p.w13, p.w2))
    # the grouped combine (index_add_ in sorted-row order) equals the weighted sum of the slots to rounding
    combined = grouped_moe_forward(p.hidden.to(f64), p.topk_ids, p.topk_weights, p.config.E,
                                   lambda e: dequantize_expert(p.w13, e, f64), lambda e: dequantize_expert(p.w2, e, f64))
    torch.testing.assert_close(combined, moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2),
                               rtol=1e-12, atol=1e-14)
    # a2 = 448*6 / amax(bf16(SiLU(gate)*up)): the naive per-token intermediate gives the same amax
    w13 = dequantize_nvfp4(p.w13, dtype=f64)
    i = p.config.I
    acts = [torch.nn.functional.silu(w13[e, :i] @ p.hidden[t].double()) * (w13[e, i:] @ p.hidden[t].double())
            for t in range(p.tokens) for e in p.topk_ids[t].tolist()]
    amax = float(torch.stack(acts).to(torch.bfloat16).float().abs().max())
    assert intermediate_amax(p.hidden, p.topk_ids, p.w13, p.w2, f64) == amax
    assert float(p.a2_gscale) == pytest.approx(448 * 6 / amax, rel=1e-6)
    # the unquantized-weight forward of the envelope, one cell by hand
    unq = unquantized_reference_slots(p, f64)
    t, j = seed % p.tokens, seed % p.config.k
    e = int(p.topk_ids[t, j])
    g_u = p.w13_bf16[e].double() @ p.hidden[t].double()
    torch.testing.assert_close(unq[t, j], p.w2_bf16[e].double() @ (torch.nn.functional.silu(g_u[:i]) * g_u[i:]),
                               rtol=1e-12, atol=1e-14)


def test_problem_from_weights_is_calibrated_and_not_replayable(seed):
    from sm120lab.moe.problem import problem_from_weights

    p = make_moe_problem("tiny", tokens=6, seed=seed)
    q = problem_from_weights(p.config, p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, seed=seed)
    assert float(q.a1_gscale) == float(p.a1_gscale) and float(q.a2_gscale) == float(p.a2_gscale)
    assert q.describe()["replayable"] is False
    with pytest.raises(ValueError, match="linear"):
        problem_from_weights(p.config, p.hidden, p.topk_ids, p.topk_weights, p.w13_swizzled, p.w2, seed=seed)
