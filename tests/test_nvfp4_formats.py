"""E2M1 / E4M3 element formats against independent implementations (ml_dtypes, torch)."""

import ml_dtypes
import numpy as np
import pytest
import torch

from sm120lab.nvfp4 import E2M1_VALUES, e2m1_decode, e2m1_encode, e4m3_round_satfinite, pack_e2m1, unpack_e2m1


def test_all_16_e2m1_codes_decode_like_ml_dtypes():
    codes = np.arange(16, dtype=np.uint8)
    expected = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    got = e2m1_decode(torch.from_numpy(codes)).numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))  # -0.0 at code 8


def test_all_16_codes_round_trip_through_encode():
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(e2m1_encode(e2m1_decode(codes)), codes)


def test_e2m1_encode_matches_ml_dtypes_on_random_and_tie_values(seed):
    rng = np.random.default_rng(seed)
    grid = np.array(E2M1_VALUES[:8], dtype=np.float32)
    mids = (grid[1:] + grid[:-1]) / 2
    specials = np.concatenate([grid, mids, np.nextafter(mids, 0), np.nextafter(mids, 10), [6.0, 5.999, 6.5, 1e30]])
    x = np.concatenate([specials, -specials, rng.normal(0, 3, 20000).astype(np.float32),
                        rng.uniform(-7, 7, 20000).astype(np.float32)]).astype(np.float32)
    expected = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    got = e2m1_encode(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, expected)


def test_e2m1_saturation_and_nonfinite():
    x = torch.tensor([float("inf"), float("-inf"), 1e9, -7.0, float("nan")])
    assert e2m1_encode(x).tolist() == [0x7, 0xF, 0x7, 0xF, 0x7]


def test_pack_low_nibble_first_and_round_trip():
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x8]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x8F]]
    rnd = torch.randint(0, 16, (3, 5, 64), dtype=torch.uint8)
    assert torch.equal(unpack_e2m1(pack_e2m1(rnd)), rnd)
    # torch's packed fp4 container has the same byte size: [.., K/2] bytes <-> float4_e2m1fn_x2
    assert pack_e2m1(rnd).view(torch.float4_e2m1fn_x2).shape == (3, 5, 32)


def test_all_256_e4m3_bytes_decode_like_ml_dtypes_and_torch():
    b = np.arange(256, dtype=np.uint8)
    ref = b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    got = torch.from_numpy(b).view(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok], ref[ok])
    # and every finite value re-encodes to its own byte (except -0 -> 0x80 which is also itself)
    fin = torch.from_numpy(ref[ok])
    assert torch.equal(e4m3_round_satfinite(fin).view(torch.uint8), torch.from_numpy(b[ok]))


def test_e4m3_rounding_matches_ml_dtypes_rne_in_range(seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(0, 448, 20000), np.exp(rng.uniform(-14, 6, 20000))]).astype(np.float32)
    ref = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    got = e4m3_round_satfinite(torch.from_numpy(x)).view(torch.uint8).numpy()
    np.testing.assert_array_equal(got, ref)


def test_e4m3_saturates_instead_of_nan():
    x = torch.tensor([448.0, 449.0, 464.0, 1e6, -1e6])
    assert e4m3_round_satfinite(x).float().tolist() == [448.0, 448.0, 448.0, 448.0, -448.0]


@pytest.mark.parametrize("bad", [torch.zeros(4, dtype=torch.int32), [1.0, 2.0]])
def test_decode_rejects_wrong_types(bad):
    with pytest.raises(TypeError):
        e2m1_decode(bad)


def test_fp8_rowwise_scales_each_row_to_e4m3_max(seed):
    from sm120lab.nvfp4.fp8 import E4M3_MAX, fp8_rowwise

    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(5, 7, 64, generator=g) * torch.rand(5, 7, 1, generator=g) * 10).to(torch.bfloat16)
    w[1, 2] = 0  # an all-zero row keeps a tiny positive scale
    q, s = fp8_rowwise(w, chunk=2)
    amax = w.float().abs().amax(-1)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32 and s.shape == (5, 7)
    torch.testing.assert_close(s, (amax / E4M3_MAX).clamp_min(1e-12), rtol=0, atol=0)
    back = q.float() * s.unsqueeze(-1)
    # the largest element of every row is E4M3's largest value exactly; the rest within half an E4M3 ulp
    # (3 mantissa bits: 2**-4 relative) for normal codes, one subnormal step (2**-9 * scale) below them
    torch.testing.assert_close(back.abs().amax(-1), amax, rtol=1e-6, atol=0)
    err = (back - w.float()).abs()
    assert bool((err <= w.float().abs() * 2**-4 + 2**-10 * s.unsqueeze(-1)).all())
