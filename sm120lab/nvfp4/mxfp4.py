"""MXFP4 (OCP Microscaling v1.0): E2M1 elements in 32-element blocks, one E8M0 (power of two)
scale per block, no tensor scale.

Scale rule of the OCP MX spec, section 6.3: ``X = 2^(floor(log2(amax_b)) - emax_elem)`` with
``emax_elem = 2`` for E2M1, stored as the biased byte ``floor(log2 amax_b) - 2 + 127`` clamped to
[0, 254]; elements ``e2m1_rn_satfinite(x / X)``. All-zero blocks get byte 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _validate as _v
from .e2m1 import e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1

MXFP4_BLOCK = 32
E2M1_EMAX = 2


@dataclass(frozen=True)
class MXFP4Tensor:
    """data: uint8 [..., K/2] packed E2M1; scale: uint8 E8M0 biased exponents [..., K/32]."""

    data: torch.Tensor
    scale: torch.Tensor
    shape: torch.Size
    block_size: int = MXFP4_BLOCK


def e8m0_to_float(scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """E8M0 byte -> 2^(byte-127) (byte 255 is NaN)."""
    exp = scale.to(torch.int32) - 127
    out = torch.ldexp(torch.ones(scale.shape, dtype=dtype, device=scale.device), exp.to(dtype))
    return torch.where(scale == 255, torch.full_like(out, float("nan")), out)


def quantize_mxfp4(x: torch.Tensor, *, allow_nonfinite: bool = False) -> MXFP4Tensor:
    """Quantize ``x`` [..., K] (K a multiple of 32) to MXFP4 along the last dimension."""
    _v.check_float_tensor("x", x)
    _v.check_block_divisible("x", x, MXFP4_BLOCK, "MXFP4")
    if not allow_nonfinite:
        _v.check_finite("x", x)
    _v.check_fp32_range("x", x)
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    blocks = x.to(torch.float32).reshape(*lead, k // MXFP4_BLOCK, MXFP4_BLOCK)
    finite_abs = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros((), device=x.device))
    amax = finite_abs.amax(dim=-1)
    _, e = torch.frexp(amax)  # amax = m * 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
    biased = (e - 1 - E2M1_EMAX + 127).clamp(0, 254)
    biased = torch.where(amax > 0, biased, torch.zeros_like(biased)).to(torch.uint8)
    scale_f = e8m0_to_float(biased)
    codes = e2m1_encode(blocks / scale_f.unsqueeze(-1)).reshape(*lead, k)
    return MXFP4Tensor(data=pack_e2m1(codes), scale=biased, shape=x.shape)


DEQUANT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def dequantize_mxfp4(q: MXFP4Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MXFP4 -> ``e2m1(q) * 2^(scale-127)`` in ``dtype``.

    Args:
        q: the quantized tensor; ``data`` uint8 ``[..., K/2]``, ``scale`` uint8 ``[..., K/32]``.
        dtype: float32 (default), float64, float16 or bfloat16 (the last two round, and
            overflow or flush to zero for scales far from 2^0).

    Raises:
        TypeError: not an MXFP4Tensor, wrong part dtypes, or an unsupported ``dtype``.
        ValueError: parts whose shapes do not match ``q.shape``.
    """
    if not isinstance(q, MXFP4Tensor):
        raise TypeError(f"q must be an MXFP4Tensor, got {type(q).__name__}")
    _v.check_out_dtype(dtype, DEQUANT_DTYPES)
    _v.check_dtype("q.data", q.data, (torch.uint8,), "uint8 (two packed E2M1 codes per byte)")
    _v.check_dtype("q.scale", q.scale, (torch.uint8,), "uint8 (E8M0 biased exponents)")
    if q.block_size != MXFP4_BLOCK or len(q.shape) == 0 or q.shape[-1] % MXFP4_BLOCK:
        raise ValueError(f"q: block_size {q.block_size} and shape {tuple(q.shape)} are not MXFP4 "
                         f"(block {MXFP4_BLOCK}, last dimension a multiple of it)")
    lead, k = tuple(q.shape[:-1]), q.shape[-1]
    _v.check_shape("q.data", q.data, (*lead, k // 2), "two codes per byte along the last dimension")
    _v.check_shape("q.scale", q.scale, (*lead, k // MXFP4_BLOCK), f"one scale per {MXFP4_BLOCK} elements")
    vals = e2m1_decode(unpack_e2m1(q.data), dtype=dtype).reshape(*lead, k // q.block_size, q.block_size)
    return (vals * e8m0_to_float(q.scale, dtype).unsqueeze(-1)).reshape(q.shape)
