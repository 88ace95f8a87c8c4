"""``emulated-w4a4``: the numerics a correct native NVFP4 (W4A4) MoE kernel must reproduce.

Per the W4A4 contract (``notes/correctness.md``):
hidden states are quantized to NVFP4 per token row (16-element blocks along H, E4M3 block scales)
with the static global scale ``a1_gscale``; the SiLU(gate)*up intermediate is rounded to bf16 and
quantized with ``a2_gscale``; both GEMMs are exact on the dequantized operands with fp32
accumulation; the k expert outputs are summed in fp32 with the routing weights. Its error against
the reference is the activation-quantization error every W4A4 backend is expected to show.
"""

from __future__ import annotations

import torch

from .base import Backend, BackendInfo, Numerics


def nvfp4_round_trip(x: torch.Tensor, gscale: torch.Tensor) -> torch.Tensor:
    """``dequant(quant(x))`` in fp32: NVFP4 per-row 16-element blocks with global scale ``gscale``."""
    from sm120lab.nvfp4 import dequantize_nvfp4, quantize_nvfp4

    return dequantize_nvfp4(quantize_nvfp4(x, gscale.to(x.device)), dtype=torch.float32)


class EmulatedW4A4(Backend):
    info = BackendInfo("emulated-w4a4", "NVFP4 activations (static a1/a2 global scales) x NVFP4 weights, exact fp32 math",
                       Numerics.W4A4, out_dtype=torch.float32)

    def run(self, problem, out):
        from sm120lab.moe.grouping import grouped_moe_forward
        from sm120lab.moe.reference import dequantize_expert

        x = nvfp4_round_trip(problem.hidden, problem.a1_gscale)
        y = grouped_moe_forward(
            x, problem.topk_ids, problem.topk_weights, problem.config.E,
            lambda e: dequantize_expert(problem.w13, e, torch.float32),
            lambda e: dequantize_expert(problem.w2, e, torch.float32),
            act_quant=lambda a: nvfp4_round_trip(a.to(torch.bfloat16), problem.a2_gscale))
        out.copy_(y)
        return {"a1_gscale": float(problem.a1_gscale), "a2_gscale": float(problem.a2_gscale)}


BACKEND = EmulatedW4A4()
