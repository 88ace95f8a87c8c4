"""Token -> expert grouping, the way grouped-GEMM MoE kernels do it, and a grouped forward.

The k routed slots of every token are flattened (slot s = t*k + j), stably sorted by expert, and
the sorted rows are cut into E contiguous groups by cumulative ``offsets`` (int32 group END
indices, ``offsets[e] = sum_{e' <= e} count[e']``: the convention of ``torch._grouped_mm``'s
``offs``). Each group runs two GEMMs, and results are scattered back with the routing weights.
The planted faults of :mod:`sm120lab.moe.faults` break exactly one step of this chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["Grouping", "group_by_expert", "grouped_moe_forward"]


@dataclass(frozen=True)
class Grouping:
    order: torch.Tensor    # int64 [T*k], slot indices sorted by expert
    tokens: torch.Tensor   # int64 [T*k], token of each sorted row (order // k)
    counts: torch.Tensor   # int64 [E], rows per expert
    offsets: torch.Tensor  # int32 [E], cumulative group ends

    def bounds(self, offsets: torch.Tensor | None = None) -> list[tuple[int, int, int]]:
        """[(expert, start, end)] for the non-empty groups under ``offsets`` (default: the true ones)."""
        ends = (self.offsets if offsets is None else offsets).tolist()
        out, start = [], 0
        for e, end in enumerate(ends):
            if end > start:
                out.append((e, start, end))
            start = max(start, end)
        return out


def group_by_expert(topk_ids: torch.Tensor, num_experts: int) -> Grouping:
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    return Grouping(order=order, tokens=order // topk_ids.shape[1], counts=counts, offsets=offsets)


def grouped_moe_forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int,
                        w13_of: Callable[[int], torch.Tensor], w2_of: Callable[[int], torch.Tensor], *,
                        act_quant: Callable[[torch.Tensor], torch.Tensor] | None = None,
                        offsets: torch.Tensor | None = None,
                        group_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Grouped MoE forward in ``x.dtype``: ``x`` [T,H] (already activation-quantized if wanted).

    ``w13_of(e)`` -> [2I, H], ``w2_of(e)`` -> [H, I] (dequantized, in ``x.dtype``);
    ``act_quant`` maps the SiLU*up intermediate before the second GEMM (e.g. bf16 + NVFP4);
    ``offsets`` overrides the group ends; ``group_hook(e, y)`` may alter a group's output rows.
    Returns the fp output [T, H] = sum over slots of weight * expert output.
    """
    g = group_by_expert(topk_ids, num_experts)
    rows = x[g.tokens]
    ys = torch.zeros(rows.shape[0], x.shape[1], dtype=x.dtype, device=x.device)
    for e, start, end in g.bounds(offsets):
        w13 = w13_of(e)
        inter = w13.shape[0] // 2
        g_u = rows[start:end] @ w13.T
        act = torch.nn.functional.silu(g_u[:, :inter]) * g_u[:, inter:]
        if act_quant is not None:
            act = act_quant(act)
        y = act @ w2_of(e).T
        ys[start:end] = group_hook(e, y) if group_hook is not None else y
    w_sorted = topk_weights.reshape(-1)[g.order].to(x.dtype)
    out = torch.zeros_like(x)
    out.index_add_(0, g.tokens, ys * w_sorted.unsqueeze(1))
    return out
