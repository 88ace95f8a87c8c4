"""Grouped GEMM over expert-sorted rows with NVFP4 weights (one source, three inner products).

Weights: NVFP4 in the layout of :mod:`sm120lab.nvfp4` with linear scales: ``w`` uint8 [E, N, K/2]
(element 2j in the low nibble of byte j), ``ws`` uint8 E4M3 bits [E, N, K/16], encode-side global
scale ``gs_w`` per expert. Rows of A are gathered through ``sorted_ids`` (see
:mod:`.moe_sort`): A row = slot // a_row_div (``top_k`` for w13, 1 for w2).

Inner product per K tile (``A_MODE``):

- 0, W4A16: W dequantized to ``e2m1*SF*2**-14`` in bf16 (exact) as its even and odd columns, joined
  back into one [N, K] tile, ``acc += A @ W^T`` in fp32 (one dot, so the A tile goes from shared memory
  straight to the MMA; H200: the layer 0.97-1.0x the time with 128-row tiles, 0.87-0.91x with 64-row tiles,
  ``data/bench/aux/prefill_probe_h200_2026-12-03.jsonl``); alpha = ``2**14 / gs_w``. With ``FAST`` A is
  split into even/odd columns instead, ``acc += A_even @ W_lo^T + A_odd @ W_hi^T`` (Triton 3.6 fails to
  compile the join after the inline PTX).
- 1, W4A4 dequant: A is NVFP4 too (codes [rows, K/2], E4M3 scales [rows, K/16], static global
  scale ``gs_a``), dequantized the same way: products of exact operands, fp32 accumulation,
  alpha = ``2**28 / (gs_a * gs_w)`` -- the numerics of ``emulated-w4a4`` (exact GEMM on the
  dequantized operands) up to the order of fp32 additions.
- 2, W4A4 native: ``tl.dot_scaled(a, sa, "e2m1", w^T, sw, "e2m1")`` with fp8e4nv scales per 16
  elements, alpha = ``1 / (gs_a * gs_w)``. On sm_120 (Triton >= 3.6) and sm_121 (Triton >= 3.9) this lowers to
  ``mma.sync...kind::mxf4nvf4.block_scale.scale_vec::4X...ue4m3``. Unverified on SM120 hardware:
  checked only by ahead-of-time compilation (see tests/test_triton_aot.py).

Tile option: ``FAST`` dequantizes W with inline PTX
(:func:`.nvfp4_tl.dequant_pair_tile3_asm`, 4 bytes per register, one ``mul.bf16x2`` per pair) on
[N, K/16, 8] loads instead of Triton element-wise ops (GPU only; ~25% fewer loop instructions on
sm_90 but not faster overall, notes/triton_kernels.md).

Epilogues: ``FUSE_SILU`` (w13): the CTA computes gate rows [n] and up rows [N_UP + n] and writes
``silu(gate) * up`` (bf16, [slots, N]); ``MUL_ROUTING`` (w2): multiplies by the slot's routing
weight and writes [slots, N] in the output pointer's dtype (fp32 from the layer op); the caller
sums the k slots of each token.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from .nvfp4_tl import E2M1_F16_SHIFT, E2M1_F16_SHIFT_SQ, dequant_pair_tile, dequant_pair_tile3_asm

#: ``A_MODE`` values (the inner product per K tile, module docstring); shared with ``sm120lab.archflags.kernel_aot``
A_BF16: tl.constexpr = tl.constexpr(0)
A_FP4_DEQUANT: tl.constexpr = tl.constexpr(1)
A_FP4_NATIVE: tl.constexpr = tl.constexpr(2)

#: True when this process's kernels are Triton-interpreted (``TRITON_INTERPRET`` when they were decorated,
#: which is when ``triton.jit`` decides; :func:`.plan.interpreting` asks the kernel object itself). A global
#: constexpr, not a kernel argument: the interpreter-only steps (fp32 dots, bf16 rounding) compile away on a
#: GPU and stay out of the production signatures.
INTERPRETED: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").strip().lower()
                                         in ("1", "true", "yes", "on", "y"))


@triton.jit
def _dot(a, b, acc, DOT_F32: tl.constexpr):
    """acc + a @ b; ``DOT_F32`` upcasts the (exactly bf16) operands first: Triton 3.9's interpreter
    returns garbage (~1e10) for bf16 tl.dot, so the CPU checks run the same values through fp32."""
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    return tl.dot(a, b, acc)


@triton.jit
def _round_bf16_rne(x):
    """fp32 -> fp32 holding the round-to-nearest-even bf16 value (bit arithmetic; finite x).

    Used under the interpreter only: Triton 3.9's interpreter truncates fp32 -> bf16 casts (seen:
    half of random values off by one ulp, all towards zero); on the GPU the cast is cvt.rn."""
    bits = x.to(tl.int32, bitcast=True)
    r = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return r.to(tl.float32, bitcast=True)


@triton.jit
def _partial(acc, a_ptrs, as_ptrs, w_ptrs, ws_ptrs, ws_native_ptrs, a_mask, n_mask2,
             A_MODE: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr, FAST: tl.constexpr):
    """acc + A_tile @ W_tile^T for one K tile (pointers already offset to the tile)."""
    if A_MODE == A_FP4_NATIVE:
        wb = tl.load(w_ptrs, mask=n_mask2, other=0)
        ab = tl.load(a_ptrs, mask=a_mask, other=0)
        sa = tl.load(as_ptrs, mask=a_mask, other=0).to(tl.float8e4nv, bitcast=True)
        sw = tl.load(ws_native_ptrs, mask=n_mask2, other=0).to(tl.float8e4nv, bitcast=True)
        acc = tl.dot_scaled(ab, sa, "e2m1", tl.trans(wb), sw, "e2m1", acc)
    else:
        sw = tl.load(ws_ptrs, mask=n_mask2, other=0)
        if FAST:
            wb = tl.load(w_ptrs, mask=n_mask2[:, :, None], other=0)
            w_lo, w_hi = dequant_pair_tile3_asm(wb, sw)
        else:
            wb = tl.load(w_ptrs, mask=n_mask2, other=0)
            w_lo, w_hi = dequant_pair_tile(wb, sw)
        if A_MODE == A_BF16 and not FAST:
            # the weight columns back in order (join), one dot: A goes from shared memory straight to the MMA
            a = tl.load(a_ptrs, mask=a_mask, other=0.0)
            w = tl.reshape(tl.join(w_lo, w_hi), (w_lo.shape[0], BLOCK_K))
            acc = _dot(a, tl.trans(w), acc, DOT_F32)
        else:
            if A_MODE == A_BF16:
                a = tl.load(a_ptrs, mask=a_mask, other=0.0)
                a_even, a_odd = tl.split(tl.reshape(a, (a.shape[0], BLOCK_K // 2, 2)))
            else:
                ab = tl.load(a_ptrs, mask=a_mask, other=0)
                sa = tl.load(as_ptrs, mask=a_mask, other=0)
                a_even, a_odd = dequant_pair_tile(ab, sa)
            acc = _dot(a_even, tl.trans(w_lo), acc, DOT_F32)
            acc = _dot(a_odd, tl.trans(w_hi), acc, DOT_F32)
    return acc


@triton.jit(do_not_specialize=["num_slots"])
def moe_nvfp4_gemm_kernel(
    a_ptr, as_ptr, a_gs_ptr, w_ptr, ws_ptr, w_gs_ptr, out_ptr, topk_w_ptr,
    sorted_ids_ptr, block_expert_ptr,
    N, K, num_slots, a_row_div, n_up,
    stride_am, stride_asm, stride_we, stride_wn, stride_wse, stride_wsn, stride_wgs, stride_om,
    A_MODE: tl.constexpr, FUSE_SILU: tl.constexpr, MUL_ROUTING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr = False,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(sorted_ids_ptr + offs_m)
    m_mask = slot < num_slots
    a_row = (slot // a_row_div).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    KB: tl.constexpr = BLOCK_K // 2
    offs_kb = tl.arange(0, KB)

    if A_MODE == A_BF16:
        a_ptrs = a_ptr + a_row[:, None] * stride_am + tl.arange(0, BLOCK_K)[None, :]
        as_ptrs = a_ptrs  # unused
        a_step = BLOCK_K
    else:
        a_ptrs = a_ptr + a_row[:, None] * stride_am + offs_kb[None, :]
        if A_MODE == A_FP4_NATIVE:
            as_ptrs = as_ptr + a_row[:, None] * stride_asm + tl.arange(0, BLOCK_K // 16)[None, :]
        else:
            as_ptrs = as_ptr + a_row[:, None] * stride_asm + tl.arange(0, KB // 8)[None, :]
        a_step = KB
    w_rows = w_ptr + expert * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    ws_rows = ws_ptr + expert * stride_wse + offs_n[:, None].to(tl.int64) * stride_wsn
    if not FAST:
        wg_ptrs = w_rows + offs_kb[None, :]
    else:
        offs_g = tl.arange(0, KB // 8)
        wg_ptrs = w_rows[:, :, None] + (offs_g[None, :, None] * 8 + tl.arange(0, 8)[None, None, :])
    wsg_ptrs = ws_rows + tl.arange(0, KB // 8)[None, :]
    wsg_native = ws_rows + tl.arange(0, BLOCK_K // 16)[None, :]
    up_w = n_up * stride_wn
    up_s = n_up * stride_wsn
    a_mask = m_mask[:, None]
    n_mask2 = n_mask[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        kt = k // BLOCK_K
        acc = _partial(acc, a_ptrs + kt * a_step, as_ptrs + kt * (BLOCK_K // 16),
                       wg_ptrs + kt * KB, wsg_ptrs + kt * (BLOCK_K // 16), wsg_native + kt * (BLOCK_K // 16),
                       a_mask, n_mask2, A_MODE, BLOCK_K, INTERPRETED, FAST)
        if FUSE_SILU:
            acc_u = _partial(acc_u, a_ptrs + kt * a_step, as_ptrs + kt * (BLOCK_K // 16),
                             wg_ptrs + up_w + kt * KB, wsg_ptrs + up_s + kt * (BLOCK_K // 16),
                             wsg_native + up_s + kt * (BLOCK_K // 16), a_mask, n_mask2, A_MODE, BLOCK_K, INTERPRETED, FAST)

    w_gs = tl.load(w_gs_ptr + expert * stride_wgs)
    if A_MODE == A_BF16:
        alpha = E2M1_F16_SHIFT / w_gs
    elif A_MODE == A_FP4_DEQUANT:
        alpha = E2M1_F16_SHIFT_SQ / (w_gs * tl.load(a_gs_ptr))
    else:
        alpha = 1.0 / (w_gs * tl.load(a_gs_ptr))
    acc = acc * alpha
    if FUSE_SILU:
        up = acc_u * alpha
        acc = acc / (1.0 + tl.exp(-acc)) * up
    if MUL_ROUTING:
        rw = tl.load(topk_w_ptr + slot, mask=m_mask, other=0.0).to(tl.float32)
        acc = acc * rw[:, None]
    if INTERPRETED and out_ptr.dtype.element_ty == tl.bfloat16:
        acc = _round_bf16_rne(acc)
    out_ptrs = out_ptr + slot.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])
