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
