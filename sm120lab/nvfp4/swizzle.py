"""The 128x4 block-scale layout of CUTLASS / cuBLAS / TRT-LLM ("SfAtom" for NVFP4 and MXFP4).

A scale matrix S[M, Kb] (one scale per 16- or 32-element block along K) is padded with zeros to
M' = ceil(M/128)*128 rows and Kb' = ceil(Kb/4)*4 columns, viewed as (M'/128, 4, 32, Kb'/4, 4)
with row m = 128*a + 32*b + c and column k = 4*d + e, and permuted to (a, d, c, b, e): each
512-byte atom holds a 128x4 tile with row c + 32*b stored at offset 16*c + 4*b + e. Source:
cuBLAS documentation, "1D Block Scaling Factors Layout"; CUTLASS ``Sm1xxBlockScaledConfig``.
Leading dimensions (experts) are kept as batch dimensions.
"""

from __future__ import annotations

import torch


def _pad_to(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def swizzle_scales_128x4(scales: torch.Tensor) -> torch.Tensor:
    """[..., M, Kb] -> [..., M', Kb'] in swizzled memory order (contiguous; padding is zero)."""
    if not isinstance(scales, torch.Tensor):
        raise TypeError(f"scales must be a torch.Tensor, got {type(scales).__name__}")
    if scales.dim() < 2:
        raise ValueError(f"scales must have at least 2 dims [..., M, Kb], got shape {tuple(scales.shape)}")
    *lead, m, kb = scales.shape
    mp, kbp = _pad_to(m, 128), _pad_to(kb, 4)
    raw = scales.view(torch.uint8) if scales.element_size() == 1 else scales
    padded = raw.new_zeros((*lead, mp, kbp))
    padded[..., :m, :kb] = raw
    nl = len(lead)
    tiles = padded.reshape(*lead, mp // 128, 4, 32, kbp // 4, 4)
    perm = list(range(nl)) + [nl + 0, nl + 3, nl + 2, nl + 1, nl + 4]
    out = tiles.permute(*perm).contiguous().reshape(*lead, mp, kbp)
    return out.view(scales.dtype) if raw is not scales else out


def unswizzle_scales_128x4(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`swizzle_scales_128x4`: [..., M', Kb'] -> [..., rows, cols]."""
    if not isinstance(swizzled, torch.Tensor):
        raise TypeError(f"swizzled must be a torch.Tensor, got {type(swizzled).__name__}")
    if swizzled.dim() < 2:
        raise ValueError(f"swizzled must have at least 2 dims, got shape {tuple(swizzled.shape)}")
    *lead, mp, kbp = swizzled.shape
    if mp % 128 or kbp % 4:
        raise ValueError(f"swizzled: trailing dims must be multiples of (128, 4), got ({mp}, {kbp})")
    if (not isinstance(rows, int) or not isinstance(cols, int) or not (0 <= rows <= mp and 0 <= cols <= kbp)
            or _pad_to(rows, 128) != mp or _pad_to(cols, 4) != kbp):  # 0 rows: an empty tensor's (0, Kb') scales
        raise ValueError(f"unswizzle_scales_128x4: rows={rows!r}, cols={cols!r} (the unswizzled scale shape) do not "
                         f"pad to the swizzled shape ({mp}, {kbp}) of 'swizzled'; expected rows padding to {mp} "
                         f"and cols padding to {kbp}")
    raw = swizzled.view(torch.uint8) if swizzled.element_size() == 1 else swizzled
    nl = len(lead)
    tiles = raw.reshape(*lead, mp // 128, kbp // 4, 32, 4, 4)  # (a, d, c, b, e)
    perm = list(range(nl)) + [nl + 0, nl + 3, nl + 2, nl + 1, nl + 4]  # -> (a, b, c, d, e)
    out = tiles.permute(*perm).reshape(*lead, mp, kbp)[..., :rows, :cols].contiguous()
    return out.view(swizzled.dtype) if raw is not swizzled else out
