"""Token -> expert grouping, and THE MoE forward every reference-style computation is built on.

The k routed slots of every token are flattened (slot s = t*k + j), stably sorted by expert, and
the sorted rows are cut into E contiguous groups by cumulative ``offsets`` (int32 group END
indices, ``offsets[e] = sum_{e' <= e} count[e']``: the convention of ``torch._grouped_mm``'s
``offs``). Each group runs two GEMMs, and results are scattered back with the routing weights:

    y_s   = W2[e_s] @ q(SiLU(G[e_s] x_{t_s}) * (U[e_s] x_{t_s}))      (q: optional activation quantizer)
    out_t = sum_{s of token t} w_s * y_s

:func:`grouped_moe_forward` is the one implementation of that loop. The exact reference
(:mod:`.reference`), the unquantized-weight forward of the envelope (:mod:`.envelope`), the
activation calibration (:mod:`.problem`), the ``emulated-w4a4`` backend and the planted faults of
:mod:`.faults` (each breaking exactly one step of this chain) all call it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Grouping", "group_by_expert", "grouped_moe_forward", "ieee_fp32_matmul"]


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


@contextlib.contextmanager
def ieee_fp32_matmul():
    """Run fp32 matmuls in IEEE fp32 (TF32 off) for the duration; the previous setting is restored."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def grouped_moe_forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None,
                        num_experts: int, w13_of: Callable[[int], torch.Tensor],
                        w2_of: Callable[[int], torch.Tensor], *,
                        act_quant: Callable[[torch.Tensor], torch.Tensor] | None = None,
                        in_quant: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                        mid_quant: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                        offsets: torch.Tensor | None = None,
                        group_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                        per_slot: bool = False) -> torch.Tensor:
    """``out_t = sum_j w_{t,j} W2[e] @ q(SiLU(G[e] x_t) * U[e] x_t)`` in ``x.dtype`` (module docstring).

    Experts run one group at a time (only routed experts: weights are fetched per expert, so the
    largest presets fit); fp32 matmuls run with TF32 off.

    Args:
        x: [T, H] activations in the compute dtype (already activation-quantized if wanted).
        topk_ids: int [T, k] routed experts; topk_weights: float [T, k] (unused if ``per_slot``).
        num_experts: E.
        w13_of: ``e -> [2I, H]`` gate (rows 0:I) over up (rows I:2I), in ``x.dtype``.
        w2_of: ``e -> [H, I]`` in ``x.dtype``.
        act_quant: maps the SiLU*up intermediate [n, I] before the second GEMM (e.g. bf16 + NVFP4);
            also the place to observe it (calibration).
        in_quant: ``(e, rows) -> rows'`` maps expert e's input rows [n, H] before the first GEMM
            (per-expert activation quantizers); mid_quant: the same for the intermediate, after
            ``act_quant``.
        offsets: overrides the int32 group ends (planted faults).
        group_hook: ``(e, y) -> y'`` may alter a group's output rows (planted faults).
        per_slot: return the unweighted expert outputs per routed slot instead of their sum.

    Returns:
        [T, H] (weights applied, summed per token in sorted-row order with ``index_add_``), or with
        ``per_slot`` [T, k, H] where ``[t, j]`` is expert ``topk_ids[t, j]``'s output for token t.
    """
    g = group_by_expert(topk_ids, num_experts)
    rows = x[g.tokens]
    ys = torch.zeros(rows.shape[0], x.shape[1], dtype=x.dtype, device=x.device)
    with ieee_fp32_matmul():
        for e, start, end in g.bounds(offsets):
            w13 = w13_of(e)
            inter = w13.shape[0] // 2
            x_e = rows[start:end] if in_quant is None else in_quant(e, rows[start:end])
            g_u = x_e @ w13.T
            act = torch.nn.functional.silu(g_u[:, :inter]) * g_u[:, inter:]
            if act_quant is not None:
                act = act_quant(act)
            if mid_quant is not None:
                act = mid_quant(e, act)
            y = act @ w2_of(e).T
            ys[start:end] = group_hook(e, y) if group_hook is not None else y
    if per_slot:
        slots = torch.empty_like(ys)
        slots[g.order] = ys
        return slots.reshape(topk_ids.shape[0], topk_ids.shape[1], x.shape[1])
    w_sorted = topk_weights.reshape(-1)[g.order].to(x.dtype)
    out = torch.zeros_like(x)
    out.index_add_(0, g.tokens, ys * w_sorted.unsqueeze(1))
    return out
