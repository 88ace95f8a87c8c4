"""Quantization error of NVFP4 against MXFP4, INT4 group-wise and FP8 on realistic tensors.

Each ``fake_quant_*`` returns the dequantized fp32 tensor (quantize then decode), so formats are
compared by ``relative_error(x, fake_quant(x)) = ||x - x_hat||_F / ||x||_F`` on the same data.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import dequantize_mxfp4, dequantize_nvfp4, quantize_mxfp4, quantize_nvfp4


def fake_quant_nvfp4(x: torch.Tensor) -> torch.Tensor:
    """NVFP4 (16-element blocks, E4M3 scales, fp32 tensor scale)."""
    return dequantize_nvfp4(quantize_nvfp4(x))


def fake_quant_mxfp4(x: torch.Tensor) -> torch.Tensor:
    """MXFP4 (32-element blocks, E8M0 power-of-two scales)."""
    return dequantize_mxfp4(quantize_mxfp4(x))


def fake_quant_int4_groupwise(x: torch.Tensor, group: int = 128) -> torch.Tensor:
    """Symmetric INT4 with one fp16 scale per ``group`` elements along K (GPTQ/AWQ style):
    ``s = amax/7``, ``q = clamp(round(x/s), -8, 7)``, ``x_hat = q*s``."""
    k = x.shape[-1]
    if k % group:
        raise ValueError(f"x: last dimension {k} is not a multiple of group={group}")
    g = x.float().reshape(*x.shape[:-1], k // group, group)
    s = (g.abs().amax(-1, keepdim=True) / 7.0).half().float()
    s = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.clamp(torch.round(g / s), -8, 7)
    return (q * s).reshape(x.shape)


def fake_quant_fp8_per_tensor(x: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 with one fp32 per-tensor scale ``amax/448``."""
    xf = x.float()
    amax = xf.abs().max()
    s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return (xf / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s


FORMATS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], float]] = {
    # name: (fake quantizer, storage bits per element including scales)
    "NVFP4 (16, E4M3)": (fake_quant_nvfp4, 4.5),
    "MXFP4 (32, E8M0)": (fake_quant_mxfp4, 4.25),
    "INT4 (g128, fp16)": (fake_quant_int4_groupwise, 4.125),
    "FP8 E4M3 (tensor)": (fake_quant_fp8_per_tensor, 8.0),
}


def relative_error(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """``||x - x_hat||_F / ||x||_F`` in float64, ``x`` the reference (the one relative error of the package).

    Args:
        x: the reference tensor.
        x_hat: its approximation (same shape).

    Returns:
        The relative Frobenius error as a Python float.
    """
    x64, h64 = x.double(), x_hat.double()
    return float((x64 - h64).norm() / x64.norm())


def sample_distribution(kind: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Test tensors: ``gaussian`` weights N(0, 0.02); ``student_t`` heavy tails (nu=3);
    ``outlier_channels`` activations N(0,1) with 1% of channels scaled x50 (LLM-style outliers)."""
    if kind == "gaussian":
        return torch.randn(shape, generator=generator) * 0.02
    if kind == "student_t":
        z = torch.randn(shape, generator=generator)
        chi2 = (torch.randn((*shape, 3), generator=generator) ** 2).sum(-1)
        return z / torch.sqrt(chi2 / 3.0)
    if kind == "outlier_channels":
        x = torch.randn(shape, generator=generator)
        k = shape[-1]
        n_out = max(1, k // 100)
        idx = torch.randperm(k, generator=generator)[:n_out]
        x[..., idx] *= 50.0
        return x
    raise ValueError(f"kind must be one of 'gaussian', 'student_t', 'outlier_channels', got {kind!r}")


def error_table(kinds: list[str], shape: tuple[int, int], seed: int) -> list[dict]:
    """Relative error of every format on every distribution (fresh tensors from ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for kind in kinds:
        x = sample_distribution(kind, shape, g)
        for name, (fake_quant, bits) in FORMATS.items():
            rows.append({"distribution": kind, "format": name, "bits_per_element": bits,
                         "relative_error": relative_error(x, fake_quant(x))})
    return rows


def tensor_scale_effect(x: torch.Tensor) -> dict:
    """What the FP32 per-tensor scale buys: NVFP4 error with ``gs = 448*6/amax`` and with ``gs = 1``.

    Returns:
        ``{"with_gs", "gs_1"}`` relative errors, ``zero_scale_blocks`` (blocks whose E4M3 scale is 0
        under ``gs = 1``: their values decode to 0) and ``blocks``.
    """
    without = quantize_nvfp4(x, 1.0)
    return {"with_gs": relative_error(x, fake_quant_nvfp4(x)),
            "gs_1": relative_error(x, dequantize_nvfp4(without)),
            "zero_scale_blocks": int((without.scale.float() == 0).sum()), "blocks": x.numel() // 16}


def cuda_matches_cpu(x: torch.Tensor) -> tuple[bool | None, str]:
    """Quantize ``x`` to NVFP4 on the CUDA device and on the CPU and compare the bytes.

    Returns:
        (True/False, what was compared) on a machine with a CUDA GPU; (None, why not) otherwise.
    """
    if not torch.cuda.is_available():
        return None, "no CUDA GPU on this machine (torch.cuda.is_available() is False)"
    cpu, gpu = quantize_nvfp4(x), quantize_nvfp4(x.cuda())
    same = (torch.equal(cpu.data, gpu.data.cpu()) and torch.equal(cpu.scale.view(torch.uint8), gpu.scale.cpu().view(torch.uint8))
            and torch.equal(cpu.global_scale, gpu.global_scale.cpu()))
    return same, f"{x.numel():,} values on {torch.cuda.get_device_name()}: packed codes, E4M3 scales, global scale"
