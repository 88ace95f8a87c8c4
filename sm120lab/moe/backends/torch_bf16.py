"""``torch-bf16``: dequantized bf16 weights, bf16 activations, through ``torch._grouped_mm``.

Rows are sorted by expert and cut by int32 cumulative group ends (``offs``); ``mat_b`` is the
[E, K, N] transposed view of the [E, N, K] weights (K contiguous), which the CUDA kernel accepts
(ATen ``GroupedMMUtils.h``: either stride order, 16-byte aligned). The SM90/SM100 CUTLASS path runs
where ``torch.cuda.get_device_capability() >= (9, 0)``; elsewhere a per-expert loop of bf16 matmuls
does the same math. The intermediate SiLU(gate)*up is computed in fp32 from the bf16 GEMM output
and rounded to bf16; outputs are combined in fp32 and returned in bf16.
"""

from __future__ import annotations

import torch

from .base import Backend, BackendInfo, Numerics

_CACHE: dict = {}


def dequantized_bf16(q) -> torch.Tensor:
    """All experts of an NVFP4Tensor [E, N, K] dequantized to bf16 (a two-entry cache)."""
    from sm120lab.moe.reference import dequantize_expert

    hit = _CACHE.get(id(q))
    if hit is not None and hit[0] is q:  # the cache holds q, so its id cannot be reused meanwhile
        return hit[1]
    if len(_CACHE) >= 2:
        _CACHE.clear()
    e = q.shape[0]
    out = torch.empty(tuple(q.shape), dtype=torch.bfloat16, device=q.data.device)
    for s in range(e):
        out[s] = dequantize_expert(q, s, torch.float32).to(torch.bfloat16)
    _CACHE[id(q)] = (q, out)
    return out


def _use_grouped_mm(device: torch.device) -> bool:
    return (device.type == "cuda" and hasattr(torch, "_grouped_mm")
            and torch.cuda.get_device_capability(device) >= (9, 0))


class TorchBF16(Backend):
    info = BackendInfo("torch-bf16", "bf16 dequantized weights; torch._grouped_mm on SM90+, per-expert loop otherwise",
                       Numerics.W4A16)

    def run(self, problem, out):
        from sm120lab.moe.grouping import group_by_expert

        cfg = problem.config
        w13 = dequantized_bf16(problem.w13)   # [E, 2I, H]
        w2 = dequantized_bf16(problem.w2)     # [E, H, I]
        g = group_by_expert(problem.topk_ids, cfg.E)
        xs = problem.hidden.to(torch.bfloat16)[g.tokens].contiguous()
        grouped = _use_grouped_mm(xs.device)
        if grouped:
            h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=g.offsets)
        else:
            h = torch.empty(xs.shape[0], 2 * cfg.I, dtype=torch.bfloat16, device=xs.device)
            for e, s, t in g.bounds():
                h[s:t] = xs[s:t] @ w13[e].T
        hf = h.float()
        act = (torch.nn.functional.silu(hf[:, :cfg.I]) * hf[:, cfg.I:]).to(torch.bfloat16).contiguous()
        if grouped:
            y = torch._grouped_mm(act, w2.transpose(1, 2), offs=g.offsets)
        else:
            y = torch.empty(xs.shape[0], cfg.H, dtype=torch.bfloat16, device=xs.device)
            for e, s, t in g.bounds():
                y[s:t] = act[s:t] @ w2[e].T
        w = problem.topk_weights.reshape(-1)[g.order].float().unsqueeze(1)
        acc = torch.zeros(problem.tokens, cfg.H, dtype=torch.float32, device=xs.device)
        acc.index_add_(0, g.tokens, y.float() * w)
        out.copy_(acc.to(torch.bfloat16))
        return {"path": "torch._grouped_mm" if grouped else "per-expert loop"}


BACKEND = TorchBF16()
