"""The exact MoE forward every backend is diffed against.

For token t with routed experts e_1..e_k and routing weights w_1..w_k (fp32):

    G_e, U_e = dequant(w13)[e, :I, :], dequant(w13)[e, I:, :]        (gate = w1, up = w3)
    D_e      = dequant(w2)[e]                                         ([H, I])
    y_e(h)   = D_e @ (SiLU(G_e h) * (U_e h)),   SiLU(z) = z * sigmoid(z)
    out[t]   = sum_j w_j * y_{e_j}(h_t)

Dequantization is ``e2m1 * SF / gs`` (``sm120lab.nvfp4.dequantize_nvfp4``), so with
``dtype=float64`` (CPU) every operand is exact and the only rounding is fp64 accumulation; on a
GPU use ``float32`` (TF32 is switched off for the duration). Weights are dequantized one expert at a
time, only for experts that receive tokens, so the qwen3.5-397b preset fits on one GPU.
"""

from __future__ import annotations

import contextlib

import torch

from sm120lab.nvfp4 import NVFP4Tensor, dequantize_nvfp4

__all__ = ["moe_reference", "moe_reference_slots", "dequantize_expert", "check_routing"]


def check_routing(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  num_experts: int | None = None) -> None:
    """Raise naming the argument when hidden/topk_ids/topk_weights do not fit together."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or not hidden.is_floating_point():
        raise ValueError(f"hidden must be a floating tensor [T, H], got {getattr(hidden, 'shape', type(hidden))}")
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError("topk_ids must be an int64/int32 tensor [T, k]")
    if topk_ids.shape[0] != hidden.shape[0]:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} rows but hidden has {hidden.shape[0]} tokens")
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_weights must have the shape of topk_ids {tuple(topk_ids.shape)}")
    if num_experts is not None and topk_ids.numel():
        lo, hi = int(topk_ids.min()), int(topk_ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"topk_ids must lie in [0, {num_experts}), got range [{lo}, {hi}]")


def dequantize_expert(q: NVFP4Tensor, e: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Dequantize expert ``e`` of an expert-stacked NVFP4Tensor [E, N, K] -> [N, K] in ``dtype``."""
    scale = q.linear_scale()[e]
    gs = q.global_scale.reshape(-1)
    gs_e = gs[e] if gs.numel() > 1 else gs[0]
    one = NVFP4Tensor(data=q.data[e], scale=scale, global_scale=gs_e.reshape(()),
                      shape=torch.Size(q.shape[1:]), scale_layout="linear")
    return dequantize_nvfp4(one, dtype=dtype)


@contextlib.contextmanager
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _check_weights(w13: NVFP4Tensor, w2: NVFP4Tensor, hidden_size: int) -> tuple[int, int]:
    for name, q in (("w13", w13), ("w2", w2)):
        if not isinstance(q, NVFP4Tensor) or len(q.shape) != 3:
            raise ValueError(f"{name} must be an expert-stacked NVFP4Tensor [E, N, K]")
    e, two_i, h = w13.shape
    if h != hidden_size or two_i % 2:
        raise ValueError(f"w13 must be [E, 2I, H={hidden_size}], got {tuple(w13.shape)}")
    if tuple(w2.shape) != (e, h, two_i // 2):
        raise ValueError(f"w2 must be [E={e}, H={h}, I={two_i // 2}], got {tuple(w2.shape)}")
    return e, two_i // 2


def moe_reference_slots(hidden: torch.Tensor, topk_ids: torch.Tensor, w13: NVFP4Tensor, w2: NVFP4Tensor,
                        *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unweighted expert outputs ``y_{e_{t,j}}(h_t)`` for every routed slot: [T, k, H] in ``dtype``."""
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    num_e, inter = _check_weights(w13, w2, hidden.shape[-1])
    check_routing(hidden, topk_ids, torch.zeros(topk_ids.shape), num_e)
    t, k = topk_ids.shape
    x = hidden.to(dtype)
    flat = topk_ids.reshape(-1).long()
    out = torch.zeros(t * k, hidden.shape[1], dtype=dtype, device=hidden.device)
    with _no_tf32():
        for e in torch.unique(flat).tolist():
            rows = torch.nonzero(flat == e).squeeze(1)
            g_u = x[rows // k] @ dequantize_expert(w13, e, dtype).T        # [n, 2I]
            act = torch.nn.functional.silu(g_u[:, :inter]) * g_u[:, inter:]
            out[rows] = act @ dequantize_expert(w2, e, dtype).T             # [n, H]
    return out.reshape(t, k, -1)


def moe_reference(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  w13: NVFP4Tensor, w2: NVFP4Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``out[t] = sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)`` -> [T, H] in ``dtype``.

    Use ``float64`` on CPU (exact operands), ``float32`` on a GPU.
    """
    check_routing(hidden, topk_ids, topk_weights)
    slots = moe_reference_slots(hidden, topk_ids, w13, w2, dtype=dtype)
    return (slots * topk_weights.to(dtype).unsqueeze(-1)).sum(dim=1)
