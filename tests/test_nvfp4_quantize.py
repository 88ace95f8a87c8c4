"""NVFP4 / MXFP4 quantization: properties on fresh random inputs, and every bad-input rule."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sm120lab.nvfp4 import (
    E2M1_VALUES,
    default_global_scale,
    dequantize_mxfp4,
    dequantize_nvfp4,
    e2m1_decode,
    e8m0_to_float,
    gemm_alpha_from_modelopt_scales,
    global_scale_from_modelopt_scale,
    modelopt_scale_from_global_scale,
    quantize_mxfp4,
    quantize_nvfp4,
    swizzle_scales_128x4,
    unpack_e2m1,
    unswizzle_scales_128x4,
)

GRID = np.array(E2M1_VALUES[:8])
finite_f32 = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32)


def blocks_strategy(max_rows=4, max_blocks=4):
    return st.tuples(st.integers(1, max_rows), st.integers(1, max_blocks)).flatmap(
        lambda s: arrays(np.float32, (s[0], 16 * s[1]), elements=finite_f32))


def _nearest_grid_ok(t: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """decoded magnitude is the nearest grid value to |t| (ties to even), saturating at 6; accepts
    either neighbour when |t| is within a few fp32 ulps of a midpoint (fp32 vs fp64 evaluation)."""
    a = np.minimum(np.abs(t), 6.0)
    dist = np.abs(GRID[None, :] - a[:, None])
    best = dist.min(axis=1)
    d_dec = np.abs(np.abs(decoded) - a)
    exact = np.isclose(d_dec, best, rtol=0, atol=0)
    near_tie = np.abs(d_dec - best) <= 4 * np.spacing(np.float32(np.maximum(a, 1e-30))).astype(np.float64) * 8
    # ties: both neighbours equidistant -> must be the even code
    return exact | near_tie


@given(blocks_strategy())
def test_decoded_elements_are_nearest_grid_values(x_np):
    x = torch.from_numpy(x_np)
    q = quantize_nvfp4(x)
    gs = float(q.global_scale)
    sf = q.scale.float().numpy().repeat(16, axis=-1).astype(np.float64)
    codes = q.codes()
    dec = e2m1_decode(codes).numpy().astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sf > 0, x_np.astype(np.float64) * gs / sf, 0.0)
    ok = _nearest_grid_ok(t.ravel(), dec.ravel())
    assert ok.all(), f"{(~ok).sum()} elements not nearest-grid"
    # signs follow the input (zero codes keep the sign of x)
    nz = dec.ravel() != 0
    assert (np.signbit(dec.ravel()[nz]) == np.signbit(x_np.ravel()[nz])).all()


@given(blocks_strategy())
def test_block_scales_are_e4m3_of_gs_amax_over_6(x_np):
    x = torch.from_numpy(x_np)
    q = quantize_nvfp4(x)
    amax = torch.from_numpy(np.abs(x_np).reshape(x_np.shape[0], -1, 16).max(-1))
    inv6 = torch.tensor(1 / 6, dtype=torch.float32)
    expected = (q.global_scale * (amax * inv6)).clamp(max=448).to(torch.float8_e4m3fn)
    assert torch.equal(q.scale.view(torch.uint8), expected.view(torch.uint8))


#: the smallest normal E4M3 value: block scales below it are subnormal (steps of 2**-9)
E4M3_MIN_NORMAL = 2.0 ** -6


@given(blocks_strategy(), st.booleans())
def test_quantize_dequantize_is_idempotent(x_np, swizzled):
    """quantize(dequantize(q)) == q for every block whose largest code is +-6 (or that is all zero): its
    dequantized maximum gives back the same block scale, and every value sits on the grid. A normal E4M3
    scale rounds gs*amax/6 by at most 6.25%, so the block maximum always lands on 6; only a subnormal
    scale (steps of 2**-9, up to 50% off) can leave it at 4 or below, and then the requantized block gets a
    smaller scale (test_subnormal_block_scale_is_not_idempotent)."""
    layout = "swizzled" if swizzled else "linear"
    q = quantize_nvfp4(torch.from_numpy(x_np), scale_layout=layout)
    q2 = quantize_nvfp4(dequantize_nvfp4(q), q.global_scale, scale_layout=layout)
    rows, k = x_np.shape
    codes = unpack_e2m1(q.data).reshape(rows, k // 16, 16)
    sf = q.linear_scale().float().reshape(rows, k // 16)
    top = (codes & 7).amax(-1)
    full = (top == 7) | (sf == 0)
    assert bool((full | (sf < E4M3_MIN_NORMAL)).all()), "a normal block scale whose block maximum is not +-6"
    codes2 = unpack_e2m1(q2.data).reshape(rows, k // 16, 16)
    assert torch.equal(codes2[full], codes[full])
    assert torch.equal(q2.linear_scale().view(torch.uint8).reshape(rows, -1)[full],
                       q.linear_scale().view(torch.uint8).reshape(rows, -1)[full])


def test_subnormal_block_scale_is_not_idempotent():
    """The counterexample hypothesis found (2026-12-04): gs = 1.2497 from the 2151 outlier, the second block
    all 0.015625. gs*amax/6 = 0.00325 rounds to the subnormal scale 2 * 2**-9 (+20%), so x*s = 4.9986 -> 4;
    dequantized 0.0125 gives gs*amax/6 = 0.0026 -> 1 * 2**-9, and x*s = 8 saturates to 6."""
    x = torch.tensor([[2151.0] + [0.015625] * 31], dtype=torch.float32)
    q = quantize_nvfp4(x)
    q2 = quantize_nvfp4(dequantize_nvfp4(q), q.global_scale)
    assert q.linear_scale().float()[0].tolist() == [448.0, 2 * 2.0 ** -9]
    assert q2.linear_scale().float()[0].tolist() == [448.0, 2.0 ** -9]
    assert e2m1_decode(unpack_e2m1(q.data))[0, 16:].tolist() == [4.0] * 16
    assert e2m1_decode(unpack_e2m1(q2.data))[0, 16:].tolist() == [6.0] * 16


@given(st.integers(1, 300), st.integers(1, 13), st.integers(0, 2))
def test_swizzle_round_trips_for_any_shape(rows, cols, batch):
    lead = (batch + 1,) if batch else ()
    s = torch.randint(0, 255, (*lead, rows, cols), dtype=torch.uint8).view(torch.float8_e4m3fn)
    sw = swizzle_scales_128x4(s)
    assert sw.shape[-2] % 128 == 0 and sw.shape[-1] % 4 == 0
    back = unswizzle_scales_128x4(sw, rows, cols)
    assert torch.equal(back.view(torch.uint8), s.view(torch.uint8))


def test_swizzle_index_map_matches_the_documented_formula():
    rows, cols = 256, 8
    idx = torch.arange(rows * cols, dtype=torch.int64).reshape(rows, cols)
    flat = swizzle_scales_128x4(idx).reshape(-1)
    for r, c in [(0, 0), (1, 0), (31, 3), (32, 0), (100, 5), (127, 7), (128, 0), (255, 6)]:
        a, b, cc = r // 128, (r % 128) // 32, r % 32
        d, e = c // 4, c % 4
        offset = (a * (cols // 4) + d) * 512 + cc * 16 + b * 4 + e
        assert int(flat[offset]) == r * cols + c


def test_linear_and_swizzled_quantizations_agree_and_dequantize_equally():
    x = torch.randn(3, 200, 96)
    lin = quantize_nvfp4(x)
    sw = quantize_nvfp4(x, scale_layout="swizzled")
    assert sw.scale.shape == (3, 256, 8)
    assert torch.equal(lin.data, sw.data)
    assert torch.equal(dequantize_nvfp4(lin), dequantize_nvfp4(sw))


def test_per_expert_global_scales_broadcast():
    w = torch.randn(4, 32, 64) * torch.tensor([1.0, 10.0, 0.1, 3.0]).view(4, 1, 1)
    gs = torch.stack([default_global_scale(w[e]) for e in range(4)]).view(4, 1)
    q = quantize_nvfp4(w, gs)
    for e in range(4):
        qe = quantize_nvfp4(w[e], gs[e, 0])
        assert torch.equal(q.data[e], qe.data)
    err = (dequantize_nvfp4(q) - w).norm() / w.norm()
    assert err < 0.15


def test_error_is_within_nvfp4_envelope_on_gaussian():
    x = torch.randn(64, 1024)
    err = float((dequantize_nvfp4(quantize_nvfp4(x)) - x).norm() / x.norm())
    assert 0.03 < err < 0.15  # nonzero (real quantization) and small (not garbage)


def test_fp64_dequantize_equals_exact_rational_value():
    x = torch.randn(2, 32)
    q = quantize_nvfp4(x)
    d64 = dequantize_nvfp4(q, dtype=torch.float64)
    d32 = dequantize_nvfp4(q)
    assert torch.equal(d64.float(), d32)  # fp32 result is the correctly rounded exact value


def test_all_zero_tensor_and_zero_block():
    z = torch.zeros(2, 32)
    q = quantize_nvfp4(z)
    assert float(q.global_scale) == 1.0
    assert int(q.data.sum()) == 0 and int(q.scale.view(torch.uint8).sum()) == 0
    assert not torch.isnan(dequantize_nvfp4(q)).any()
    x = torch.randn(1, 48)
    x[0, 16:32] = 0
    q = quantize_nvfp4(x)
    assert q.scale.float()[0, 1] == 0 and int(q.codes()[0, 16:32].sum()) == 0
    assert not torch.isnan(dequantize_nvfp4(q)).any()


def test_subnormal_tensor_gets_finite_global_scale_and_no_nan():
    # amax = 1e-45 (the smallest fp32 subnormal): 448*6/amax overflows fp32 (found by hypothesis)
    x = torch.full((1, 16), 1e-45)
    q = quantize_nvfp4(x)
    assert torch.isfinite(q.global_scale).all()
    d = dequantize_nvfp4(q)
    assert torch.isfinite(d).all() and (d.abs() <= 1e-45).all()
    q2 = quantize_nvfp4(d, q.global_scale)
    assert torch.equal(q2.data, q.data)
    # smallest normal amax beside zeros: 1/(SF/gs) overflows fp32; zeros must stay zero codes
    y = torch.zeros(1, 16)
    y[0, 0] = torch.finfo(torch.float32).tiny
    qy = quantize_nvfp4(y)
    assert qy.codes()[0, 1:].eq(0).all() and qy.codes()[0, 0] == 0x7


def test_input_is_not_modified():
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(4, 64).to(dt)
        before = x.clone()
        quantize_nvfp4(x, scale_layout="swizzled")
        quantize_mxfp4(x)
        assert torch.equal(x, before)


def test_nan_and_inf_raise_with_count_and_first_index():
    x = torch.randn(3, 32)
    x[1, 5] = float("nan")
    x[2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"2 non-finite.*\(1, 5\)"):
        quantize_nvfp4(x)
    with pytest.raises(ValueError, match="non-finite"):
        quantize_mxfp4(x)
    q = quantize_nvfp4(x, allow_nonfinite=True)
    assert q.codes()[1, 5] == 0x7 and q.codes()[2, 0] == 0x7


def test_k_not_multiple_of_block_names_padding():
    with pytest.raises(ValueError, match=r"K=30.*block size 16.*pad K by 2"):
        quantize_nvfp4(torch.randn(2, 30))
    with pytest.raises(ValueError, match=r"K=48.*block size 32.*pad K by 16"):
        quantize_mxfp4(torch.randn(2, 48))


def test_wrong_dtype_or_device_raise_type_error():
    with pytest.raises(TypeError, match="dtype"):
        quantize_nvfp4(torch.ones(2, 16, dtype=torch.int32))
    with pytest.raises(TypeError):
        quantize_nvfp4(np.ones((2, 16), dtype=np.float32))
    with pytest.raises(TypeError, match="device"):
        quantize_nvfp4(torch.randn(2, 16), torch.tensor(1.0, device="meta"))
    with pytest.raises(ValueError, match="scale_layout"):
        quantize_nvfp4(torch.randn(2, 16), scale_layout="tiled")
    with pytest.raises(ValueError, match="global_scale"):
        quantize_nvfp4(torch.randn(2, 16), -1.0)
    with pytest.raises(TypeError):
        dequantize_nvfp4(torch.zeros(2))


@given(arrays(np.float32, (3, 64), elements=finite_f32))
def test_mxfp4_scales_are_powers_of_two_and_max_fits(x_np):
    x = torch.from_numpy(x_np)
    q = quantize_mxfp4(x)
    amax = np.abs(x_np).reshape(3, 2, 32).max(-1)
    scale = e8m0_to_float(q.scale).numpy()
    nz = amax > 0
    # OCP rule: byte = clamp(floor(log2 amax) - 2 + 127, 0, 254) (numpy's frexp, independent of torch's)
    _, e = np.frexp(amax.astype(np.float64))
    expected = np.where(nz, np.clip(e - 1 - 2 + 127, 0, 254), 0)
    np.testing.assert_array_equal(q.scale.numpy(), expected)
    # where the exponent is not clamped, X = 2^(floor(log2 amax) - 2)  => amax / X in [4, 8)
    free = nz & (e - 1 - 2 + 127 >= 0)
    ratio = amax[free] / scale[free]
    assert ((ratio >= 4) & (ratio < 8)).all()
    d = dequantize_mxfp4(q).numpy()
    assert np.all(np.abs(d) <= 6 * scale.repeat(32, axis=-1) + 0)


def test_modelopt_conversions_are_explicit_inverses():
    gs = torch.tensor([2688.0, 17.5])
    ws2 = modelopt_scale_from_global_scale(gs)
    assert torch.allclose(ws2, 1 / gs)
    assert torch.allclose(global_scale_from_modelopt_scale(ws2), gs, rtol=1e-7)
    alpha = gemm_alpha_from_modelopt_scales(ws2[0], ws2[1])
    assert math.isclose(float(alpha), 1 / (2688.0 * 17.5), rel_tol=1e-6)
    with pytest.raises(ValueError):
        modelopt_scale_from_global_scale(torch.tensor(0.0))


# --- values beyond fp32 and malformed quantized tensors (each was accepted silently before) ---

@pytest.mark.parametrize("big", [1e39, -1e300, 3.5e38])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_float64_beyond_fp32_range_raises_instead_of_zeros(seed, big, fmt):
    torch.manual_seed(seed)
    x = torch.randn(3, 64, dtype=torch.float64)
    x[1, 17] = big
    quantize = quantize_nvfp4 if fmt == "nvfp4" else quantize_mxfp4
    for allow in (False, True):
        with pytest.raises(ValueError, match=r"1 finite value\(s\) beyond the fp32 range.*index \(1, 17\)"):
            quantize(x, allow_nonfinite=allow)
    x[1, 17] = 3.4e38  # the largest fp32 values still quantize
    assert quantize(x).data.any()


def _nvfp4(seed):
    torch.manual_seed(seed)
    return quantize_nvfp4(torch.randn(4, 64))


def test_dequantize_nvfp4_rejects_malformed_parts(seed):
    q = _nvfp4(seed)
    from dataclasses import replace
    bad = {
        "uint8 scale": (replace(q, scale=q.scale.view(torch.uint8)), TypeError, "q.scale must be a float8_e4m3fn"),
        "gs = 0": (replace(q, global_scale=torch.tensor(0.0)), ValueError, "finite and > 0"),
        "gs < 0": (replace(q, global_scale=torch.tensor(-2.0)), ValueError, "finite and > 0"),
        "gs inf": (replace(q, global_scale=torch.tensor(float("inf"))), ValueError, "finite and > 0"),
        "gs int": (replace(q, global_scale=torch.tensor(3)), TypeError, "q.global_scale must be a floating"),
        "gs shape": (replace(q, global_scale=torch.ones(3)), ValueError, "does not broadcast"),
        "scale shape": (replace(q, scale=q.scale[:, :2]), ValueError, r"q.scale has shape \(4, 2\), expected \(4, 4\)"),
        "data shape": (replace(q, data=q.data[:2]), ValueError, r"q.data has shape \(2, 32\)"),
        "layout": (replace(q, scale_layout="tiled"), ValueError, "scale_layout must be one of"),
        "dtype": (q, TypeError, "dtype must be"),
    }
    for name, (bad_q, exc, msg) in bad.items():
        with pytest.raises(exc, match=msg):
            dequantize_nvfp4(bad_q, torch.bfloat16 if name == "dtype" else torch.float32)
    assert torch.equal(dequantize_nvfp4(q.with_layout("swizzled")), dequantize_nvfp4(q))


def test_dequantize_mxfp4_rejects_malformed_parts_and_honours_dtype(seed):
    from dataclasses import replace
    torch.manual_seed(seed)
    x = torch.randn(4, 64)
    q = quantize_mxfp4(x)
    ref = dequantize_mxfp4(q, torch.float64)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        out = dequantize_mxfp4(q, dtype)
        assert out.dtype == dtype and torch.equal(out, ref.to(dtype))  # e2m1 x 2^e: exact in every dtype here
    for bad_q, exc, msg in (
        (replace(q, scale=q.scale[:, :1]), ValueError, r"q.scale has shape \(4, 1\), expected \(4, 2\)"),
        (replace(q, scale=q.scale[:1]), ValueError, r"q.scale has shape \(1, 2\)"),  # used to broadcast
        (replace(q, scale=q.scale.float()), TypeError, "q.scale must be a uint8"),
        (replace(q, data=q.data[:, :8]), ValueError, "q.data has shape"),
    ):
        with pytest.raises(exc, match=msg):
            dequantize_mxfp4(bad_q)
    for dtype in (torch.int32, torch.uint8, "float32"):
        with pytest.raises(TypeError, match="dtype must be"):
            dequantize_mxfp4(q, dtype)


def test_scale_layout_and_numerics_are_str_enums():
    from sm120lab.nvfp4 import Numerics, ScaleLayout
    q = quantize_nvfp4(torch.ones(1, 16), scale_layout="swizzled")
    assert q.scale_layout is ScaleLayout.SWIZZLED and q.scale_layout == "swizzled" and f"{q.scale_layout}" == "swizzled"
    assert [n.value for n in Numerics] == ["exact", "w4a16", "w4a4"] and Numerics("w4a4") == "w4a4"
