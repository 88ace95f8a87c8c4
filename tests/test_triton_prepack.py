"""The one-time weight preparation (sm120lab.kernels.prepack) is an exact bijection with the
canonical NVFP4 format: unpack(prepack(w)) == w byte for byte, for linear and 128x4-swizzled
scales, over random shapes (hypothesis), and the packed buffers hold what the kernels assume."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from sm120lab.kernels.prepack import DECODE_SHIFT, pack_nvfp4, prepare_moe_weights, unpack_moe_weights, unpack_nvfp4
from sm120lab.nvfp4 import NVFP4Tensor, quantize_nvfp4


def _experts(e, n, k, layout, seed, per_expert_gs=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(e, n, k, generator=g) * torch.exp(torch.randn(e, 1, 1, generator=g))
    gs = (448.0 * 6.0 / x.abs().amax(dim=(1, 2))).reshape(e, 1) if per_expert_gs else None
    return quantize_nvfp4(x, gs, scale_layout=layout)


def _same(a: NVFP4Tensor, b: NVFP4Tensor) -> bool:
    return (a.shape == b.shape and a.scale_layout == b.scale_layout and a.data.dtype == b.data.dtype
            and torch.equal(a.data, b.data) and a.scale.dtype == b.scale.dtype
            and torch.equal(a.scale.view(torch.uint8), b.scale.view(torch.uint8))
            and torch.equal(torch.as_tensor(a.global_scale), torch.as_tensor(b.global_scale)))


@given(e=st.integers(1, 4), n=st.integers(1, 150), kb=st.integers(1, 6), layout=st.sampled_from(["linear", "swizzled"]),
       per_expert=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_unpack_inverts_pack_byte_for_byte(e, n, kb, layout, per_expert, seed):
    w = _experts(e, n, 32 * kb, layout, seed, per_expert)
    p = pack_nvfp4(w)
    assert _same(unpack_nvfp4(p), w)
    # the layout the kernels read: words = canonical bytes 4 at a time, linear scales, alpha = 2**6 / gs
    assert p.words.dtype == torch.int32 and p.words.shape == (e, n, 32 * kb // 8) and p.words.is_contiguous()
    assert torch.equal(p.codes_u8, w.data)
    assert torch.equal(p.scales, w.linear_scale().view(torch.uint8).reshape(e, n, 2 * kb))
    gs = torch.as_tensor(w.global_scale, dtype=torch.float32).reshape(-1).expand(e)
    assert torch.equal(p.alpha, DECODE_SHIFT / gs)


def test_word_holds_codes_in_nibble_order(seed):
    w = _experts(2, 8, 64, "linear", seed)
    p = pack_nvfp4(w)
    codes = w.codes().to(torch.int64)  # [E, N, K], element j of a word in bits 4j..4j+3
    words = p.words.to(torch.int64) & 0xFFFFFFFF
    for j in range(8):
        assert torch.equal((words >> (4 * j)) & 0xF, codes[..., j::8])


def test_moe_pair_round_trip_and_shape_rules(seed):
    w13 = _experts(3, 64, 96, "swizzled", seed)
    w2 = _experts(3, 96, 32, "linear", seed + 1)
    p = prepare_moe_weights(w13, w2)
    assert (p.num_experts, p.hidden, p.intermediate) == (3, 96, 32)
    a, b = unpack_moe_weights(p)
    assert _same(a, w13) and _same(b, w2)
    with pytest.raises(ValueError, match="w2"):
        prepare_moe_weights(w13, _experts(3, 96, 64, "linear", seed))
    with pytest.raises(ValueError, match="multiple of 32"):
        pack_nvfp4(_experts(1, 4, 48, "linear", seed))
    with pytest.raises(TypeError, match="w13"):
        prepare_moe_weights(torch.zeros(3, 64, 96), w2)


def test_swizzled_padding_must_be_zero(seed):
    w = _experts(1, 40, 64, "swizzled", seed)
    bad = w.scale.view(torch.uint8).clone()
    bad[..., -1, -1] = 0x38  # a padding byte (row 127 >= 40)
    from dataclasses import replace

    with pytest.raises(ValueError, match="padding"):
        pack_nvfp4(replace(w, scale=bad.view(torch.float8_e4m3fn)))


# ---- the fragment layout (sm120lab.kernels.moe_frag) ----

from sm120lab.kernels.moe_frag import emulate_word  # noqa: E402
from sm120lab.kernels.prepack import FRAG_BIT, FRAG_SHIFT, canonical_to_frag, frag_to_canonical  # noqa: E402

_E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def _frag_weights(p, e, n, k):
    """emulate_word over every word -> [E, N, K] weights in canonical order."""
    sc = p.frag_scales[..., None].expand(e, n // 16, k // 64, 32, 4)  # one scale pair per lane
    v = emulate_word(p.frag_words, sc).reshape(e, n // 16, k // 64, 8, 4, 4, 2, 2, 2)  # E NT KC g t j ch rh cl
    return v.permute(0, 1, 7, 3, 2, 4, 5, 6, 8).reshape(e, n, k)


def test_frag_bit_map_is_a_permutation():
    assert sorted(b for row in FRAG_BIT for b in row) == list(range(32))


@given(e=st.integers(1, 3), nt=st.integers(1, 4), kc=st.integers(1, 3), layout=st.sampled_from(["linear", "swizzled"]),
       zero_block=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_frag_layout_is_exact_and_decodes_to_e2m1_times_sf(e, nt, kc, layout, zero_block, seed):
    n, k = 16 * nt, 64 * kc
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(e, n, k, generator=g) * torch.exp(3 * torch.randn(e, n, 1, generator=g))
    if zero_block:
        x[:, :, :16] = 0  # scale 0, codes 0
    gs = (448.0 * 6.0 / x.abs().amax(dim=(1, 2)).clamp_min(1e-30)).reshape(e, 1)
    w = quantize_nvfp4(x, gs, scale_layout=layout)
    p = pack_nvfp4(w)
    assert p.frag_words.shape == (e, nt, kc, 32, 4) and p.frag_scales.shape == (e, nt, kc, 32)
    data, scales = frag_to_canonical(p.frag_words, p.frag_scales)
    assert torch.equal(data, w.data) and torch.equal(scales, p.scales)
    assert _same(unpack_nvfp4(p), w)
    # the asm's recipe (bit for bit in torch) gives exactly e2m1 * SF * 2**-7 for every weight
    sf = w.linear_scale().float().reshape(e, n, k // 16).repeat_interleave(16, -1)
    assert torch.equal(_frag_weights(p, e, n, k), _E2M1[w.codes().long()] * sf / FRAG_SHIFT)
    gsv = torch.as_tensor(w.global_scale, dtype=torch.float32).reshape(-1).expand(e)
    assert torch.equal(p.frag_alpha, FRAG_SHIFT / gsv)


def test_frag_layout_needs_tile_multiples_and_valid_scales(seed):
    w = _experts(1, 24, 64, "linear", seed)  # N % 16 != 0: no fragment layout, canonical still fine
    assert pack_nvfp4(w).frag_words is None
    w = _experts(1, 16, 64, "linear", seed)
    bad = NVFP4Tensor(data=w.data, scale=w.scale.view(torch.uint8).clone().view(torch.float8_e4m3fn),
                      global_scale=w.global_scale, shape=w.shape, scale_layout="linear")
    bad.scale.view(torch.uint8)[0, 0] = 0  # scale 0 over non-zero codes
    with pytest.raises(ValueError, match="scale 0 but non-zero codes"):
        pack_nvfp4(bad)
    assert pack_nvfp4(bad, frag=False).frag_words is None
    bad.scale.view(torch.uint8)[0, 0] = 0x7F  # NaN scale
    with pytest.raises(ValueError, match="finite and non-negative"):
        pack_nvfp4(bad)


def test_frag_conversion_has_no_hidden_copy_order(seed):
    """canonical_to_frag moves every code bit once: flipping one canonical bit flips exactly one frag bit."""
    w = _experts(1, 16, 64, "linear", seed)
    words, _ = canonical_to_frag(w.data, w.linear_scale().view(torch.uint8).reshape(1, 16, 4))
    g = torch.Generator().manual_seed(seed)
    for _ in range(16):
        data = w.data.clone()
        pos = int(torch.randint(0, data.numel() * 8, (1,), generator=g))
        data.view(-1)[pos // 8] ^= 1 << (pos % 8)
        flipped, _ = canonical_to_frag(data, w.linear_scale().view(torch.uint8).reshape(1, 16, 4))
        diff = (flipped.view(torch.int32) ^ words.view(torch.int32)).to(torch.int64) & 0xFFFFFFFF
        assert sum(bin(int(v)).count("1") for v in diff.reshape(-1)) == 1


def test_frag_tile_map_matches_the_mma_fragment():
    """Measured on canonical_to_frag: lane (g, t) holds rows g and g+8, K columns 16t..16t+15 of the chunk
    (one scale block), 8 codes per word, A register r: rows g / g+8 for r even / odd."""
    import numpy as np

    from sm120lab.kernels.layout import frag_tile_map

    m = frag_tile_map()
    rows = np.arange(16)[:, None]
    cols = np.arange(64)[None, :]
    assert (m["lane"] == 4 * (rows % 8) + cols // 16).all()
    assert (m["word"] == (cols % 16) // 4).all()
    assert (m["register"] % 2 == rows // 8).all() and (m["register"] // 2 == (cols % 4) // 2).all()
    # the lane holding a code also holds that code's scale byte
    assert (m["scale_lane"] == 4 * (rows % 8) + np.arange(4)[None, :]).all()
    assert all(m["scale_lane"][r, c // 16] == m["lane"][r, c] for r in range(16) for c in range(64))


def test_frag_launchers_refuse_bad_loop_options_in_one_line(seed):
    """The loop options of the fragment launchers are checked before any launch (CPU tensors: nothing runs)."""
    from sm120lab.kernels.moe_frag import launch_frag, launch_frag_w2_sum

    w = pack_nvfp4(_experts(2, 32, 64, "linear", seed))
    a = torch.randn(3, 64).to(torch.bfloat16)
    ids = torch.zeros(3, dtype=torch.int64)
    kw = dict(num_slots=3, a_row_div=1, fuse_silu=False, mul_routing=True, tiles=2, warps=4)
    out = torch.empty(3, 32)
    with pytest.raises(ValueError, match="ping must be 0, 2 or 4, got 3"):
        launch_frag(a, w, out, torch.ones(3), ids, ids, sorted_cols=False, ping=3, **kw)
    with pytest.raises(ValueError, match="cg must be 0, 1, 2 or 4, got 3"):
        launch_frag(a, w, out, torch.ones(3), ids, ids, sorted_cols=True, cg=3, ping=2, **kw)
    with pytest.raises(ValueError, match="share_b needs tiles=2 or 4 and ping=0, got tiles=2, ping=2"):
        launch_frag(a, w, out, torch.ones(3), ids, ids, sorted_cols=False, ping=2, share_b=True, **kw)
    with pytest.raises(ValueError, match="share_b needs tiles=2 or 4 and ping=0, got tiles=1, ping=0"):
        launch_frag(a, w, out, torch.ones(3), ids, ids, sorted_cols=False, share_b=True, **{**kw, "tiles": 1})
    with pytest.raises(ValueError, match="tiles=4: the output size 32 must be a multiple of 64"):
        launch_frag(a, w, out, torch.ones(3), ids, ids, sorted_cols=False, share_b=True, **{**kw, "tiles": 4})
    with pytest.raises(ValueError, match="ping must be 0, 2 or 4, got 1"):
        launch_frag_w2_sum(torch.randn(3, 64).to(torch.bfloat16), pack_nvfp4(_experts(2, 64, 64, "linear", seed)),
                           torch.empty(3, 64), torch.ones(3), ids.view(3, 1), tiles=1, warps=8, ping=1)
    with pytest.raises(ValueError, match="ping needs prefetch=True"):
        launch_frag_w2_sum(torch.randn(3, 64).to(torch.bfloat16), pack_nvfp4(_experts(2, 64, 64, "linear", seed)),
                           torch.empty(3, 64), torch.ones(3), ids.view(3, 1), tiles=1, warps=8, ping=2)
    from sm120lab.kernels.moe_configs import FRAG_CONFIGS

    assert FRAG_CONFIGS["f2w4d2"].w2sum_prefetch and FRAG_CONFIGS["f1w8p"].w2sum_prefetch
    assert not FRAG_CONFIGS["f1w8"].w2sum_prefetch
