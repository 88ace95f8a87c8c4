"""One-time preparation of NVFP4 MoE weights for the Triton kernels, and its exact inverse.

The canonical format (:class:`sm120lab.nvfp4.NVFP4Tensor`) stores codes as bytes, scales either
linear ``[E, N, K/16]`` or in the 128x4 swizzled layout, and a global scale per expert. The
kernels want, per expert ``e`` and output row ``n``:

- ``words[e, n, w]`` (int32): the 8 E2M1 codes of elements ``8w .. 8w+7``, element ``8w+j`` in
  bits ``4j .. 4j+3`` (the canonical little-endian byte order, read 32 bits at a time). One
  register holds one dequantization unit (8 codes, half a scale block); one 16-byte load holds 4
  words = 32 codes = exactly two scale blocks, so a thread's loads are contiguous along K and a
  warp's loads are contiguous along the row. Because the bytes are the canonical ones, the MMA
  kernel (:mod:`.moe_gemm`) reads the same buffer as ``uint8 [E, N, K/2]``: no second copy.
- ``scales[e, n, b]`` (uint8 E4M3 bits): linear, row-major (the swizzle is undone once here, not
  on every call).
- ``alpha[e] = 2**6 / gs_e`` (fp32): the decode kernel's outputs are ``sum e2m1 * 2**-6 * SF * a``
  (E2M1 codes are turned into E4M3 patterns of ``e2m1 * 2**-6``, see :mod:`.moe_decode`), so the
  power of two and the global scale become one multiply per output.

``unpack_nvfp4(pack_nvfp4(w))`` returns a tensor equal to ``w`` byte for byte: the same codes,
the same scale bytes in the same layout (swizzle padding included), the same global-scale tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..nvfp4 import NVFP4Tensor
from ..nvfp4.swizzle import swizzle_scales_128x4

#: codes per int32 word
CODES_PER_WORD = 8
#: E2M1 codes decode to E4M3 patterns of e2m1 * 2**-6 (the decode kernel), so alpha = 2**6 / gs
DECODE_SHIFT = 64.0


@dataclass(frozen=True)
class PackedNVFP4:
    """One expert-stacked NVFP4 weight [E, N, K] in the kernels' layout (module docstring).

    Args:
        words: int32 [E, N, K/8], contiguous.
        scales: uint8 [E, N, K/16], contiguous (E4M3 bits, linear).
        alpha: fp32 [E], ``2**6 / global_scale``.
        global_scale: the canonical tensor's global scale, kept as given (exact inverse).
        shape: (E, N, K).
        scale_layout: the canonical tensor's scale layout ("linear" or "swizzled").
        swizzle_pad: for "swizzled", the padded (rows, cols) of the swizzled scales; else None.
    """

    words: torch.Tensor
    scales: torch.Tensor
    alpha: torch.Tensor
    global_scale: torch.Tensor
    shape: tuple[int, int, int]
    scale_layout: str
    swizzle_pad: tuple[int, int] | None = None

    @property
    def codes_u8(self) -> torch.Tensor:
        """The codes as canonical bytes uint8 [E, N, K/2] (a view of ``words``)."""
        e, n, k = self.shape
        return self.words.view(torch.uint8).view(e, n, k // 2)

    @property
    def nbytes(self) -> int:
        """Bytes the kernels read for all experts (codes + scales)."""
        return self.words.numel() * 4 + self.scales.numel()


@dataclass(frozen=True)
class PackedMoEWeights:
    """Both projections of an MoE layer, prepared once (:func:`prepare_moe_weights`).

    Args:
        w13: gate/up weights [E, 2I, H] (rows [0:I] gate, [I:2I] up).
        w2: down weights [E, H, I].
    """

    w13: PackedNVFP4
    w2: PackedNVFP4

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def hidden(self) -> int:
        return self.w13.shape[2]

    @property
    def intermediate(self) -> int:
        return self.w13.shape[1] // 2


def pack_nvfp4(w: NVFP4Tensor, name: str = "w") -> PackedNVFP4:
    """Canonical NVFP4 [E, N, K] -> :class:`PackedNVFP4` (module docstring).

    Args:
        w: NVFP4Tensor of 3 dims, K a multiple of 32, linear or swizzled scales, global scale with
            1 or E values.
        name: argument name used in error messages.

    Returns:
        The packed weight (new contiguous tensors; ``w`` is not modified).
    """
    if not isinstance(w, NVFP4Tensor):
        raise TypeError(f"{name}: expected an NVFP4Tensor, got {type(w).__name__}")
    if len(w.shape) != 3:
        raise ValueError(f"{name}: expected shape [E, N, K], got {tuple(w.shape)}")
    e, n, k = (int(x) for x in w.shape)
    if k % 32:
        raise ValueError(f"{name}: K must be a multiple of 32 (two scale blocks per 16-byte load), got {k}")
    if w.data.dtype != torch.uint8 or tuple(w.data.shape) != (e, n, k // 2):
        raise ValueError(f"{name}.data: expected uint8 [{e}, {n}, {k // 2}], got {w.data.dtype} {tuple(w.data.shape)}")
    gs = w.global_scale
    if not isinstance(gs, torch.Tensor):
        gs = torch.tensor(float(gs), dtype=torch.float32)
    gsf = gs.to(device=w.data.device, dtype=torch.float32).reshape(-1)
    if gsf.numel() == 1:
        gsf = gsf.expand(e)
    elif gsf.numel() != e:
        raise ValueError(f"{name}.global_scale: expected 1 or E={e} values, got shape {tuple(gs.shape)}")
    words = w.data.contiguous().view(torch.int32).view(e, n, k // 8)
    lin = w.linear_scale().reshape(e, n, k // 16)
    scales = lin.contiguous().view(torch.uint8)
    pad = None
    if w.scale_layout == "swizzled":
        pad = tuple(int(x) for x in w.scale.shape[-2:])
        if not torch.equal(swizzle_scales_128x4(lin).view(torch.uint8), w.scale.view(torch.uint8)):
            raise ValueError(f"{name}.scale: the swizzled layout's padding must be zero (sm120lab.nvfp4 writes zeros)")
    alpha = (DECODE_SHIFT / gsf).contiguous()
    return PackedNVFP4(words=words, scales=scales, alpha=alpha, global_scale=w.global_scale,
                       shape=(e, n, k), scale_layout=w.scale_layout, swizzle_pad=pad)


def unpack_nvfp4(p: PackedNVFP4) -> NVFP4Tensor:
    """Exact inverse of :func:`pack_nvfp4`: the canonical tensor, byte for byte."""
    e, n, k = p.shape
    data = p.codes_u8.clone()
    lin = p.scales.view(torch.float8_e4m3fn)
    if p.scale_layout == "swizzled":
        scale = swizzle_scales_128x4(lin)
        if p.swizzle_pad is not None and tuple(scale.shape[-2:]) != p.swizzle_pad:
            raise ValueError(f"swizzled scales re-pad to {tuple(scale.shape[-2:])}, recorded {p.swizzle_pad}")
    else:
        scale = lin.clone()
    return NVFP4Tensor(data=data, scale=scale, global_scale=p.global_scale, shape=torch.Size((e, n, k)),
                       scale_layout=p.scale_layout)


def prepare_moe_weights(w13: NVFP4Tensor, w2: NVFP4Tensor) -> PackedMoEWeights:
    """Prepare an MoE layer's NVFP4 weights once for :func:`sm120lab.kernels.moe_layer.fused_moe_packed`.

    Args:
        w13: [E, 2I, H] (gate rows then up rows), any scale layout.
        w2: [E, H, I].

    Returns:
        :class:`PackedMoEWeights`; :func:`unpack_moe_weights` gives back the inputs exactly.
    """
    p13 = pack_nvfp4(w13, "w13")
    p2 = pack_nvfp4(w2, "w2")
    e, n13, h = p13.shape
    if n13 % 2:
        raise ValueError(f"w13: expected [E, 2I, H] with an even row count, got {p13.shape}")
    if p2.shape != (e, h, n13 // 2):
        raise ValueError(f"w2: expected [E={e}, H={h}, I={n13 // 2}], got {p2.shape}")
    return PackedMoEWeights(w13=p13, w2=p2)


def unpack_moe_weights(p: PackedMoEWeights) -> tuple[NVFP4Tensor, NVFP4Tensor]:
    """Exact inverse of :func:`prepare_moe_weights`: (w13, w2)."""
    return unpack_nvfp4(p.w13), unpack_nvfp4(p.w2)
