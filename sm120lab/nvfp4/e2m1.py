"""FP4 E2M1: 1 sign, 2 exponent, 1 mantissa bit, exponent bias 1, no Inf/NaN.

Magnitudes by code 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (code 1 is the subnormal 0.5); bit 3 is the
sign. Source: OCP Microscaling Formats (MX) v1.0, section 5.3.3; PTX ISA "Floating point data
types" (.e2m1). Packing: two codes per byte, element 2i in the low nibble and 2i+1 in the high
nibble (the layout of ``torch.float4_e2m1fn_x2`` and of ModelOpt/FlashInfer NVFP4 checkpoints).
"""

from __future__ import annotations

import torch

#: value of each 4-bit code, index = code (8..15 are the negatives; 8 is -0.0)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
E2M1_MAX = 6.0

# Midpoints between consecutive magnitudes, and whether a tie rounds up: round-to-nearest-even
# sends a tie to the code with an even mantissa bit, i.e. the even code.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_ROUNDS_UP = (False, True, False, True, False, True, False)


def e2m1_encode(x: torch.Tensor, *, nan_code: int = 0x7) -> torch.Tensor:
    """fp32 -> E2M1 codes (uint8 0..15): round to nearest, ties to even, saturate to +-6.

    ``|x| > 6`` and +-Inf saturate to +-6 (PTX ``cvt.rn.satfinite``); NaN maps to ``nan_code``
    (default +6). The sign of zero is kept (``-0.0`` and tiny negatives give code 8).
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    a = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for mid, up in zip(_MIDPOINTS, _TIE_ROUNDS_UP):
        code += (a >= mid if up else a > mid).to(torch.uint8)
    code |= torch.signbit(x).to(torch.uint8) << 3
    nan = torch.isnan(x)
    if bool(nan.any()):
        code = torch.where(nan, torch.tensor(nan_code, dtype=torch.uint8, device=x.device), code)
    return code


def e2m1_decode(codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """E2M1 codes (uint8, low 4 bits used) -> values (exact in any float dtype)."""
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"codes must be a uint8 torch.Tensor, got {getattr(codes, 'dtype', type(codes).__name__)}")
    table = torch.tensor(E2M1_VALUES, dtype=dtype, device=codes.device)
    return table[(codes & 0xF).long()]


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes; element 2i in the low nibble, 2i+1 in the high nibble."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise ValueError(f"codes: last dimension must be even to pack two per byte, got shape {tuple(codes.shape)}")
    if bool((codes > 0xF).any()):
        raise ValueError("codes must be 4-bit values 0..15")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes (inverse of :func:`pack_e2m1`)."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    lo = packed & 0xF
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
