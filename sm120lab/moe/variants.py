"""Correct-but-different backends: what the harness must NOT call garbage.

Each computes the same MoE layer as the reference with one legitimate difference a real kernel may
have, so a verdict of ``garbage`` on any of them is a false alarm (the false-alarm sweep,
:mod:`.sweep`, and the tests hold the harness to zero):

- ``variant-bf16-accumulate``: bf16 activations and weights, bf16 GEMM outputs, the k expert
  outputs summed in bf16 (no fp32 accumulator anywhere between the GEMMs);
- ``variant-reversed-expert-order``: experts processed in reverse id order (fp32), so every
  sum runs in another order;
- ``variant-fp8-rowwise-weights``: the unquantized weights in FP8 E4M3 with one fp32 scale per
  output row (a *more precise* format than NVFP4): it deviates from the NVFP4 reference by NVFP4's
  own weight error, which the envelope measures per cell;
- ``variant-bf16-weights``: the unquantized bf16 weights themselves (fp32 math).
- legitimate NVFP4 *weight quantizer* variants (a checkpoint made by another quantizer): the bf16
  weights re-quantized with E4M3 block scales rounded up (``variant-weight-scale-up``) or down
  (``variant-weight-scale-down``), or with one global scale for all experts
  (``variant-weight-nearest-per-tensor``) or each expert's rounded down to a power of two
  (``variant-weight-nearest-pow2``): the members of the envelope's weight-format family (judged by the nearest
  member, so in the family by construction), held to 0 garbage; two quantizers in no member
  (``WEIGHT_OUT_OF_FAMILY``: two choices changed at once) are swept and recorded beside, not held to it.

- legitimate NVFP4 *activation quantizer* variants (W4A4 backends, judged against
  ``emulated-w4a4``, which rounds block scales to nearest with the layer's static amax global
  scales): ``variant-act-scale-up`` / ``variant-act-scale-down`` (E4M3 block scales rounded up /
  down instead of to nearest: libraries differ here), ``variant-act-gscale-per-expert`` (448*6 /
  amax over each expert's own rows), ``variant-act-gscale-per-token`` (dynamic, 448*6 / amax of
  each row), ``variant-act-gscale-pow2`` (the global scales rounded down to a power of two) and
  ``variant-act-recip-ulp-low`` (the output scale ``1/(SF/gs)`` one fp32 ulp low, as an approximate
  division gives: products that land on an E2M1 rounding tie round down; Triton 3.6's ``tl.fdiv`` did this
  on the H200, ``notes/triton_kernels.md``).
  :class:`ActQuantVariant` takes any combination (the property tests draw them at random).
- ``SATURATING_VARIANTS``: ``variant-act-gscale-percentile`` (static global scales 448*6 / the
  99.99th percentile of |x|: the largest values saturate). Swept and recorded, but judged by the
  envelope: clipping a massive activation is real damage (``notes/correctness.md``).

Like the planted faults they are not in the default registry. The last case of the false-alarm
tests, mostly-empty routings, is a problem family (sparse routing at T = 1..3), not a backend.
"""

from __future__ import annotations

import torch

from sm120lab.enums import StrEnum
from sm120lab.nvfp4 import E2M1_MAX, E4M3_MAX, NVFP4_BLOCK, e2m1_decode, e2m1_encode, e4m3_round_satfinite

from .backends.base import Backend, Needs
from .grouping import grouped_moe_forward
from .problem import abs_quantile, intermediate_quantile
from .reference import dequantize_expert

__all__ = ["ACT_FAMILY_VARIANTS", "ACT_OUT_OF_FAMILY", "QUANTIZER_VARIANTS", "WEIGHT_OUT_OF_FAMILY", "SATURATING_VARIANTS", "VARIANTS", "WEIGHT_QUANTIZER_VARIANTS", "ActQuantVariant",
           "GlobalScale", "Reciprocal", "ScaleRounding", "Variant", "WeightGlobalScale", "WeightQuantVariant",
           "requantize_expert", "weight_global_scales",
           "all_variants", "e4m3_round", "fake_quant_nvfp4", "w4a4_forward"]


class Variant(Backend):
    """A correct backend on CPU or GPU with one legitimate numerical difference."""

    needs = Needs()
    out_dtype = torch.float32
    numerics = "w4a16"
    difference = ""

    def _forward(self, problem, w13_of, w2_of, dtype, topk_ids=None):
        return grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids if topk_ids is None else topk_ids,
                                   problem.topk_weights, problem.config.E, w13_of, w2_of)


