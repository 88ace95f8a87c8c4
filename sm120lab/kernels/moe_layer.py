"""The full NVFP4 MoE layer in Triton: sort -> (quantize) -> w13 + SiLU*up -> (quantize) -> w2 x
routing weight -> sum over the k choices.

``out[t] = sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)`` with G/U/W2 the NVFP4 weights
(contract: ``w13`` [E, 2I, H] rows [0:I] gate, [I:2I] up; ``w2`` [E, H, I]; per-expert global
scales). Modes:

- ``"w4a16"``: bf16 activations, weights dequantized inside the GEMM (exact ``e2m1*SF``, fp32
  accumulation); the intermediate is stored in bf16.
- ``"w4a4"``: activations quantized per token row to NVFP4 along the GEMM's K with the static
  global scales ``a1_gscale`` (hidden) and ``a2_gscale`` (bf16 intermediate), as the
  ``emulated-w4a4`` contract says; the GEMM uses ``tl.dot_scaled`` where the GPU has block-scaled
  FP4 MMA and the Triton version supports it (``native_fp4_supported``), else the exact in-kernel
  dequantization (same numerics). The native path is unverified on SM120 hardware.

Expert ids outside ``[0, E)`` (issue 32): on CPU tensors they are refused on the host before any kernel
(:func:`check_expert_ids`, no device involved); on CUDA nothing is read on the host by default: the
kernels treat such a slot as "no expert" (it adds exactly 0 to its token's output) and add their number
to a device-side int32 counter (``id_errors=``, else :func:`.id_errors.id_error_counter`), with no host
sync, eagerly and under CUDA-graph capture alike. ``check_ids=True`` (or ``SM120LAB_CHECK_IDS=1``) reads
the call's count after the kernels and raises the one-line ValueError (:mod:`.id_errors`).
"""

from __future__ import annotations

import torch
import triton

from ..nvfp4 import NVFP4Tensor
from .id_errors import check_ids_enabled, counter_for, id_error_counter  # noqa: F401  (re-exported)
from .moe_configs import DecodeConfig, FragConfig, GemmConfig
from .moe_decode import moe_w4a16_decode_kernel
from .moe_frag import launch_frag, launch_frag_w2_sum
from .moe_gemm import A_BF16, A_FP4_DEQUANT, A_FP4_NATIVE, moe_nvfp4_gemm_kernel
from .moe_sort import moe_sort
from .nvfp4_tl import QUANTIZE_LAUNCH_OPTIONS, nvfp4_quantize_rows_kernel
from .plan import (  # noqa: F401  (the gates are re-exported: callers import them from here)
    MoEPlan,
    MoEShape,
    Path,
    fast_decode_supported,
    frag_supported,
    interpreting,
    native_fp4_supported,
    plan_moe,
)
from .prepack import PackedMoEWeights, PackedNVFP4

MODES = ("w4a16", "w4a4")


