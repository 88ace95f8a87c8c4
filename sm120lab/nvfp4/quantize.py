"""NVFP4: E2M1 elements in 16-element blocks along the last dimension, one FP8 E4M3 scale per
block, one FP32 global (per-tensor) scale.

Encode (global scale ``gs``, the quantize-side convention of TRT-LLM/FlashInfer/vLLM):

    gs      = 448 * 6 / amax(|x|)                       (or given; per tensor or per expert)
    SF_b    = e4m3_rn_satfinite(gs * (amax_b * fp32(1/6)))   per 16-element block b
    s_b     = 1 / (float(SF_b) * fp32(1/gs))  if SF_b != 0 else 0
    q_i     = e2m1_rn_satfinite(x_i * s_b)

Decode: ``x_i ~= e2m1(q_i) * float(SF_b) / gs``. All arithmetic is fp32 in this order, which is
the order of TRT-LLM's ``cvt_warp_fp16_to_fp4`` (with exact instead of approximate reciprocals),
so this is the bit-exact reference a hardware quantizer is diffed against. Sources: NVIDIA
TensorRT Model Optimizer NVFP4 recipe; PTX ISA ``cvt`` (.e2m1x2, .e4m3x2, .satfinite).

Block scales are FP8 E4M3 (``float8_e4m3fn``): 1 sign, 4 exponent (bias 7), 3 mantissa bits,
max finite 448, no Inf (OCP 8-bit Floating Point Specification (OFP8) rev 1.0). They are
non-negative; conversion is round-to-nearest-even with saturation to 448
(``cvt.rn.satfinite.e4m3x2.f32``), which torch's cast gives after a clamp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from sm120lab.enums import StrEnum

from ._validate import (
    check_block_divisible,
    check_dtype,
    check_finite,
    check_float_tensor,
    check_fp32_range,
    check_out_dtype,
    check_same_device,
    check_shape,
)
from .e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from .swizzle import swizzle_scales_128x4, unswizzle_scales_128x4

NVFP4_BLOCK = 16
E4M3_MAX = 448.0


class ScaleLayout(StrEnum):
    """Where an NVFP4 tensor's block scales sit (a str-Enum: equal to its value, e.g. ``"linear"``)."""

    LINEAR = "linear"      # [..., K/16], row-major
    SWIZZLED = "swizzled"  # the 128x4 tiled layout the tensor cores read (:mod:`.swizzle`)


class Numerics(StrEnum):
    """What a backend computes, which decides the output it is compared with (a str-Enum)."""

    EXACT = "exact"    # the unquantized reference itself
    W4A16 = "w4a16"    # NVFP4 weights, 16-bit activations
    W4A4 = "w4a4"      # NVFP4 weights and NVFP4-quantized activations


SCALE_LAYOUTS = tuple(v.value for v in ScaleLayout)


