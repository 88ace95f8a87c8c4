"""Weight/scale packing shared by the FlashInfer and vLLM adapters (pure torch, testable on CPU).

Our w13 is [gate; up] (ModelOpt/vLLM order). FlashInfer's CUTLASS fused MoE and its cuTile/SM12x
preparation take "w31" = [up; gate] (FlashInfer 0.6.5 ``tests/moe/test_trtllm_cutlass_fused_moe.py``
``torch_moe_nvfp4``: ``w1_expert, w3_expert = weight[m//2:], weight[:m//2]``; 0.7.4
``fused_moe/prepare.py`` ``prepare_cutile_nvfp4_weights``: ``up, gate = w1_fp4.chunk(2, dim=1)``).
"""

from __future__ import annotations

import torch

from sm120lab.nvfp4 import NVFP4Tensor, swizzle_scales_128x4


def up_gate_order(t: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] in [gate; up] order -> [up; gate] (an involution)."""
    i = t.shape[1] // 2
    return torch.cat((t[:, i:], t[:, :i]), dim=1).contiguous()


def w31(q: NVFP4Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 [E, 2I, H/2], linear E4M3 scales [E, 2I, H/16]) in [up; gate] order."""
    return up_gate_order(q.data), up_gate_order(q.linear_scale())


def swizzled(linear_scale: torch.Tensor) -> torch.Tensor:
    """[E, N, Kb] linear E4M3 scales -> [E, pad128(N), pad4(Kb)] 128x4-swizzled, contiguous."""
    return swizzle_scales_128x4(linear_scale).contiguous()


def per_expert(gs: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Global scale [E, 1] (or scalar) -> fp32 [E]."""
    g = gs.float().reshape(-1)
    return (g.expand(num_experts) if g.numel() == 1 else g).contiguous()
