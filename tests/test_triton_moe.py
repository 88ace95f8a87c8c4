"""The Triton NVFP4 MoE kernels under Triton's CPU interpreter (tiny sizes, fresh random inputs).

The kernels are imported with TRITON_INTERPRET=1 (``triton.jit`` decides at import; Triton also
reads the variable lazily at the first launch, so it stays set for this process; the AOT test
compiles in a subprocess without it). GPU checks: scripts/h200_bench.py (recorded in data/bench/).
"""


import _triton_interp
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_FRESH = _triton_interp.enable()
from sm120lab.kernels import moe_layer as fm  # noqa: E402
from sm120lab.kernels.moe_sort import moe_sort, padded_bounds  # noqa: E402
from sm120lab.moe.backends.emulated_w4a4 import EmulatedW4A4  # noqa: E402
from sm120lab.moe.problem import make_moe_problem  # noqa: E402
from sm120lab.moe.reference import moe_reference  # noqa: E402
from sm120lab.nvfp4 import quantize_nvfp4  # noqa: E402

needs_interp = _triton_interp.needs_interp(_FRESH, fm.interpreting())
test_in_fresh_process = _triton_interp.rerun_in_fresh_process(_FRESH, __file__)


def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@needs_interp
@pytest.mark.parametrize("block_m", [16, 32])
def test_sort_groups_every_slot_once_and_pads(block_m, seed):
    g = torch.Generator().manual_seed(seed)
    e = int(torch.randint(3, 40, (), generator=g))
    t = int(torch.randint(1, 30, (), generator=g))
    k = int(torch.randint(1, min(e, 4) + 1, (), generator=g))
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    sorted_ids, block_expert = moe_sort(ids, e, block_m)
    s = t * k
    max_rows, max_blocks = padded_bounds(s, e, block_m)
    assert sorted_ids.shape == (max_rows,) and block_expert.shape == (max_blocks,)
    real = sorted_ids[sorted_ids < s]
    assert sorted(real.tolist()) == list(range(s))  # every slot exactly once
    assert bool((sorted_ids <= s).all())  # the rest is the sentinel
    flat = ids.reshape(-1)
    counts = torch.bincount(flat, minlength=e)
    n_blocks = int(((counts + block_m - 1) // block_m).sum())
    assert bool((block_expert[:n_blocks] >= 0).all()) and bool((block_expert[n_blocks:] == -1).all())
    for b in range(n_blocks):
        rows = sorted_ids[b * block_m:(b + 1) * block_m]
        rows = rows[rows < s].long()
        assert rows.numel() > 0
        assert bool((flat[rows] == block_expert[b]).all())
    assert sorted(block_expert[:n_blocks].tolist()) == block_expert[:n_blocks].tolist()


def _check_sort_contract(ids, e, block_m, sorted_ids, block_expert):
    """The moe_sort contract against a pure-torch reference: per expert, the same multiset of slots
    in [start, start + cnt), the sentinel S in [start + cnt, end) and past the last end, block_expert
    = the expert owning each block up to end[E-1] / block_m and -1 after it."""
    flat = ids.reshape(-1).long()
    s = flat.numel()
    max_rows, max_blocks = padded_bounds(s, e, block_m)
    assert sorted_ids.dtype == torch.int32 and block_expert.dtype == torch.int32
    assert sorted_ids.shape == (max_rows,) and block_expert.shape == (max_blocks,)
    cnt = torch.bincount(flat, minlength=e)
    padded = (cnt + block_m - 1) // block_m * block_m
    end = torch.cumsum(padded, 0)
    start = end - padded
    total = int(end[-1]) if e else 0
    assert total <= max_rows
    ref_be = torch.full((max_blocks,), -1, dtype=torch.int32)
    ref_be[:total // block_m] = torch.repeat_interleave(torch.arange(e, dtype=torch.int32), padded // block_m)
    assert torch.equal(block_expert, ref_be)
    slots = torch.arange(s)
    for x in torch.nonzero(cnt).flatten().tolist():
        a, c, b = int(start[x]), int(cnt[x]), int(end[x])
        got = sorted_ids[a:a + c].long().sort().values
        assert torch.equal(got, slots[flat == x]), f"expert {x}: wrong slots"
        assert bool((sorted_ids[a + c:b] == s).all()), f"expert {x}: padding is not the sentinel"
    assert bool((sorted_ids[total:] == s).all())


def _routing(kind: str, t: int, k: int, e: int, g: torch.Generator) -> torch.Tensor:
    if kind == "one_expert":  # every slot on one expert (repeats allowed)
        return torch.full((t, k), int(torch.randint(e, (), generator=g)), dtype=torch.int64)
    if kind == "distinct" and k <= e:  # top-k: k distinct experts per token
        return torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    if kind == "skewed":  # a few hot experts
        hot = torch.randint(e, (3,), generator=g)
        pick = torch.randint(3, (t, k), generator=g)
        cold = torch.randint(e, (t, k), generator=g)
        return torch.where(torch.rand(t, k, generator=g) < 0.8, hot[pick], cold)
    return torch.randint(e, (t, k), generator=g)


def _sort_and_check(ids, e, block_m, single_max):
    import sm120lab.kernels.moe_sort as ms

    old = ms.SINGLE_MAX_SLOTS
    ms.SINGLE_MAX_SLOTS = single_max
    try:
        sorted_ids, block_expert = moe_sort(ids, e, block_m)
    finally:
        ms.SINGLE_MAX_SLOTS = old
    _check_sort_contract(ids, e, block_m, sorted_ids, block_expert)


@needs_interp
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=st.integers(1, 300), k=st.sampled_from([1, 2, 8, 10]), e=st.sampled_from([1, 7, 64, 512]),
       block_m=st.sampled_from([1, 8, 16, 64, 128]),
       kind=st.sampled_from(["uniform", "distinct", "skewed", "one_expert"]),
       single_max=st.sampled_from([0, 1024]), seed=st.integers(0, 2**31 - 1))
def test_sort_matches_torch_reference_property(t, k, e, block_m, kind, single_max, seed):
    """Random shapes and routings, through both the one-launch (S <= 1024) and the multi-CTA path."""
    ids = _routing(kind, t, k, e, torch.Generator().manual_seed(seed))
    _sort_and_check(ids, e, block_m, single_max)


@needs_interp
@pytest.mark.parametrize("t,k,e,block_m,kind", [
    (300, 10, 7, 16, "one_expert"),  # 3000 slots on one expert, many count programs on one address
    (300, 10, 512, 1, "one_expert"),  # block_m = 1: one block per slot
    (1, 1, 512, 128, "uniform"),  # E > S: a single slot, 127 rows of padding
    (3, 2, 512, 64, "distinct"),  # E > S
    (137, 8, 64, 128, "skewed"),  # S not a multiple of any chunk
    (1, 1, 1, 1, "uniform"),
])
@pytest.mark.parametrize("single_max", [0, 1024])
def test_sort_matches_torch_reference_edges(t, k, e, block_m, kind, single_max, seed):
    ids = _routing(kind, t, k, e, torch.Generator().manual_seed(seed))
    _sort_and_check(ids, e, block_m, single_max)


@needs_interp
def test_sort_no_slots():
    sorted_ids, block_expert = moe_sort(torch.zeros((0, 4), dtype=torch.int64), 8, 16)
    assert sorted_ids.numel() == 0 and block_expert.numel() == 0


@needs_interp
def test_quantize_rows_bit_exact_with_sm120lab_nvfp4(seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = 9, 16 * int(torch.randint(2, 12, (), generator=g))
    x = (torch.randn(rows, cols, generator=g) * torch.exp(torch.randn(rows, 1, generator=g) * 2)).bfloat16()
    x[0, :16] = 0  # an all-zero block: scale 0, codes +-0
    x[1, 16:32] = -0.0
    amax = float(x.float().abs().max())
    for gs in (448 * 6 / amax, 448 * 6 / amax * 0.37, 448 * 6 / amax * 3.0):  # exact, loose, saturating
        gst = torch.tensor([gs], dtype=torch.float32)
        q, s = fm.quantize_rows_nvfp4(x, gst)
        ref = quantize_nvfp4(x.float(), gst[0])
        assert torch.equal(s, ref.scale.view(torch.uint8))
        assert torch.equal(q, ref.data)


@needs_interp
@pytest.mark.parametrize("routing,tokens", [("uniform", 24), ("sparse", 17), ("hot", 9), ("single", 1)])
def test_w4a16_matches_fp64_reference(routing, tokens, seed):
    p = make_moe_problem("tiny", tokens=tokens, routing=routing, seed=seed)
    out = torch.full((tokens, p.config.H), -2.0 ** 127, dtype=torch.bfloat16)
    fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a16", out=out, _poison=True)
    ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
    assert bool(torch.isfinite(out).all()) and not bool((out == -2.0 ** 127).any())
    # bf16 intermediate and output roundings only: bf16 level
    assert _rel(out, ref) < 1e-2


@needs_interp
def test_w4a16_swizzled_scales_and_big_block_m(seed):
    p = make_moe_problem("tiny", tokens=40, routing="zipf", seed=seed)
    ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
    from sm120lab.kernels.moe_configs import CONFIGS

    cfg = (CONFIGS["m32n64k128w4s3"], CONFIGS["m32n64k128w4s3"])
    out = fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13_swizzled, p.w2_swizzled,
                             configs=cfg, _poison=True)
    assert _rel(out, ref) < 1e-2


@needs_interp
@pytest.mark.parametrize("routing,tokens,cfg_name,layout", [
    ("uniform", 5, "d16x64w4s1", "linear"), ("hot", 7, "d16x64w4s1o", "swizzled"), ("single", 1, "d8x4w1s1p2", "linear")])
def test_packed_decode_matches_fp64_reference(routing, tokens, cfg_name, layout, seed):
    """The decode kernel (portable path under the interpreter) on prepared weights, poisoned outputs."""
    from sm120lab.constants import SENTINEL
    from sm120lab.kernels.moe_configs import DECODE_CONFIGS, DecodeConfig
    from sm120lab.kernels.prepack import prepare_moe_weights

    p = make_moe_problem("tiny", tokens=tokens, routing=routing, seed=seed)
    w13, w2 = (p.w13, p.w2) if layout == "linear" else (p.w13_swizzled, p.w2_swizzled)
    packed = prepare_moe_weights(w13, w2)
    # d8x4w1s1p2: 4 words per step, so the tiny shapes run several K steps with 2 tiles in flight
    cfg = DECODE_CONFIGS.get(cfg_name) or DecodeConfig(8, 4, 1, DEPTH=2)
    out = torch.full((tokens, p.config.H), SENTINEL, dtype=torch.bfloat16)
    fm.fused_moe_packed(p.hidden, p.topk_ids, p.topk_weights, packed, decode=True, decode_configs=(cfg, cfg),
                        out=out, _poison=True)
    ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
    assert bool(torch.isfinite(out).all()) and not bool((out == SENTINEL).any())
    assert _rel(out, ref) < 1e-2
    # the MMA path on the same packed buffers computes the same function
    mma = fm.fused_moe_packed(p.hidden, p.topk_ids, p.topk_weights, packed, decode=False, _poison=True)
    assert _rel(mma, ref) < 1e-2


@needs_interp
def test_decode_path_at_a_width_whose_word_count_is_not_a_power_of_two(seed):
    """H=384 (48 words per w13 row) and I=192 (24 per w2 row): the decode kernel's K tile must be a power
    of two dividing the words (compute-sanitizer's odd shape on the H200 hit "arange's range must be a
    power of 2", data/bench/aux/sanitizer_memcheck.txt, 2026-12-04)."""
    from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
    from sm120lab.constants import SENTINEL
    from sm120lab.kernels.plan import MoEShape, plan_moe
    from sm120lab.kernels.plan import Path as KPath
    from sm120lab.kernels.prepack import prepare_moe_weights

    layer = make_bench_layer(6, 3, 384, 192, seed=seed % 1000, bf16=False, fp8=False, device="cpu")
    gen = torch.Generator().manual_seed(seed)
    ids, tw = uniform_routing(3, 6, 3, device="cpu", gen=gen)
    x = torch.randn(3, 384, generator=gen).to(torch.bfloat16)
    plan = plan_moe(MoEShape.of(6, 384, 192, 3), 3, device="cpu", paths={KPath.DECODE})
    out = torch.full((3, 384), SENTINEL, dtype=torch.bfloat16)
    fm.fused_moe_packed(x, ids, tw, prepare_moe_weights(layer.w13, layer.w2), plan=plan, out=out, _poison=True)
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    assert plan.path is KPath.DECODE
    assert bool(torch.isfinite(out).all()) and not bool((out == SENTINEL).any())
    assert _rel(out, ref) < 1e-2


@needs_interp
@pytest.mark.parametrize("routing,tokens", [("uniform", 20), ("single", 1)])
def test_w4a4_dequant_matches_emulated_w4a4(routing, tokens, seed):
    p = make_moe_problem("tiny", tokens=tokens, routing=routing, seed=seed)
    out = fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a4",
                             a1_gscale=p.a1_gscale, a2_gscale=p.a2_gscale, _poison=True)
    emu = torch.full((tokens, p.config.H), -2.0 ** 127, dtype=torch.float32)
    EmulatedW4A4().run(p, emu)
    ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
    d_emu = _rel(out, emu)
    # same numerics up to fp32 summation order and the bf16 output: far inside the W4A4 error
    print(f"triton-w4a4 vs emulated {d_emu:.2e}, emulated vs reference {_rel(emu, ref):.2e}")
    assert d_emu < 5e-3, d_emu
    assert d_emu < 0.2 * _rel(emu, ref)
    # the prepared weights feed the same W4A4 kernels (canonical words of the packed layout): bit for bit
    from sm120lab.kernels.prepack import prepare_moe_weights

    packed = prepare_moe_weights(p.w13_swizzled, p.w2_swizzled)
    out_p = fm.fused_moe_packed(p.hidden, p.topk_ids, p.topk_weights, packed, mode="w4a4",
                                a1_gscale=p.a1_gscale, a2_gscale=p.a2_gscale, _poison=True)
    assert torch.equal(out_p, out)


@needs_interp
def test_bad_arguments_name_the_argument(seed):
    p = make_moe_problem("tiny", tokens=4, seed=seed)
    with pytest.raises(ValueError, match="mode"):
        fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w8a8")
    with pytest.raises(ValueError, match="hidden"):
        fm.fused_moe_nvfp4(p.hidden.float(), p.topk_ids, p.topk_weights, p.w13, p.w2)
    with pytest.raises(ValueError, match="a1_gscale"):
        fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a4")
    with pytest.raises(ValueError, match="w2"):
        fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w13)
    with pytest.raises(ValueError, match="topk_weights"):
        fm.fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights[:, :1], p.w13, p.w2)