def e4m3_round_satfinite(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, RNE, |x| > 448 saturating to +-448 (NaN stays NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


@dataclass(frozen=True)
class NVFP4Tensor:
    """A quantized tensor.

    data:          uint8 [..., K/2], two E2M1 codes per byte (element 2i in the low nibble)
    scale:         float8_e4m3fn, [..., K/16] ("linear") or [..., M', K'/16] padded ("swizzled",
                   the 128x4 layout over the last two dims; 1-D inputs count as one row)
    global_scale:  float32, the encode-side ``gs`` (scalar, or broadcastable to ``shape[:-1]``)
    shape:         the original shape
    """

    data: torch.Tensor
    scale: torch.Tensor
    global_scale: torch.Tensor
    shape: torch.Size
    scale_layout: ScaleLayout = ScaleLayout.LINEAR
    block_size: int = NVFP4_BLOCK

    def linear_scale(self) -> torch.Tensor:
        """Block scales as [..., K/16] whatever the stored layout."""
        if self.scale_layout == "linear":
            return self.scale
        rows = self.shape[-2] if len(self.shape) >= 2 else 1
        lin = unswizzle_scales_128x4(self.scale, rows, self.shape[-1] // self.block_size)
        return lin.reshape(*self.shape[:-1], self.shape[-1] // self.block_size)

    def swizzled_scale(self) -> torch.Tensor:
        """Block scales in the 128x4 layout [..., M', K'/16]."""
        if self.scale_layout == "swizzled":
            return self.scale
        lin = self.scale if len(self.shape) >= 2 else self.scale.reshape(1, -1)
        return swizzle_scales_128x4(lin)

    def with_layout(self, scale_layout: str) -> NVFP4Tensor:
        """The same tensor with its scales in the other layout."""
        scale_layout = _check_layout(scale_layout)
        if scale_layout == self.scale_layout:
            return self
        scale = self.linear_scale() if scale_layout == "linear" else self.swizzled_scale()
        return replace(self, scale=scale, scale_layout=scale_layout)

    def codes(self) -> torch.Tensor:
        """The E2M1 codes, unpacked: uint8 [..., K]."""
        return unpack_e2m1(self.data)


def _check_layout(scale_layout: object) -> ScaleLayout:
    try:
        return ScaleLayout(scale_layout)
    except ValueError:
        raise ValueError(f"scale_layout must be one of {SCALE_LAYOUTS}, got {scale_layout!r}") from None


def default_global_scale(x: torch.Tensor) -> torch.Tensor:
    """``gs = 448 * 6 / amax(|x|)`` over the finite values (fp32 scalar); 1.0 for an all-zero tensor.

    For amax below ~7.9e-36 the quotient overflows fp32; gs is then clamped to the largest finite
    fp32 value (such tensors quantize to zero scales and zero codes, never to NaN)."""
    xf = x.float()
    finite = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros((), device=xf.device))
    amax = finite.max() if finite.numel() else torch.zeros((), device=xf.device)
    one = torch.ones((), dtype=torch.float32, device=xf.device)
    gs = torch.where(amax > 0, (E4M3_MAX * E2M1_MAX) / torch.where(amax > 0, amax, one), one).float()
    return gs.clamp(max=torch.finfo(torch.float32).max)


def _prepare_global_scale(global_scale, x: torch.Tensor) -> torch.Tensor:
    if global_scale is None:
        return default_global_scale(x)
    if isinstance(global_scale, (int, float)):
        global_scale = torch.tensor(float(global_scale), dtype=torch.float32, device=x.device)
    if not isinstance(global_scale, torch.Tensor) or not global_scale.is_floating_point():
        raise TypeError(f"global_scale must be a float or a floating torch.Tensor, got {type(global_scale).__name__}")
    check_same_device("global_scale", global_scale, x, "x")
    return _check_global_scale(global_scale, x.shape[:-1])


def _check_global_scale(gs: torch.Tensor, lead: tuple) -> torch.Tensor:
    """fp32 ``gs``, checked: finite, > 0, broadcastable to the leading dims ``lead``."""
    gs = gs.float()
    if not bool(torch.isfinite(gs).all()) or not bool((gs > 0).all()):
        raise ValueError("global_scale must be finite and > 0 (the encode-side gs = 448*6/amax)")
    try:
        torch.broadcast_shapes(gs.shape, lead)
    except RuntimeError as exc:
        raise ValueError(f"global_scale shape {tuple(gs.shape)} does not broadcast to x.shape[:-1] = {tuple(lead)}") from exc
    if gs.dim() > len(lead):
        raise ValueError(f"global_scale has more dims ({gs.dim()}) than x.shape[:-1] ({len(lead)})")
    return gs


def _gs_for_blocks(gs: torch.Tensor, nlead: int) -> torch.Tensor:
    """Reshape gs (broadcastable to lead dims) to broadcast against [..., nb]."""
    gs = gs.reshape((1,) * (nlead - gs.dim()) + tuple(gs.shape)) if gs.dim() < nlead else gs
    return gs.unsqueeze(-1)


def quantize_nvfp4(x: torch.Tensor, global_scale=None, *, scale_layout: str = "linear",
                   allow_nonfinite: bool = False) -> NVFP4Tensor:
    """Quantize ``x`` [..., K] (K a multiple of 16) to NVFP4 along the last dimension.

    ``global_scale``: the encode-side gs (``448*6/amax``) as a float or fp32 tensor that broadcasts
    to ``x.shape[:-1]`` (e.g. ``[E, 1]`` for per-expert scales of ``[E, N, K]`` weights); default
    computed from ``x``. ``scale_layout``: ``"linear"`` [..., K/16] or ``"swizzled"`` (128x4).
    Raises ``TypeError`` for a non-float tensor or a device mismatch, ``ValueError`` for NaN/Inf
    (unless ``allow_nonfinite``) or a K that is not a multiple of 16. ``x`` is never modified.
    """
    check_float_tensor("x", x)
    _check_layout(scale_layout)
    check_block_divisible("x", x, NVFP4_BLOCK, "NVFP4")
    if not allow_nonfinite:
        check_finite("x", x)
    check_fp32_range("x", x)
    gs = _prepare_global_scale(global_scale, x)

    shape = x.shape
    lead, k = tuple(shape[:-1]), shape[-1]
    nb = k // NVFP4_BLOCK
    xf = x.to(torch.float32)  # a copy for non-fp32 input; never written in place below
    blocks = xf.reshape(*lead, nb, NVFP4_BLOCK)
    finite_abs = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros((), device=x.device))
    block_amax = finite_abs.amax(dim=-1)  # [..., nb]

    gs_b = _gs_for_blocks(gs, len(lead))
    inv6 = torch.tensor(1.0 / 6.0, dtype=torch.float32, device=x.device)
    sf = e4m3_round_satfinite(gs_b * (block_amax * inv6))  # [..., nb] float8_e4m3fn
    sf_f = sf.to(torch.float32)
    inv_gs = torch.reciprocal(gs_b)
    denom = sf_f * inv_gs
    out_scale = torch.where(sf_f != 0, torch.reciprocal(torch.where(sf_f != 0, denom, torch.ones_like(denom))),
                            torch.zeros_like(denom))
    scaled = blocks * out_scale.unsqueeze(-1)
    # Tensors with amax below ~1e-35 make 1/(SF/gs) overflow fp32 (x*inf would turn zeros into NaN):
    # there, evaluate x*gs/SF in fp64 instead. Never taken for ordinary data.
    overflow = ~torch.isfinite(out_scale)
    if bool(overflow.any()):
        exact = (blocks.double() * gs_b.double().unsqueeze(-1) / sf_f.double().unsqueeze(-1)).float()
        scaled = torch.where(overflow.unsqueeze(-1), exact, scaled)
    # x * 0 keeps the sign of x (and NaN/Inf times 0 is NaN): emulate the kernel's
    # "scale 0 -> code +-0" explicitly so zero-scale blocks give signed zero codes.
    scaled = torch.where(out_scale.unsqueeze(-1) == 0, torch.copysign(torch.zeros_like(blocks), blocks), scaled)
    codes = e2m1_encode(scaled).reshape(*lead, k)
    data = pack_e2m1(codes)

    q = NVFP4Tensor(data=data, scale=sf, global_scale=gs, shape=shape, scale_layout=ScaleLayout.LINEAR)
    return q.with_layout(scale_layout)


def dequantize_nvfp4(q: NVFP4Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """NVFP4 -> ``e2m1(q) * SF / gs`` in ``dtype`` (fp32 default; fp64 gives the exact value).

    ``e2m1 * SF`` is exact in fp32 (at most 6 significant bits), so the fp32 result is the
    correctly rounded quotient by ``gs``.
    """
    if not isinstance(q, NVFP4Tensor):
        raise TypeError(f"q must be an NVFP4Tensor, got {type(q).__name__}")
    check_out_dtype(dtype, (torch.float32, torch.float64))
    _check_layout(q.scale_layout)
    check_dtype("q.data", q.data, (torch.uint8,), "uint8 (two packed E2M1 codes per byte)")
    check_dtype("q.scale", q.scale, (torch.float8_e4m3fn,), "float8_e4m3fn (E4M3 block scales)")
    check_dtype("q.global_scale", q.global_scale, (torch.float32, torch.float64), "floating (fp32 encode-side gs)")
    if q.block_size != NVFP4_BLOCK or len(q.shape) == 0 or q.shape[-1] % NVFP4_BLOCK:
        raise ValueError(f"q: block_size {q.block_size} and shape {tuple(q.shape)} are not NVFP4 "
                         f"(block {NVFP4_BLOCK}, last dimension a multiple of it)")
    lead, k = tuple(q.shape[:-1]), q.shape[-1]
    nb = k // q.block_size
    check_shape("q.data", q.data, (*lead, k // 2), "two codes per byte along the last dimension")
    if q.scale_layout == ScaleLayout.LINEAR:
        check_shape("q.scale", q.scale, (*lead, nb), f"one scale per {NVFP4_BLOCK} elements")
    _check_global_scale(q.global_scale, lead)
    vals = e2m1_decode(unpack_e2m1(q.data), dtype=dtype).reshape(*lead, nb, q.block_size)
    sf = q.linear_scale().reshape(*lead, nb).to(dtype)
    gs_b = _gs_for_blocks(q.global_scale.to(dtype), len(lead))
    out = (vals * sf.unsqueeze(-1)) / gs_b.unsqueeze(-1)
    return out.reshape(q.shape)
