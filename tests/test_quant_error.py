import pytest
import torch

from sm120lab.quant_error import (FORMATS, error_table, fake_quant_fp8_per_tensor, fake_quant_int4_groupwise,
                                  relative_error, sample_distribution)


def test_every_format_is_lossy_but_close_on_gaussian():
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    x = sample_distribution("gaussian", (64, 512), g)
    for name, (fq, _) in FORMATS.items():
        err = relative_error(x, fq(x))
        assert 0 < err < 0.2, name


def test_fp8_beats_4bit_and_nvfp4_beats_mxfp4_on_outliers():
    rows = error_table(["outlier_channels"], (64, 1024), seed=torch.seed() % 2**31)
    err = {r["format"]: r["relative_error"] for r in rows}
    assert err["FP8 E4M3 (tensor)"] < err["NVFP4 (16, E4M3)"] < err["MXFP4 (32, E8M0)"]


def test_int4_groupwise_values_on_grid():
    x = torch.randn(4, 256)
    xh = fake_quant_int4_groupwise(x)
    s = (x.reshape(4, 2, 128).abs().amax(-1, keepdim=True) / 7).half().float()
    q = xh.reshape(4, 2, 128) / s
    assert torch.allclose(q, q.round(), atol=1e-4) and q.abs().max() <= 8
    with pytest.raises(ValueError, match="group"):
        fake_quant_int4_groupwise(torch.randn(2, 100))


def test_fp8_per_tensor_keeps_max_exact():
    x = torch.randn(8, 64)
    xh = fake_quant_fp8_per_tensor(x)
    i = x.abs().argmax()
    assert torch.isclose(xh.flatten()[i], x.flatten()[i], rtol=1e-6)


def test_unknown_distribution():
    with pytest.raises(ValueError, match="kind"):
        sample_distribution("uniform", (2, 16), torch.Generator())