def _weight_args(w: NVFP4Tensor, name: str, num_experts: int | None = None):
    if not isinstance(w, NVFP4Tensor):
        raise TypeError(f"{name} must be an NVFP4Tensor, got {type(w).__name__}")
    if len(w.shape) != 3:
        raise ValueError(f"{name} must have shape [E, N, K], got {tuple(w.shape)}")
    e, n, k = w.shape
    data = w.data
    scale = w.linear_scale().reshape(e, n, k // 16)
    if data.stride(-1) != 1:
        data = data.contiguous()
    if scale.stride(-1) != 1:
        scale = scale.contiguous()
    gs = w.global_scale.to(device=data.device, dtype=torch.float32).reshape(-1)
    if gs.numel() == 1:
        gs_stride = 0
    elif gs.numel() == e:
        gs_stride = gs.stride(0)
    else:
        raise ValueError(f"{name}.global_scale must hold 1 or E={e} values, got shape {tuple(w.global_scale.shape)}")
    return data, scale.view(torch.uint8), gs, gs_stride


def _block_k(cfg_k: int, k: int, name: str) -> int:
    if k % 32:
        raise ValueError(f"{name} must be a multiple of 32 for the Triton MoE kernels, got {k}")
    bk = cfg_k
    while k % bk:
        bk //= 2
    return bk


def _scalar_gs(g, name: str, device) -> torch.Tensor:
    if g is None:
        raise ValueError(f"mode='w4a4' needs {name} (the static activation global scale, 448*6/amax)")
    t = g if isinstance(g, torch.Tensor) else torch.tensor(float(g))
    t = t.to(device=device, dtype=torch.float32).reshape(-1)
    if t.numel() != 1:
        raise ValueError(f"{name} must be a scalar, got shape {tuple(t.shape)}")
    return t


def quantize_rows_nvfp4(x: torch.Tensor, gs: torch.Tensor):
    """x [R, K] -> (codes uint8 [R, K/2], E4M3 scale bits uint8 [R, K/16]) with static gs (Triton).

    R may be 0 (no launch); K must be a positive multiple of 16 (ValueError naming ``x`` otherwise)."""
    if x.dim() != 2 or x.shape[1] == 0 or x.shape[1] % 16:
        raise ValueError(f"x: expected [R, K] with K a positive multiple of 16 (NVFP4 blocks), got shape {tuple(x.shape)}")
    r, k = x.shape
    if r == 0:
        return (torch.empty(0, k // 2, dtype=torch.uint8, device=x.device),
                torch.empty(0, k // 16, dtype=torch.uint8, device=x.device))
    q = torch.empty(r, k // 2, dtype=torch.uint8, device=x.device)
    s = torch.empty(r, k // 16, dtype=torch.uint8, device=x.device)
    block_g = min(64, triton.next_power_of_2(k // 16))
    grid = (r, triton.cdiv(k // 16, block_g))
    nvfp4_quantize_rows_kernel[grid](x, gs, q, s, k, x.stride(0), q.stride(0), s.stride(0),
                                     BLOCK_G=block_g, num_warps=4, **QUANTIZE_LAUNCH_OPTIONS)
    return q, s


def launch_moe_gemm(a, a_scale, a_gs, w_args, out, topk_w, sorted_ids, block_expert, *, n, k,
                    num_slots, a_row_div, n_up, a_mode, fuse_silu, mul_routing, cfg: GemmConfig):
    """One grouped GEMM launch; grid = (N tiles, M blocks)."""
    data, scale, gs, gs_stride = w_args
    a_mode = int(getattr(a_mode, "value", a_mode))
    bk = _block_k(cfg.BLOCK_K, k, "K")
    grid = (triton.cdiv(n, cfg.BLOCK_N), block_expert.numel())
    fast = cfg.FAST and not interpreting() and a_mode != A_FP4_NATIVE.value
    moe_nvfp4_gemm_kernel[grid](
        a, a_scale, a_gs, data, scale, gs, out, topk_w, sorted_ids, block_expert,
        n, k, num_slots, a_row_div, n_up,
        a.stride(0), a_scale.stride(0), data.stride(0), data.stride(1), scale.stride(0), scale.stride(1),
        gs_stride, out.stride(0),
        A_MODE=a_mode, FUSE_SILU=fuse_silu, MUL_ROUTING=mul_routing,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=bk,
        FAST=fast,  # see moe_gemm
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_decode(a, w: PackedNVFP4, out, topk_w, expert_ids, slot_ids, *, n, num_slots, a_row_div, n_up,
                  fuse_silu, mul_routing, cfg: DecodeConfig, fast: bool, id_errors: torch.Tensor | None = None):
    """One decode launch (:mod:`.moe_decode`); grid = (output tiles, slots). ``id_errors``: the int32 [1]
    counter an unsorted w13 launch adds out-of-range ids to (None: :func:`.id_errors.id_error_counter`)."""
    e, _, k = w.shape
    kw = k // 8
    # the K tile: a power of two (tl.arange) that divides the row's words (the activation loads are
    # unmasked); min(BLOCK_KW, kw) alone gave 48 at H=384 (kw=48), which does not compile
    bkw = 1 << (min(cfg.BLOCK_KW, kw).bit_length() - 1)
    while kw % bkw:
        bkw //= 2
    per_prog = cfg.BLOCK_N // 2 if fuse_silu else cfg.BLOCK_N
    grid = (triton.cdiv(n, per_prog), num_slots)
    moe_w4a16_decode_kernel[grid](
        a, w.words, w.scales, w.alpha, out, topk_w, expert_ids, slot_ids,
        n, kw, num_slots, a_row_div, n_up,
        a.stride(0), w.words.stride(0), w.words.stride(1), w.scales.stride(0), w.scales.stride(1), out.stride(0),
        counter_for(a.device, id_errors), e,
        FUSE_SILU=fuse_silu, MUL_ROUTING=mul_routing, SORTED=cfg.SORTED, BLOCK_N=cfg.BLOCK_N, BLOCK_KW=bkw,
        FAST=fast, DEPTH=cfg.DEPTH, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _packed_gemm_args(p: PackedNVFP4):
    """The MMA kernel's weight arguments on the packed buffers (the same bytes, no copy)."""
    e = p.shape[0]
    gs = p.global_scale if isinstance(p.global_scale, torch.Tensor) else torch.tensor(float(p.global_scale))
    gs = gs.to(device=p.words.device, dtype=torch.float32).reshape(-1)
    return p.codes_u8, p.scales, gs, (gs.stride(0) if gs.numel() == e else 0)


def legacy_plan_args(decode: bool | None, frag: bool | None, decode_configs, configs, frag_configs,
                     has_frag: bool = True) -> dict:
    """The path/tile keyword arguments of :func:`fused_moe_packed` as :func:`.plan.plan_moe` arguments
    (``paths`` allowed, ``tiles`` given): ``frag=True`` or ``frag_configs`` -> the fragment path;
    ``decode=True`` -> fragment or decode (``frag=False``: decode only); ``decode=False`` -> MMA.
    Tiles given for the path the plan then takes are used as given; the others are ignored."""
    if frag or (frag is None and frag_configs is not None and decode is not False):
        paths, tiles = {Path.FRAG}, frag_configs
    elif decode is False:
        paths, tiles = {Path.MMA}, configs
    else:
        paths = {Path.DECODE} if decode else {Path.DECODE, Path.MMA}
        if frag is None and has_frag:
            paths.add(Path.FRAG)
        tiles = decode_configs if decode and frag is False else None
    if not has_frag:
        paths.discard(Path.FRAG)
        if not paths:
            raise ValueError("frag=True needs weights prepared with the fragment layout (N % 16 == 0, K % 64 == 0)")
    return {"paths": frozenset(paths), "tiles": tiles, "fallback_tiles": {Path.DECODE: decode_configs,
                                                                            Path.MMA: configs}}


def _plan_for_shape(shape, tokens, device, mode, has_frag, decode, frag, decode_configs, configs, frag_configs,
                    fast, native) -> MoEPlan:
    """The plan :func:`fused_moe_packed` runs for this shape, T and its path/tile arguments."""
    if mode == "w4a4":
        return plan_moe(shape, tokens, device=device, mode=mode, tiles=configs, native=native)
    la = legacy_plan_args(decode, frag, decode_configs, configs, frag_configs, has_frag)
    plan = plan_moe(shape, tokens, device=device, paths=la["paths"], tiles=la["tiles"], fast=fast)
    given = la["fallback_tiles"].get(plan.path)
    if la["tiles"] is None and given is not None:
        plan = plan_moe(shape, tokens, device=device, tiles=given, fast=fast)
    return plan


def fused_moe_packed(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                     packed: PackedMoEWeights, *, plan: MoEPlan | None = None, decode: bool | None = None,
                     decode_configs: tuple[DecodeConfig, DecodeConfig] | None = None,
                     configs: tuple[GemmConfig, GemmConfig] | None = None, fast: bool | None = None,
                     frag: bool | None = None, frag_configs: tuple[FragConfig, FragConfig] | None = None,
                     mode: str = "w4a16", a1_gscale=None, a2_gscale=None, native: bool | None = None,
                     out: torch.Tensor | None = None, id_errors: torch.Tensor | None = None,
                     check_ids: bool | None = None, _poison: bool = False,
                     _host_id_check: bool = True) -> torch.Tensor:
    """W4A16 MoE layer on prepared weights (:func:`sm120lab.kernels.prepack.prepare_moe_weights`) -> [T, H] bf16.

    ``out[t] = sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)``, the function of
    :func:`fused_moe_nvfp4` with ``mode="w4a16"``.

    Args:
        hidden: bf16 [T, H]. topk_ids: int [T, k]. topk_weights: float [T, k].
        packed: the prepared weights.
        plan: the :class:`.plan.MoEPlan` to run (path, tiles, sort block); None = built here by
            :func:`.plan.plan_moe` from the shape, T and device (tile table, else formula), restricted by:
        decode / frag / decode_configs / configs / frag_configs: path and tile overrides
            (:func:`legacy_plan_args`): ``frag=True`` the fragment kernels (:mod:`.moe_frag`),
            ``frag=False, decode=True`` the CUDA-core decode kernel (:mod:`.moe_decode`),
            ``decode=False`` the MMA kernel (:mod:`.moe_gemm`) on the same buffers.
        fast: inline-PTX variants; None = where the target has them.
        mode: "w4a16", or "w4a4" (activations quantized per row with the static ``a1_gscale`` /
            ``a2_gscale``; the MMA kernel on the packed canonical words, ``tl.dot_scaled`` where
            ``native`` / :func:`native_fp4_supported`: the same numerics as :func:`fused_moe_nvfp4`).
        out: optional [T, H] bf16 buffer. _poison: fill internal buffers with NaN first (tests).
        id_errors: optional int32 tensor of one element on the device: the kernels add the number of
            ``topk_ids`` outside ``[0, E)`` to it (device-side, no host sync); None: the per-device counter
            :func:`.id_errors.id_error_counter`. Such a slot adds exactly 0 to its token's output.
        check_ids: read this call's count after the kernels (a host sync, the caller's choice) and raise the
            one-line ValueError of :func:`check_expert_ids` when it is not 0; None: ``SM120LAB_CHECK_IDS=1``
            turns it on. Ignored while a CUDA graph is captured. CPU ids are checked on the host before any
            kernel regardless (:func:`check_expert_ids`). _host_id_check (tests): False skips that CPU host
            check, so the interpreter runs the kernels' masking.
    """
    if not isinstance(packed, PackedMoEWeights):
        raise TypeError(f"packed must be a PackedMoEWeights (prepare_moe_weights), got {type(packed).__name__}")
    e, h, inter = packed.num_experts, packed.hidden, packed.intermediate
    t, k = _check_layer_inputs(hidden, topk_ids, topk_weights, h, (packed.w13.words, packed.w2.words), e,
                               host_ids=_host_id_check)
    dev = hidden.device
    err, check = _id_counter(dev, id_errors, check_ids)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if plan is None:
        shape = MoEShape.of(e, h, inter, k)
        plan = _plan_for_shape(shape, t, dev, mode, packed.w13.has_frag and packed.w2.has_frag, decode, frag,
                               decode_configs, configs, frag_configs, fast, native)
    elif (plan.shape.E, plan.shape.K, plan.shape.N) != (e, h, inter) or plan.mode != mode:
        raise ValueError(f"plan is for {plan.shape.key} mode {plan.mode}, the weights are E={e}, N={inter}, K={h} "
                         f"and mode={mode}")
    if plan.path is Path.MMA:
        res = _layer_gemms(hidden, topk_ids, topk_weights, _packed_gemm_args(packed.w13), _packed_gemm_args(packed.w2),
                           e, h, inter, plan=plan, a1_gscale=a1_gscale, a2_gscale=a2_gscale, out=out,
                           _poison=_poison, err=err)
    elif t * k == 0:
        res = torch.zeros(t, h, dtype=torch.bfloat16, device=dev)
        res = res if out is None else out.copy_(res)
    elif plan.path is Path.FRAG:
        res = _moe_frag(hidden.contiguous(), topk_ids.contiguous(), topk_weights.contiguous(), packed, plan,
                        out, _poison, err)
    else:
        res = _moe_decode(hidden.contiguous(), topk_ids.contiguous(), topk_weights.contiguous(), packed, plan, out,
                          _poison, err)
    if check:
        _check_count(err, id_errors, topk_ids, e)
    return res


def _id_counter(dev, id_errors, check_ids) -> tuple[torch.Tensor, bool]:
    """(the counter this call's kernels add to, check mode on): in check mode (not under CUDA-graph
    capture) a fresh zeroed counter, added to ``id_errors`` / the per-device one by :func:`_check_count`."""
    target = counter_for(dev, id_errors)
    if check_ids_enabled(check_ids) and not _capturing(dev):
        return torch.zeros(1, dtype=torch.int32, device=dev), True
    return target, False


def _check_count(err: torch.Tensor, id_errors, topk_ids: torch.Tensor, num_experts: int) -> None:
    """Check mode: hand the call's count on to the caller's counter, read it (host sync), raise when not 0."""
    counter_for(err.device, id_errors).add_(err)
    if int(err.item()):
        msg = _bad_ids_message(topk_ids, num_experts)
        raise ValueError(msg or f"topk_ids: expected expert ids in [0, E={num_experts}), got {int(err.item())} "
                                "outside it (the ids changed after the kernels read them)")


def _moe_decode(hidden, ids, tw, packed: PackedMoEWeights, plan: MoEPlan, out, _poison, err):
    """The decode path of :func:`fused_moe_packed`: (sort) -> w13 -> w2 -> k-sum."""
    t, k = ids.shape
    s = t * k
    h, inter = packed.hidden, packed.intermediate
    twf = tw.reshape(-1)
    inter_buf = torch.empty(s, inter, dtype=torch.bfloat16, device=hidden.device)
    out_slots = torch.empty(s, h, dtype=torch.float32, device=hidden.device)
    if _poison:
        inter_buf.fill_(float("nan"))
        out_slots.fill_(float("nan"))
    # a sorted plan drops a slot whose id is outside [0, E): the sort zeroes its out_slots row
    slot_ids, expert_ids = plan_columns(plan, ids, id_errors=err, zero_rows=out_slots)
    launch_decode(hidden, packed.w13, inter_buf, twf, expert_ids, slot_ids, n=inter, num_slots=s, a_row_div=k,
                  n_up=inter, fuse_silu=True, mul_routing=False, cfg=plan.w13, fast=plan.fast, id_errors=err)
    launch_decode(inter_buf, packed.w2, out_slots, twf, expert_ids, slot_ids, n=h, num_slots=s, a_row_div=1,
                  n_up=0, fuse_silu=False, mul_routing=True, cfg=plan.w2, fast=plan.fast, id_errors=err)
    return _sum_slots(out_slots, t, k, h, out)


def plan_columns(plan: MoEPlan, ids: torch.Tensor, *, id_errors: torch.Tensor | None = None,
                 zero_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot_ids, expert_ids) the plan's kernels read: ``moe_sort(ids, E, plan.sort_block)`` where the
    plan sorts (it drops and counts ids outside [0, E) into ``id_errors`` and zeroes their ``zero_rows``
    rows), else one slot per program in token order (both are the flat ``topk_ids``; the w13 launch
    masks and counts)."""
    if plan.sort_block:
        return moe_sort(ids, plan.shape.E, plan.sort_block, id_errors=id_errors, zero_rows=zero_rows)
    flat = ids.reshape(-1)
    return flat, flat


def _moe_frag(hidden, ids, tw, packed: PackedMoEWeights, plan: MoEPlan, out, _poison, err):
    """The fragment path of :func:`fused_moe_packed`: (sort into 8- or 32-slot groups) -> w13 -> w2 -> k-sum."""
    if not (packed.w13.has_frag and packed.w2.has_frag):
        raise ValueError("the fragment path needs weights prepared with the fragment layout (N % 16 == 0, K % 64 == 0)")
    t, k = ids.shape
    s = t * k
    h, inter = packed.hidden, packed.intermediate
    dev = hidden.device
    cfg13, cfg2 = plan.w13, plan.w2
    twf = tw.reshape(-1)
    inter_buf = torch.empty(s, inter, dtype=torch.bfloat16, device=dev)
    if _poison:
        inter_buf.fill_(float("nan"))
    out_slots = None
    if not plan.w2_sums:
        out_slots = torch.empty(s, h, dtype=torch.float32, device=dev)
        if _poison:
            out_slots.fill_(float("nan"))
    # sorted: the sort drops and counts a slot whose id is outside [0, E) and zeroes its out_slots row;
    # unsorted: the w13 launch counts it, w13 and w2 give it exactly 0
    slot_ids, expert_ids = plan_columns(plan, ids, id_errors=err, zero_rows=out_slots)
    launch_frag(hidden, packed.w13, inter_buf, twf, expert_ids, slot_ids, num_slots=s, a_row_div=k, fuse_silu=True,
                mul_routing=False, sorted_cols=cfg13.SORTED, tiles=cfg13.TILES, warps=cfg13.num_warps, cg=cfg13.CG,
                id_errors=err, ping=cfg13.PING, share_b=cfg13.SHARE_B)
    if plan.w2_sums:  # w2 and the sum over the k choices in one launch, written in bf16
        if out is not None and (out.shape != (t, h) or out.dtype != torch.bfloat16 or out.stride(1) != 1):
            raise ValueError(f"out must be a bf16 [T={t}, H={h}] tensor with unit column stride, got "
                             f"{out.dtype} {tuple(out.shape)}")
        res = out if out is not None else torch.empty(t, h, dtype=torch.bfloat16, device=dev)
        launch_frag_w2_sum(inter_buf, packed.w2, res, twf, ids, tiles=cfg2.TILES, warps=cfg2.num_warps,
                           prefetch=cfg2.w2sum_prefetch, ping=cfg2.PING)
        return res
    launch_frag(inter_buf, packed.w2, out_slots, twf, expert_ids, slot_ids, num_slots=s, a_row_div=1, fuse_silu=False,
                mul_routing=True, sorted_cols=cfg2.SORTED, tiles=cfg2.TILES, warps=cfg2.num_warps, cg=cfg2.CG,
                id_errors=err, ping=cfg2.PING, share_b=cfg2.SHARE_B)
    return _sum_slots(out_slots, t, k, h, out)


def _sum_slots(out_slots, t, k, h, out):
    total = out_slots.view(t, k, h).sum(dim=1)
    if out is None:
        return total.to(torch.bfloat16)
    if out.shape != (t, h):
        raise ValueError(f"out must have shape [T={t}, H={h}], got {tuple(out.shape)}")
    out.copy_(total)
    return out


#: the dtypes ``topk_ids`` may have (bool, floating and complex ids are refused)
ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _capturing(device: torch.device) -> bool:
    """True while the current CUDA stream of ``device`` records a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def check_expert_ids(topk_ids: torch.Tensor, num_experts: int) -> None:
    """Refuse expert ids outside ``[0, num_experts)`` with one line (ValueError) where that costs no
    device sync: on CPU tensors only.

    Contract (issue 32: no host sync, no broken CUDA-graph capture on the hot path):

    - ``topk_ids`` on the CPU: checked here, always (a min/max over T*k ints, no device involved), before
      any kernel runs;
    - on CUDA: not read on the host. The kernels treat an id outside ``[0, E)`` as "no expert": the slot
      reads no weights (or expert 0's under a factor of 0) and adds exactly 0 to its token's output, and a
      sorted path drops it from every expert block (:func:`.moe_sort.moe_sort`). They add the number of
      such slots to a device-side int32 counter, once per slot (the sort's count kernel on sorted paths,
      the w13 launch on unsorted ones): the layer's ``id_errors=`` tensor, else the per-device
      :func:`.id_errors.id_error_counter` (read with :func:`.id_errors.id_error_count`). Eagerly and under
      CUDA-graph capture alike; nothing syncs;
    - check mode (``check_ids=True`` or ``SM120LAB_CHECK_IDS=1``, outside capture): the layer reads its
      call's count after the kernels and raises this same one-line error (min, max, first bad position).

    The dtype, shape and device checks (:func:`_check_layer_inputs`) read no data and always run.
    """
    if topk_ids.device.type != "cpu" or topk_ids.numel() == 0:
        return
    msg = _bad_ids_message(topk_ids, num_experts)
    if msg:
        raise ValueError(msg)


def _bad_ids_message(topk_ids: torch.Tensor, num_experts: int) -> str | None:
    """The one-line error for ids outside ``[0, num_experts)`` (None when all are inside); reads the ids on
    the host (a sync for CUDA ids: CPU ids and check mode only)."""
    if topk_ids.numel() == 0:
        return None
    lo, hi = (int(v) for v in torch.aminmax(topk_ids.reshape(-1)))
    if lo >= 0 and hi < num_experts:
        return None
    flat = topk_ids.reshape(-1)
    bad = int(((flat < 0) | (flat >= num_experts)).sum())
    first = int(torch.nonzero((flat < 0) | (flat >= num_experts))[0])
    k = topk_ids.shape[-1] if topk_ids.dim() else 1
    return (f"topk_ids: expected expert ids in [0, E={num_experts}), got {bad} outside it "
            f"(min {lo}, max {hi}; first at [{first // k}, {first % k}]: {int(flat[first])})")


def _check_layer_inputs(hidden, topk_ids, topk_weights, h: int, weight_tensors, num_experts: int,
                        host_ids: bool = True) -> tuple[int, int]:
    """Validate the layer's activation/routing arguments; returns (T, k).

    Types, dtypes, shapes and devices are always checked (they read no tensor data); the id range of
    CPU ids by :func:`check_expert_ids` unless ``host_ids`` is False (CUDA ids: masked and counted by the
    kernels)."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or hidden.dtype != torch.bfloat16:
        raise ValueError(f"hidden must be a bf16 tensor [T, H], got {getattr(hidden, 'dtype', type(hidden))} "
                         f"{tuple(getattr(hidden, 'shape', ()))}")
    t = hidden.shape[0]
    if hidden.shape[1] != h:
        raise ValueError(f"hidden must be [T, H={h}] to match the weights, got {tuple(hidden.shape)}")
    if (not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.shape[0] != t
            or topk_ids.dtype not in ID_DTYPES):
        raise ValueError(f"topk_ids must be an integer tensor [T={t}, k] (int64, int32, int16, int8 or uint8), got "
                         f"{getattr(topk_ids, 'dtype', type(topk_ids).__name__)} {tuple(getattr(topk_ids, 'shape', ()))}")
    if not isinstance(topk_weights, torch.Tensor) or not topk_weights.dtype.is_floating_point:
        raise ValueError(f"topk_weights must be a floating tensor, got "
                         f"{getattr(topk_weights, 'dtype', type(topk_weights).__name__)}")
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_weights must have the shape of topk_ids {tuple(topk_ids.shape)}, got {tuple(topk_weights.shape)}")
    dev = hidden.device
    for name, x in (("topk_ids", topk_ids), ("topk_weights", topk_weights), ("w13", weight_tensors[0]),
                    ("w2", weight_tensors[1])):
        if x.device != dev:
            raise ValueError(f"{name} is on {x.device}, hidden on {dev}: all inputs must share a device")
    if host_ids:
        check_expert_ids(topk_ids, num_experts)
    return t, topk_ids.shape[1]


def fused_moe_nvfp4(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                    w13: NVFP4Tensor, w2: NVFP4Tensor, *, mode: str = "w4a16", a1_gscale=None,
                    a2_gscale=None, configs: tuple[GemmConfig, GemmConfig] | None = None,
                    native: bool | None = None, out: torch.Tensor | None = None,
                    id_errors: torch.Tensor | None = None, check_ids: bool | None = None,
                    _poison: bool = False, _trace: dict | None = None, _host_id_check: bool = True) -> torch.Tensor:
    """MoE layer with NVFP4 weights -> [T, H] bf16 (see module docstring).

    hidden [T, H] bf16; topk_ids [T, k] int; topk_weights [T, k] float; w13 [E, 2I, H] and w2
    [E, H, I] NVFP4Tensors (linear or swizzled scales; swizzled ones are unswizzled per call).
    ``configs``: (w13, w2) tile configs sharing BLOCK_M (default: :func:`pick_configs`).
    ``native``: W4A4 only; None = use ``tl.dot_scaled`` where :func:`native_fp4_supported`.
    ``out``: optional [T, H] bf16 buffer to write. ``_poison`` (tests) fills the internal buffers
    with NaN first, so a row the kernels fail to write shows up as NaN in the output. ``_trace``
    (diagnosis, ``scripts/w4a4_replay.py``): a dict that receives every stage's buffer (``plan``, the
    quantized activations ``a1``/``a1_scales`` and ``a2``/``a2_scales`` in W4A4, the per-slot intermediate
    ``inter`` [T*k, I] and weighted outputs ``out_slots`` [T*k, H]). ``id_errors`` / ``check_ids`` /
    ``_host_id_check``: expert ids outside [0, E), as in :func:`fused_moe_packed` (:func:`check_expert_ids`).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    w13_args = _weight_args(w13, "w13")
    w2_args = _weight_args(w2, "w2")
    e, n13, h = w13.shape
    inter = n13 // 2
    if n13 % 2:
        raise ValueError(f"w13 must be [E, 2I, H], got {tuple(w13.shape)}")
    if tuple(w2.shape) != (e, h, inter):
        raise ValueError(f"w2 must be [E={e}, H={h}, I={inter}], got {tuple(w2.shape)}")
    t, k = _check_layer_inputs(hidden, topk_ids, topk_weights, h, (w13.data, w2.data), e, host_ids=_host_id_check)
    err, check = _id_counter(hidden.device, id_errors, check_ids)
    plan = plan_moe(MoEShape.of(e, h, inter, k), t, device=hidden.device, mode=mode, paths={Path.MMA}, tiles=configs,
                    native=native)
    res = _layer_gemms(hidden, topk_ids, topk_weights, w13_args, w2_args, e, h, inter, plan=plan,
                       a1_gscale=a1_gscale, a2_gscale=a2_gscale, out=out, _poison=_poison, _trace=_trace, err=err)
    if check:
        _check_count(err, id_errors, topk_ids, e)
    return res


def _layer_gemms(hidden, topk_ids, topk_weights, w13_args, w2_args, e: int, h: int, inter: int, *, plan: MoEPlan,
                 a1_gscale, a2_gscale, out, _poison, _trace: dict | None = None,
                 err: torch.Tensor | None = None) -> torch.Tensor:
    """Sort + (quantize) + w13 + (quantize) + w2 + k-sum on the MMA kernel (``plan.path`` is mma), for
    canonical or packed weights."""
    t = hidden.shape[0]
    dev = hidden.device
    k = topk_ids.shape[1]
    s = t * k
    if s == 0:
        res = torch.zeros(t, h, dtype=torch.bfloat16, device=dev)
        return res if out is None else out.copy_(res)
    mode = plan.mode
    cfg13, cfg2 = plan.w13, plan.w2
    hidden = hidden.contiguous()
    ids = topk_ids.contiguous()
    tw = topk_weights.contiguous()
    # allocated before the sort, which zeroes the rows of the slots it drops (ids outside [0, E))
    out_slots = torch.empty(s, h, dtype=torch.float32, device=dev)
    if _poison:
        out_slots.fill_(float("nan"))
    sorted_ids, block_expert = plan_columns(plan, ids, id_errors=err, zero_rows=out_slots)

    if mode == "w4a16":
        a_mode = A_BF16
        a1, a1s, g1 = hidden, hidden, tw  # scale / gs pointers unused in this mode
    else:
        g1 = _scalar_gs(a1_gscale, "a1_gscale", dev)
        g2 = _scalar_gs(a2_gscale, "a2_gscale", dev)
        a_mode = A_FP4_NATIVE if plan.native else A_FP4_DEQUANT
        a1, a1s = quantize_rows_nvfp4(hidden, g1)

    inter_buf = torch.empty(s, inter, dtype=torch.bfloat16, device=dev)
    if _poison:
        inter_buf.fill_(float("nan"))
    launch_moe_gemm(a1, a1s, g1, w13_args, inter_buf, tw, sorted_ids, block_expert, n=inter, k=h,
                    num_slots=s, a_row_div=k, n_up=inter, a_mode=a_mode, fuse_silu=True,
                    mul_routing=False, cfg=cfg13)
    if mode == "w4a16":
        a2, a2s, g2 = inter_buf, inter_buf, tw
    else:
        a2, a2s = quantize_rows_nvfp4(inter_buf, g2)
    launch_moe_gemm(a2, a2s, g2, w2_args, out_slots, tw, sorted_ids, block_expert, n=h, k=inter,
                    num_slots=s, a_row_div=1, n_up=0, a_mode=a_mode, fuse_silu=False,
                    mul_routing=True, cfg=cfg2)
    if _trace is not None:
        _trace.update(plan=plan, inter=inter_buf, out_slots=out_slots)
        if mode == "w4a4":
            _trace.update(a1=a1, a1_scales=a1s, a2=a2, a2_scales=a2s)
    return _sum_slots(out_slots, t, k, h, out)