class BF16Accumulate(Variant):
    name, difference = "variant-bf16-accumulate", "bf16 GEMM outputs and a bf16 sum over the k experts"
    out_dtype = torch.bfloat16

    def run(self, problem, out):
        bf = torch.bfloat16
        out.copy_(self._forward(problem, lambda e: dequantize_expert(problem.w13, e, torch.float32).to(bf),
                                lambda e: dequantize_expert(problem.w2, e, torch.float32).to(bf), bf))
        return {"difference": self.difference}


class ReversedExpertOrder(Variant):
    name, difference = "variant-reversed-expert-order", "experts run in reverse id order (fp32)"

    def run(self, problem, out):
        last = problem.config.E - 1
        f32 = torch.float32
        out.copy_(self._forward(problem, lambda e: dequantize_expert(problem.w13, last - e, f32),
                                lambda e: dequantize_expert(problem.w2, last - e, f32), f32,
                                topk_ids=last - problem.topk_ids))
        return {"difference": self.difference}


def _unquantized(problem, which: str) -> torch.Tensor:
    w = getattr(problem, f"{which}_bf16")
    if w is None:
        raise ValueError(f"this variant needs the unquantized weights (problem.{which}_bf16); "
                         "draw the problem with keep_unquantized=True")
    return w


class FP8RowwiseWeights(Variant):
    name, difference = "variant-fp8-rowwise-weights", "weights in FP8 E4M3 with fp32 per-row scales (fp32 math)"

    def run(self, problem, out):
        from sm120lab.nvfp4.fp8 import fp8_rowwise

        f32 = torch.float32
        (q13, s13), (q2, s2) = fp8_rowwise(_unquantized(problem, "w13")), fp8_rowwise(_unquantized(problem, "w2"))
        out.copy_(self._forward(problem, lambda e: q13[e].to(f32) * s13[e].unsqueeze(1),
                                lambda e: q2[e].to(f32) * s2[e].unsqueeze(1), f32))
        return {"difference": self.difference}


class BF16Weights(Variant):
    name, difference = "variant-bf16-weights", "the unquantized bf16 weights (fp32 math)"

    def run(self, problem, out):
        f32 = torch.float32
        w13, w2 = _unquantized(problem, "w13"), _unquantized(problem, "w2")
        out.copy_(self._forward(problem, lambda e: w13[e].to(f32), lambda e: w2[e].to(f32), f32))
        return {"difference": self.difference}


class ScaleRounding(StrEnum):
    """How an activation quantizer rounds ``gs * amax_b / 6`` to its E4M3 block scale."""

    NEAREST = "nearest"  # RNE (cvt.rn.satfinite): the W4A4 contract, emulated-w4a4
    UP = "up"            # the next E4M3 value up: no element saturates, coarser steps
    DOWN = "down"        # the next E4M3 value down: finer steps, the block maximum may saturate at 6


class GlobalScale(StrEnum):
    """Which fp32 global scale an activation quantizer uses (encode side, ``gs = 448*6/m``)."""

    PER_LAYER = "per-layer"      # m = amax over the layer's calibration data (problem.a1/a2_gscale): the contract
    PERCENTILE = "percentile"    # m = a quantile of |x| over the same data: values above it saturate
    PER_EXPERT = "per-expert"    # m = amax over the expert's own rows (per-expert input scales)
    PER_TOKEN = "per-token"      # m = amax of each row (dynamic quantization)
    POW2 = "pow2"                # gs = the contract's, rounded down to a power of two (nothing saturates)


class Reciprocal(StrEnum):
    """How an activation quantizer forms its output scale ``s = 1 / (SF_b / gs)``, which multiplies ``x``."""

    EXACT = "exact"          # correctly rounded reciprocals (div.rn): the W4A4 contract, emulated-w4a4
    ONE_ULP_LOW = "ulp-low"  # s one fp32 ulp low: an approximate division (div.full.f32 / rcp.approx), e.g. the
    #                          Triton 3.6 lowering of tl.fdiv seen on the H200: x * s lands below E2M1 rounding ties