@needs_interp
def test_plan_drives_the_layer_and_legacy_arguments_map_onto_it(seed):
    """fused_moe_packed(plan=...) runs exactly the plan: the decode and MMA plans give the outputs of the
    legacy path arguments bit for bit, the default plan is the formula's, and a plan for other weights is refused."""
    from sm120lab.kernels.plan import MoEShape, Path, plan_moe
    from sm120lab.kernels.prepack import prepare_moe_weights

    p = make_moe_problem("tiny", tokens=3, routing="uniform", seed=seed)
    packed = prepare_moe_weights(p.w13, p.w2)
    c = p.config
    shape = MoEShape.of(c.E, c.H, c.I, c.k)
    args = (p.hidden, p.topk_ids, p.topk_weights, packed)
    dec = plan_moe(shape, 3, device="cpu", paths={Path.DECODE})
    mma = plan_moe(shape, 3, device="cpu", paths={Path.MMA})
    assert dec.path is Path.DECODE and mma.path is Path.MMA and mma.sort_block == mma.w13.BLOCK_M
    assert not dec.fast and not mma.w13.FAST  # the interpreter runs no inline PTX
    assert torch.equal(fm.fused_moe_packed(*args, plan=dec), fm.fused_moe_packed(*args, decode=True, frag=False))
    assert torch.equal(fm.fused_moe_packed(*args, plan=mma), fm.fused_moe_packed(*args, decode=False))
    auto = plan_moe(shape, 3, device="cpu")
    assert auto.path is (Path.DECODE if shape.rows_per_expert(3) <= 1.25 else Path.MMA)
    assert torch.equal(fm.fused_moe_packed(*args), fm.fused_moe_packed(*args, plan=auto))
    other = plan_moe(MoEShape.of(c.E, 2 * c.H, c.I, c.k), 3, device="cpu")
    with pytest.raises(ValueError, match="plan is for"):
        fm.fused_moe_packed(*args, plan=other)
