"""The MoE implementations the benchmark times, each as ``make(layer, hidden, ids, weights) ->
callable`` so that every contender gets the same routing.

- ``triton-w4a16``: :func:`sm120lab.kernels.moe_layer.fused_moe_packed` on weights prepared once
  by :func:`sm120lab.kernels.prepack.prepare_moe_weights`, running the given
  :class:`~sm120lab.kernels.plan.MoEPlan` (path and tiles); everything after the one-time
  preparation is inside the timed call;
- ``triton-w4a16-baseline`` / ``triton-w4a4``: :func:`sm120lab.kernels.moe_layer.fused_moe_nvfp4`
  on the canonical tensors (the MMA kernel of 2026-12-02; sort + GEMMs + k-sum inside the call);
- ``torch-bf16-grouped``: sort by expert (argsort, scatter-add counts, cumsum), gather, two
  ``torch._grouped_mm`` on bf16 weights, SiLU*up, weighted index_add;
- ``torch-fp8-grouped``: the same with ``torch._scaled_grouped_mm`` on FP8 e4m3 weights with
  per-row scales and per-token-row FP8 activations (quantization counted);
- ``torch-loop``: one ``torch.mm`` pair per active expert (host sync for the groups: naive).
Single-op variants (``w13`` only) are there for the w13 targets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .moe_problem import BenchLayer


def _group(ids: torch.Tensor, e: int):
    flat = ids.reshape(-1)
    order = torch.argsort(flat)
    counts = torch.zeros(e, dtype=torch.int32, device=ids.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    return order, offs


def torch_bf16_moe(layer: BenchLayer, x, ids, tw):
    k = ids.shape[1]
    order, offs = _group(ids, layer.E)
    tok = order // k
    rows = x[tok]
    gu = torch._grouped_mm(rows, layer.w13_bf16.transpose(1, 2), offs=offs)
    act = F.silu(gu[:, :layer.I]) * gu[:, layer.I:]
    y = torch._grouped_mm(act, layer.w2_bf16.transpose(1, 2), offs=offs)
    y = y.float() * tw.reshape(-1)[order].unsqueeze(1)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, tok, y)
    return out.to(torch.bfloat16)


def _fp8_rows(a: torch.Tensor):
    s = (a.float().abs().amax(dim=1) / 448.0).clamp_min(1e-12)
    return (a.float() / s.unsqueeze(1)).to(torch.float8_e4m3fn), s


def _scaled_gmm(a, w_fp8, w_scale, offs):
    a8, sa = _fp8_rows(a)
    return torch._scaled_grouped_mm(a8, w_fp8.transpose(1, 2), sa, w_scale, offs=offs, out_dtype=torch.bfloat16)


def torch_fp8_moe(layer: BenchLayer, x, ids, tw):
    k = ids.shape[1]
    order, offs = _group(ids, layer.E)
    tok = order // k
    gu = _scaled_gmm(x[tok], *layer.w13_fp8, offs)
    act = F.silu(gu[:, :layer.I]) * gu[:, layer.I:]
    y = _scaled_gmm(act, *layer.w2_fp8, offs)
    y = y.float() * tw.reshape(-1)[order].unsqueeze(1)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, tok, y)
    return out.to(torch.bfloat16)


def torch_loop_moe(layer: BenchLayer, x, ids, tw):
    k = ids.shape[1]
    flat = ids.reshape(-1)
    order = torch.argsort(flat)
    counts = torch.bincount(flat, minlength=layer.E).tolist()
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sl = order[start:start + c]
        start += c
        tok = sl // k
        gu = x[tok] @ layer.w13_bf16[e].T
        act = F.silu(gu[:, :layer.I]) * gu[:, layer.I:]
        y = (act @ layer.w2_bf16[e].T).float() * tw.reshape(-1)[sl].unsqueeze(1)
        out.index_add_(0, tok, y)
    return out.to(torch.bfloat16)


def make_moe(name: str, layer: BenchLayer, x, ids, tw, *, configs=None, a1=None, a2=None, packed=None, plan=None):
    """A no-argument callable running contender ``name``'s MoE layer on this routing.

    Args:
        packed / plan: the prepared weights and the :class:`~sm120lab.kernels.plan.MoEPlan` (``triton-w4a16``;
            plan None = the layer plans itself).
        configs / a1 / a2: the baseline's MMA tiles and W4A4 static scales.
    """
    if name == "triton-w4a16":
        from ..kernels.moe_layer import fused_moe_packed

        if packed is None:
            raise ValueError("triton-w4a16 needs packed= (sm120lab.kernels.prepack.prepare_moe_weights)")
        return lambda: fused_moe_packed(x, ids, tw, packed, plan=plan)
    if name == "triton-w4a16-baseline":
        from ..kernels.moe_layer import fused_moe_nvfp4

        return lambda: fused_moe_nvfp4(x, ids, tw, layer.w13, layer.w2, mode="w4a16", configs=configs)
    if name == "triton-w4a4":
        from ..kernels.moe_layer import fused_moe_nvfp4

        return lambda: fused_moe_nvfp4(x, ids, tw, layer.w13, layer.w2, mode="w4a4", a1_gscale=a1, a2_gscale=a2,
                                       configs=configs)
    if name == "torch-bf16-grouped":
        return lambda: torch_bf16_moe(layer, x, ids, tw)
    if name == "torch-fp8-grouped":
        return lambda: torch_fp8_moe(layer, x, ids, tw)
    if name == "torch-loop":
        return lambda: torch_loop_moe(layer, x, ids, tw)
    raise ValueError(f"unknown contender {name!r}")


def make_w13(name: str, layer: BenchLayer, x, ids, tw, *, configs=None, packed=None, plan=None):
    """A callable running only the w13 GEMM of contender ``name`` (inputs sorted/gathered outside).

    ``triton-w4a16``: the w13 launch of ``plan`` (:class:`~sm120lab.kernels.plan.MoEPlan`, required)."""
    k = ids.shape[1]
    if name == "triton-w4a16":
        from ..kernels.moe_frag import launch_frag
        from ..kernels.moe_layer import _packed_gemm_args, launch_decode, launch_moe_gemm, plan_columns
        from ..kernels.plan import Path

        if plan is None or packed is None:
            raise ValueError("triton-w4a16 w13 needs packed= and plan=")
        s = ids.numel()
        cfg = plan.w13
        buf = torch.empty(s, layer.I, dtype=torch.bfloat16, device=x.device)
        twf = tw.reshape(-1).contiguous()
        slot_ids, expert_ids = plan_columns(plan, ids.contiguous())
        if plan.path is Path.FRAG:
            return lambda: launch_frag(x, packed.w13, buf, twf, expert_ids, slot_ids, num_slots=s, a_row_div=k,
                                       fuse_silu=True, mul_routing=False, sorted_cols=cfg.SORTED, tiles=cfg.TILES,
                                       warps=cfg.num_warps, cg=cfg.CG)
        if plan.path is Path.DECODE:
            return lambda: launch_decode(x, packed.w13, buf, twf, expert_ids, slot_ids, n=layer.I, num_slots=s,
                                         a_row_div=k, n_up=layer.I, fuse_silu=True, mul_routing=False, cfg=cfg,
                                         fast=plan.fast)
        wa = _packed_gemm_args(packed.w13)
        return lambda: launch_moe_gemm(x, x, twf, wa, buf, twf, slot_ids, expert_ids, n=layer.I, k=layer.H,
                                       num_slots=s, a_row_div=k, n_up=layer.I, a_mode=0,
                                       fuse_silu=True, mul_routing=False, cfg=cfg)
    if name == "triton-w4a16-baseline":
        from ..kernels.moe_layer import _weight_args, launch_moe_gemm
        from ..kernels.moe_sort import moe_sort

        cfg13 = configs[0]
        sorted_ids, block_expert = moe_sort(ids, layer.E, cfg13.BLOCK_M)
        wa = _weight_args(layer.w13, "w13")
        buf = torch.empty(ids.numel(), layer.I, dtype=torch.bfloat16, device=x.device)
        twf = tw.reshape(-1).contiguous()
        return lambda: launch_moe_gemm(x, x, twf, wa, buf, twf, sorted_ids, block_expert, n=layer.I, k=layer.H,
                                       num_slots=ids.numel(), a_row_div=k, n_up=layer.I, a_mode=0,
                                       fuse_silu=True, mul_routing=False, cfg=cfg13)
    order, offs = _group(ids, layer.E)
    rows = x[order // k].contiguous()
    if name == "torch-bf16-grouped":
        w = layer.w13_bf16.transpose(1, 2)
        return lambda: torch._grouped_mm(rows, w, offs=offs)
    if name == "torch-fp8-grouped":
        wq, ws = layer.w13_fp8
        a8, sa = _fp8_rows(rows)
        return lambda: torch._scaled_grouped_mm(a8, wq.transpose(1, 2), sa, ws, offs=offs, out_dtype=torch.bfloat16)
    raise ValueError(f"no w13-only variant for {name!r}")


def make_sort(layer: BenchLayer, ids, block_m: int):
    from ..kernels.moe_sort import moe_sort

    return lambda: moe_sort(ids, layer.E, block_m)