def e4m3_round(x: torch.Tensor, rounding: ScaleRounding = ScaleRounding.NEAREST) -> torch.Tensor:
    """Non-negative fp32 -> float8_e4m3fn with ``rounding``; values above 448 saturate in every mode."""
    near = e4m3_round_satfinite(x)
    if rounding == ScaleRounding.NEAREST:
        return near
    xf = x.float().clamp(0.0, E4M3_MAX)
    bits = near.view(torch.uint8).to(torch.int16)
    nf = near.float()
    if rounding == ScaleRounding.UP:
        bits = torch.where(nf < xf, bits + 1, bits)
    else:
        bits = torch.where((nf > xf) & (bits > 0), bits - 1, bits)
    return bits.to(torch.uint8).view(torch.float8_e4m3fn)


def fake_quant_nvfp4(x: torch.Tensor, gs: torch.Tensor, *, block: int = NVFP4_BLOCK,
                     rounding: ScaleRounding = ScaleRounding.NEAREST,
                     reciprocal: Reciprocal = Reciprocal.EXACT) -> torch.Tensor:
    """``dequant(quant(x))`` in fp32 with a chosen block size and block-scale rounding.

    ``SF_b = e4m3_round(gs * amax_b / 6)``, ``q = e2m1_rn_satfinite(x / (SF_b / gs))``,
    ``out = e2m1(q) * SF_b / gs`` (the arithmetic order of :func:`sm120lab.nvfp4.quantize_nvfp4`,
    which it reproduces bit for bit with ``block=16, rounding=NEAREST``).

    Args:
        x: [..., K], K a multiple of ``block``. gs: fp32 global scale broadcastable to ``x.shape[:-1] + (1,)``.
        block: elements per block scale (16 for NVFP4; a planted fault uses 32).
        rounding: :class:`ScaleRounding` of the block scales.
        reciprocal: :class:`Reciprocal` of the output scale ``1 / (SF_b / gs)``.

    Returns:
        fp32 tensor of ``x``'s shape.
    """
    xf = x.float()
    lead, k = tuple(xf.shape[:-1]), xf.shape[-1]
    if k % block:
        raise ValueError(f"x: last dimension {k} must be a multiple of the block size {block}")
    blocks = xf.reshape(*lead, k // block, block)
    gs_b = gs.float().to(x.device).expand(*lead, 1) if gs.dim() else gs.float().to(x.device).reshape(1)
    amax = blocks.abs().amax(dim=-1)
    sf = e4m3_round(gs_b * (amax * (1.0 / 6.0)), rounding).float()
    denom = sf * torch.reciprocal(gs_b)
    inv = torch.where(sf != 0, torch.reciprocal(torch.where(sf != 0, denom, torch.ones_like(denom))),
                      torch.zeros_like(denom))
    if reciprocal == Reciprocal.ONE_ULP_LOW:
        inv = torch.nextafter(inv, torch.zeros_like(inv))
    codes = e2m1_encode(blocks * inv.unsqueeze(-1))
    return ((e2m1_decode(codes) * sf.unsqueeze(-1)) / gs_b.unsqueeze(-1)).reshape(xf.shape)


def _gs_of(m: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``448*6 / m`` as fp32 on ``like``'s device (m clamped away from 0)."""
    m = torch.as_tensor(m, dtype=torch.float32, device=like.device)
    return (E4M3_MAX * E2M1_MAX) / m.clamp_min(1e-30)


def w4a4_forward(problem, topk_weights, *, rounding: ScaleRounding = ScaleRounding.NEAREST,
                 gscale: GlobalScale = GlobalScale.PER_LAYER, block: int = NVFP4_BLOCK,
                 quantile: float = 0.9999, reciprocal: Reciprocal = Reciprocal.EXACT,
                 per_slot: bool = False) -> torch.Tensor:
    """The W4A4 MoE forward (fp32 math, NVFP4 weights) with a chosen activation quantizer -> [T, H] fp32
    (``per_slot``: the unweighted expert output of each routed slot, [T, k, H]).

    Hidden states are quantized before the first GEMM, the bf16-rounded SiLU*up intermediate
    before the second (as ``emulated-w4a4``), each with ``fake_quant_nvfp4(block, rounding)`` and
    the global scale ``gscale`` picks (``quantile`` for :attr:`GlobalScale.PERCENTILE`) and the output
    scale's ``reciprocal``.
    """
    f32 = torch.float32
    hidden = problem.hidden.float()
    a1, a2 = problem.a1_gscale, problem.a2_gscale
    if gscale == GlobalScale.PERCENTILE:
        a1 = _gs_of(abs_quantile(hidden, quantile), hidden)
        m2 = intermediate_quantile(problem.hidden, problem.topk_ids, problem.w13, problem.w2,
                                   torch.float64 if hidden.device.type == "cpu" else f32, quantile)
        a2 = _gs_of(m2, hidden)

    def dynamic(rows: torch.Tensor, per_row: bool) -> torch.Tensor:
        amax = rows.abs().amax(dim=-1, keepdim=True) if per_row else rows.abs().amax()
        return fake_quant_nvfp4(rows, _gs_of(amax, rows), block=block, rounding=rounding, reciprocal=reciprocal)

    if gscale == GlobalScale.POW2:
        a1, a2 = (torch.exp2(torch.floor(torch.log2(g.float()))) for g in (a1, a2))

    in_quant = mid_quant = None
    if gscale in (GlobalScale.PER_EXPERT, GlobalScale.PER_TOKEN):
        per_row = gscale == GlobalScale.PER_TOKEN
        x = hidden
        in_quant = lambda e, rows: dynamic(rows, per_row)  # noqa: E731
        mid_quant = lambda e, act: dynamic(act.to(torch.bfloat16).float(), per_row)  # noqa: E731
        act_quant = None
    else:
        x = fake_quant_nvfp4(hidden, a1, block=block, rounding=rounding, reciprocal=reciprocal)
        act_quant = lambda a: fake_quant_nvfp4(a.to(torch.bfloat16), a2, block=block, rounding=rounding,  # noqa: E731
                                               reciprocal=reciprocal)
    return grouped_moe_forward(x, problem.topk_ids, topk_weights, problem.config.E,
                               lambda e: dequantize_expert(problem.w13, e, f32),
                               lambda e: dequantize_expert(problem.w2, e, f32),
                               act_quant=act_quant, in_quant=in_quant, mid_quant=mid_quant, per_slot=per_slot)


class ActQuantVariant(Variant):
    """A W4A4 backend whose activation quantizer makes other legitimate choices than the contract's."""

    numerics = "w4a4"

    def __init__(self, rounding: ScaleRounding = ScaleRounding.NEAREST, gscale: GlobalScale = GlobalScale.PER_LAYER,
                 quantile: float = 0.9999, name: str | None = None, reciprocal: Reciprocal = Reciprocal.EXACT):
        self.rounding, self.gscale, self.quantile = ScaleRounding(rounding), GlobalScale(gscale), float(quantile)
        self.reciprocal = Reciprocal(reciprocal)
        q = f" (q={self.quantile:g})" if self.gscale == GlobalScale.PERCENTILE else ""
        r = "" if self.reciprocal == Reciprocal.EXACT else f", output scales {self.reciprocal}"
        self.difference = f"activation block scales rounded {self.rounding}, {self.gscale} global scales{q}{r}"
        self.name = name or f"variant-act-{self.rounding}-{self.gscale}" + ("" if not r else f"-{self.reciprocal}")

    def forward(self, problem, per_slot: bool = False) -> torch.Tensor:
        """:func:`w4a4_forward` with this quantizer: [T, H] fp32, or the per-slot outputs [T, k, H]."""
        return w4a4_forward(problem, None if per_slot else problem.topk_weights, rounding=self.rounding,
                            gscale=self.gscale, quantile=self.quantile, reciprocal=self.reciprocal, per_slot=per_slot)

    def run(self, problem, out):
        out.copy_(self.forward(problem))
        return {"difference": self.difference}


def _quantizer(cls_name: str, name: str, base: type | None = None, **kw) -> type:
    """A named quantizer variant (``base``: :class:`ActQuantVariant` by default) with fixed settings (a class,
    so the sweep can list and build it)."""
    base = base or ActQuantVariant

    def __init__(self):
        base.__init__(self, name=name, **kw)
    return type(cls_name, (base,), {"__init__": __init__, "__module__": __name__,
                                    "__doc__": f"``{name}``: :class:`{base.__name__}` with {kw}."})


ScaleRoundUp = _quantizer("ScaleRoundUp", "variant-act-scale-up", rounding=ScaleRounding.UP)
ScaleRoundDown = _quantizer("ScaleRoundDown", "variant-act-scale-down", rounding=ScaleRounding.DOWN)
PercentileGlobalScale = _quantizer("PercentileGlobalScale", "variant-act-gscale-percentile",
                                   gscale=GlobalScale.PERCENTILE)
PerExpertGlobalScale = _quantizer("PerExpertGlobalScale", "variant-act-gscale-per-expert",
                                  gscale=GlobalScale.PER_EXPERT)
PerTokenGlobalScale = _quantizer("PerTokenGlobalScale", "variant-act-gscale-per-token", gscale=GlobalScale.PER_TOKEN)
Pow2GlobalScale = _quantizer("Pow2GlobalScale", "variant-act-gscale-pow2", gscale=GlobalScale.POW2)
ApproxReciprocal = _quantizer("ApproxReciprocal", "variant-act-recip-ulp-low", reciprocal=Reciprocal.ONE_ULP_LOW)


def requantize_expert(w_bf16: torch.Tensor, gs: torch.Tensor, e: int, rounding: ScaleRounding) -> torch.Tensor:
    """Expert ``e`` of the bf16 weights ``w_bf16`` [E, N, K] re-quantized to NVFP4 with global scale ``gs[e]``
    and E4M3 block scales rounded by ``rounding``, dequantized to fp32 [N, K]."""
    return fake_quant_nvfp4(w_bf16[e], gs.reshape(-1)[e].reshape(1), rounding=rounding)


class WeightGlobalScale(StrEnum):
    """Which fp32 global scale a weight quantizer uses (``gs = 448*6 / m``)."""

    PER_EXPERT = "per-expert"  # m = amax of each expert's tensor: the checkpoint's own (problem.w13.global_scale)
    PER_TENSOR = "per-tensor"  # m = amax over every expert's tensor (one global scale for the layer's experts)
    POW2 = "pow2"              # the per-expert scale rounded down to a power of two (nothing saturates)


def weight_global_scales(checkpoint_gs: torch.Tensor, gscale: WeightGlobalScale) -> torch.Tensor:
    """Per-expert fp32 global scales [E] of a weight quantizer, from the checkpoint's own per-expert ones:
    ``per-expert`` keeps them, ``per-tensor`` takes the smallest (the largest amax of all experts) for every
    expert, ``pow2`` rounds each down to a power of two."""
    gs = checkpoint_gs.float().reshape(-1)
    if gscale == WeightGlobalScale.PER_TENSOR:
        return torch.full_like(gs, float(gs.min()))
    if gscale == WeightGlobalScale.POW2:
        return torch.exp2(torch.floor(torch.log2(gs)))
    return gs


class WeightQuantVariant(Variant):
    """A W4A16 backend whose NVFP4 weights came from another legitimate quantizer than the checkpoint's:
    the bf16 weights re-quantized with other block-scale rounding or another global scale (fp32 math).

    It does not compute the checkpoint's numbers (its codes differ), so it is judged like a backend with
    another weight format: degraded with the reason, never garbage (the weight-format family of
    :func:`sm120lab.moe.envelope.weight_format_family`)."""

    def __init__(self, rounding: ScaleRounding = ScaleRounding.NEAREST,
                 gscale: WeightGlobalScale = WeightGlobalScale.PER_EXPERT, name: str | None = None):
        self.rounding, self.gscale = ScaleRounding(rounding), WeightGlobalScale(gscale)
        self.difference = f"weights re-quantized from bf16: block scales rounded {self.rounding}, {self.gscale} global scales"
        self.name = name or f"variant-weight-{self.rounding}-{self.gscale}"

    def forward(self, problem, dtype: torch.dtype = torch.float32, per_slot: bool = False) -> torch.Tensor:
        """The layer with the re-quantized weights (only the routed experts are re-quantized): [T, H] in
        ``dtype``, or the per-slot outputs [T, k, H]."""
        w13, w2 = _unquantized(problem, "w13"), _unquantized(problem, "w2")
        gs13 = weight_global_scales(problem.w13.global_scale, self.gscale)
        gs2 = weight_global_scales(problem.w2.global_scale, self.gscale)
        return grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, None if per_slot else problem.topk_weights,
                                   problem.config.E,
                                   lambda e: requantize_expert(w13, gs13, e, self.rounding).to(dtype),
                                   lambda e: requantize_expert(w2, gs2, e, self.rounding).to(dtype), per_slot=per_slot)

    def run(self, problem, out):
        out.copy_(self.forward(problem))
        return {"difference": self.difference}


WeightScaleRoundUp = _quantizer("WeightScaleRoundUp", "variant-weight-scale-up", base=WeightQuantVariant,
                                rounding=ScaleRounding.UP)
WeightScaleRoundDown = _quantizer("WeightScaleRoundDown", "variant-weight-scale-down", base=WeightQuantVariant,
                                  rounding=ScaleRounding.DOWN)
WeightPerTensorScale = _quantizer("WeightPerTensorScale", "variant-weight-nearest-per-tensor", base=WeightQuantVariant,
                                  gscale=WeightGlobalScale.PER_TENSOR)
WeightPow2Scale = _quantizer("WeightPow2Scale", "variant-weight-nearest-pow2", base=WeightQuantVariant,
                             gscale=WeightGlobalScale.POW2)
#: legitimate weight-quantizer variants (checkpoints from other quantizers), each a member of the envelope's
#: weight-format family (:func:`sm120lab.moe.envelope.weight_format_family`), held to 0 garbage like the rest
WEIGHT_QUANTIZER_VARIANTS: tuple[type[Variant], ...] = (WeightScaleRoundUp, WeightScaleRoundDown, WeightPerTensorScale,
                                                        WeightPow2Scale)
#: weight quantizers that are in NO family member (two choices changed at once): swept and recorded beside the
#: legitimate set, not held to 0 garbage, because the 16-bit rules judge weights by the NEAREST member of the
#: family (no calibrated radius yet): their measured false-garbage rate is in notes/correctness.md
WEIGHT_OUT_OF_FAMILY: tuple[type[Variant], ...] = (
    _quantizer("WeightUpPerTensor", "variant-weight-up-per-tensor", base=WeightQuantVariant, rounding=ScaleRounding.UP,
               gscale=WeightGlobalScale.PER_TENSOR),
    _quantizer("WeightDownPow2", "variant-weight-down-pow2", base=WeightQuantVariant, rounding=ScaleRounding.DOWN,
               gscale=WeightGlobalScale.POW2))

#: the members of the envelope's activation family (:func:`sm120lab.moe.envelope.activation_family`), each judged by
#: the others (leave-one-out)
ACT_FAMILY_VARIANTS: tuple[type[Variant], ...] = (ScaleRoundUp, ScaleRoundDown, PerExpertGlobalScale,
                                                  PerTokenGlobalScale, Pow2GlobalScale)
#: legitimate activation-quantizer variants (W4A4): the false-alarm sweep holds each to 0 garbage; the approximate
#: reciprocal is in no member of the family
QUANTIZER_VARIANTS: tuple[type[Variant], ...] = (*ACT_FAMILY_VARIANTS, ApproxReciprocal)
#: activation quantizers in no family member (two or three choices changed at once)
ACT_OUT_OF_FAMILY: tuple[type[Variant], ...] = (
    _quantizer("ActUpPerToken", "variant-act-up-per-token", rounding=ScaleRounding.UP, gscale=GlobalScale.PER_TOKEN),
    _quantizer("ActDownPow2", "variant-act-down-pow2", rounding=ScaleRounding.DOWN, gscale=GlobalScale.POW2),
    _quantizer("ActUpPerExpertUlpLow", "variant-act-up-per-expert-ulp-low", rounding=ScaleRounding.UP,
               gscale=GlobalScale.PER_EXPERT, reciprocal=Reciprocal.ONE_ULP_LOW))
VARIANTS: tuple[type[Variant], ...] = (BF16Accumulate, ReversedExpertOrder, FP8RowwiseWeights, BF16Weights,
                                       *WEIGHT_QUANTIZER_VARIANTS, *QUANTIZER_VARIANTS, *ACT_OUT_OF_FAMILY)
#: calibrations that saturate activations (a static percentile scale clips the largest values):
#: swept and recorded, judged by the envelope (a token with a massive activation clipped by 65% is
#: real damage), not held to 0 garbage
SATURATING_VARIANTS: tuple[type[Variant], ...] = (PercentileGlobalScale,)


def all_variants() -> list[Variant]:
    return [cls() for cls in VARIANTS]
