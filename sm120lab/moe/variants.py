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

Like the planted faults they are not in the default registry. The fourth case of the false-alarm
tests, mostly-empty routings, is a problem family (sparse routing at T = 1..3), not a backend.
"""

from __future__ import annotations

import torch

from .backends.base import Backend, Needs
from .grouping import grouped_moe_forward
from .reference import dequantize_expert

__all__ = ["VARIANTS", "Variant", "all_variants"]


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
        from sm120lab.bench.moe_problem import fp8_rowwise

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


VARIANTS: tuple[type[Variant], ...] = (BF16Accumulate, ReversedExpertOrder, FP8RowwiseWeights, BF16Weights)


def all_variants() -> list[Variant]:
    return [cls() for cls in VARIANTS]
