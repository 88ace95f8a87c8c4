"""The exact MoE forward every backend is diffed against.

For token t with routed experts e_1..e_k and routing weights w_1..w_k (fp32):

    G_e, U_e = dequant(w13)[e, :I, :], dequant(w13)[e, I:, :]        (gate = w1, up = w3)
    D_e      = dequant(w2)[e]                                         ([H, I])
    y_e(h)   = D_e @ (SiLU(G_e h) * (U_e h)),   SiLU(z) = z * sigmoid(z)
    out[t]   = sum_j w_j * y_{e_j}(h_t)

Dequantization is ``e2m1 * SF / gs`` (``sm120lab.nvfp4.dequantize_nvfp4``), so with
``dtype=float64`` (CPU) every operand is exact and the only rounding is fp64 accumulation; on a
GPU use ``float32`` (TF32 is switched off for the duration). The loop is
:func:`sm120lab.moe.grouping.grouped_moe_forward`: weights are dequantized one expert at a time,
only for experts that receive tokens, so the qwen3.5-397b preset fits on one GPU.
"""

from __future__ import annotations

import weakref

import torch

from sm120lab.nvfp4 import NVFP4Tensor, dequantize_nvfp4

from .grouping import grouped_moe_forward

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


#: dequantized experts of small weight tensors: id(data) -> (data ref, {(e, dtype): (scale ref, gs ref, value)})
_DEQUANT_CACHE: dict[int, tuple] = {}
#: only weight tensors up to this many elements are cached (the CPU presets; never a model-size layer)
DEQUANT_CACHE_MAX_ELEMENTS = 1 << 22


def dequantize_expert(q: NVFP4Tensor, e: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Dequantize expert ``e`` of an expert-stacked NVFP4Tensor [E, N, K] -> [N, K] in ``dtype``.

    Results for small tensors are cached while ``q``'s data, scale and global-scale tensors live
    (the harness runs every backend k+1 times on the same weights); treat the result as read-only.
    """
    if q.data.numel() * 2 > DEQUANT_CACHE_MAX_ELEMENTS:
        return _dequantize_expert(q, e, dtype)
    key = id(q.data)
    entry = _DEQUANT_CACHE.get(key)
    if entry is None or entry[0]() is not q.data:
        entry = (weakref.ref(q.data, lambda _, k=key: _DEQUANT_CACHE.pop(k, None)), {})
        _DEQUANT_CACHE[key] = entry
    hit = entry[1].get((e, dtype))
    if hit is not None and hit[0]() is q.scale and hit[1]() is q.global_scale:
        return hit[2]
    value = _dequantize_expert(q, e, dtype)
    entry[1][(e, dtype)] = (weakref.ref(q.scale), weakref.ref(q.global_scale), value)
    return value


def _dequantize_expert(q: NVFP4Tensor, e: int, dtype: torch.dtype) -> torch.Tensor:
    scale = q.linear_scale()[e]
    gs = q.global_scale.reshape(-1)
    gs_e = gs[e] if gs.numel() > 1 else gs[0]
    one = NVFP4Tensor(data=q.data[e], scale=scale, global_scale=gs_e.reshape(()),
                      shape=torch.Size(q.shape[1:]), scale_layout="linear")
    return dequantize_nvfp4(one, dtype=dtype)


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
    num_e, _ = _check_weights(w13, w2, hidden.shape[-1])
    check_routing(hidden, topk_ids, torch.zeros(topk_ids.shape), num_e)
    return grouped_moe_forward(hidden.to(dtype), topk_ids, None, num_e, lambda e: dequantize_expert(w13, e, dtype),
                               lambda e: dequantize_expert(w2, e, dtype), per_slot=True)


def moe_reference(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  w13: NVFP4Tensor, w2: NVFP4Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``out[t] = sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)`` -> [T, H] in ``dtype``.

    Use ``float64`` on CPU (exact operands), ``float32`` on a GPU.
    """
    check_routing(hidden, topk_ids, topk_weights)
    slots = moe_reference_slots(hidden, topk_ids, w13, w2, dtype=dtype)
    return (slots * topk_weights.to(dtype).unsqueeze(-1)).sum(dim=1)
