"""W4A16 decode: one token row per program, NVFP4 weights from :mod:`.prepack`, CUDA-core FMAs.

At decode sizes (T <= 64 with E = 512, k = 10: about one row per active expert) an MMA tile of 16
rows computes 15 padding rows, and the MMA kernel's cost is the dequantization plus moving the
dequantized tile into the MMA operand layout (notes/triton_kernels.md: ~14 instructions per
weight element, issue-bound). This kernel instead streams the weight rows once per token row and
does the dot product on the CUDA cores, with no layout conversion:

    out[slot, n] = alpha_e * sum_b SF[n, b] * sum_{j in block b} (e2m1(q[n, j]) * 2**-6) * a[j]

with ``alpha_e = 2**6 / gs_e`` (:data:`.prepack.DECODE_SHIFT`). Per int32 word of 8 codes (one
register) the GPU path (``FAST``, inline PTX, sm_89+) does:

- 7 integer ops turning the 8 E2M1 nibbles into 8 E4M3 bytes: code ``s|m`` (sign, 3-bit
  magnitude) becomes the E4M3 pattern ``s<<7 | m<<2``, which is exactly ``e2m1 * 2**-6``
  (E2M1 and E4M3 share the mantissa-on-top layout; E4M3's denormal 2**-9 grid holds 0.5 * 2**-6);
  low nibbles and high nibbles of the 4 bytes each give 4 bytes in one register;
- 4 ``cvt.rn.f16x2.e4m3x2`` (2 values each, exact) and 8 ``cvt.f32.f16`` (exact);
- 8 fp32 FMAs with the activations (bf16 -> fp32 once per thread and column, shared by the rows
  the thread holds), then one FMA with the block scale (E4M3 -> f16 -> f32, exact).

That is about 3.6 instructions per weight element against ~14 for the MMA kernel's dequant. The
portable path (``FAST=False``: the CPU interpreter, any other target) computes the same values
with Triton integer and float ops (the fp16-bit decode of :mod:`.nvfp4_tl`) in the same order.

Rows: w13 (``FUSE_SILU``) takes ``BLOCK_N // 2`` gate rows ``[n]`` and the matching up rows
``[n_up + n]`` in one tile and writes ``silu(gate) * up`` in bf16; w2 (``MUL_ROUTING``) multiplies
by the slot's routing weight and writes fp32 per slot (the caller sums a token's k slots).
Slots: ``SORTED=False`` takes slot ``pid_m`` and its expert from ``topk_ids`` directly (no sort
launch: the fewest launches for T <= 16); ``SORTED=True`` takes slot ``sorted_ids[pid_m]`` and
``block_expert[pid_m]`` from :func:`.moe_sort.moe_sort` with BLOCK_M = 1, so the rows of one
expert run back to back and its weights are re-read from L2, not DRAM.

Ids outside ``[0, E)`` (``SORTED=False``, issue 32): the slot loads no weights (its rows are masked,
expert 0's address) and writes 0; the w13 launch (``FUSE_SILU``) adds one to ``err_ptr`` per such slot
(from its ``pid_n == 0`` program), the w2 launch does not count again. Sorted slots come from
:func:`.moe_sort.moe_sort`, which drops them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .moe_gemm import INTERPRETED, _round_bf16_rne

#: fp16-bit decode (``(c&8)<<12 | (c&7)<<9`` = e2m1 * 2**-14) times 2**8 = e2m1 * 2**-6, the GPU path's value
F16_DECODE_TO_DECODE_SHIFT: tl.constexpr = tl.constexpr(256.0)

_WORD_DOT_ASM = tl.constexpr("""
{
.reg .b32 lo, hi, t, u, h;
.reg .b16 x0, x1, y0, y1;
.reg .f32 f0, f1, s, sf;
shl.b32 t, $1, 2; and.b32 t, t, 0x1C1C1C1C; shl.b32 u, $1, 4; and.b32 u, u, 0x80808080; or.b32 lo, t, u;
shr.b32 t, $1, 2; and.b32 t, t, 0x1C1C1C1C; and.b32 u, $1, 0x80808080; or.b32 hi, t, u;
mov.b32 {x0, x1}, lo;
cvt.rn.f16x2.e4m3x2 h, x0; mov.b32 {y0, y1}, h; cvt.f32.f16 f0, y0; cvt.f32.f16 f1, y1;
mul.rn.f32 s, f0, $3; fma.rn.f32 s, f1, $5, s;
cvt.rn.f16x2.e4m3x2 h, x1; mov.b32 {y0, y1}, h; cvt.f32.f16 f0, y0; cvt.f32.f16 f1, y1;
fma.rn.f32 s, f0, $7, s; fma.rn.f32 s, f1, $9, s;
mov.b32 {x0, x1}, hi;
cvt.rn.f16x2.e4m3x2 h, x0; mov.b32 {y0, y1}, h; cvt.f32.f16 f0, y0; cvt.f32.f16 f1, y1;
fma.rn.f32 s, f0, $4, s; fma.rn.f32 s, f1, $6, s;
cvt.rn.f16x2.e4m3x2 h, x1; mov.b32 {y0, y1}, h; cvt.f32.f16 f0, y0; cvt.f32.f16 f1, y1;
fma.rn.f32 s, f0, $8, s; fma.rn.f32 s, f1, $10, s;
cvt.u16.u32 x0, $2; cvt.rn.f16x2.e4m3x2 h, x0; mov.b32 {y0, y1}, h; cvt.f32.f16 sf, y0;
fma.rn.f32 $0, s, sf, $11;
}
""")


@triton.jit
def _e2m1_x64(q, J: tl.constexpr):
    """Code ``J`` (bits 4J..4J+3) of each int32 word -> fp32 ``e2m1 * 2**-6`` (exact)."""
    c = (q >> (4 * J)) & 0xF
    bits = ((c & 8) << 12) | ((c & 7) << 9)
    return bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * F16_DECODE_TO_DECODE_SHIFT


@triton.jit
def word_dot(q, sc, a0, a1, a2, a3, a4, a5, a6, a7, acc, FAST: tl.constexpr):
    """``acc + SF(sc) * sum_j e2m1(code j of q) * 2**-6 * a_j`` elementwise over int32 words ``q``.

    ``sc``: the words' E4M3 scale bytes (int32); ``a0..a7``: fp32 activations of elements 0..7.
    Summation order (both paths): elements 0, 2, 4, 6, 1, 3, 5, 7, then one FMA with the scale."""
    if FAST:
        return tl.inline_asm_elementwise(_WORD_DOT_ASM, "=f,r,r,f,f,f,f,f,f,f,f,f",
                                         [q, sc, a0, a1, a2, a3, a4, a5, a6, a7, acc],
                                         dtype=tl.float32, is_pure=True, pack=1)
    s = _e2m1_x64(q, 0) * a0
    s += _e2m1_x64(q, 2) * a2
    s += _e2m1_x64(q, 4) * a4
    s += _e2m1_x64(q, 6) * a6
    s += _e2m1_x64(q, 1) * a1
    s += _e2m1_x64(q, 3) * a3
    s += _e2m1_x64(q, 5) * a5
    s += _e2m1_x64(q, 7) * a7
    sf = sc.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return acc + s * sf


@triton.jit(do_not_specialize=["num_slots"])
def moe_w4a16_decode_kernel(
    a_ptr, w_ptr, ws_ptr, alpha_ptr, out_ptr, topk_w_ptr, expert_ptr, slot_ptr,
    N, KW, num_slots, a_row_div, n_up,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_om, err_ptr, num_experts,
    FUSE_SILU: tl.constexpr, MUL_ROUTING: tl.constexpr, SORTED: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr, FAST: tl.constexpr, DEPTH: tl.constexpr = 1,
):
    """Grid (cdiv(N, outputs per program), slots). ``w_ptr``: int32 words [E, N_w, KW];
    ``ws_ptr``: uint8 scales [E, N_w, KW/2]; ``KW`` a multiple of ``BLOCK_KW`` (module docstring)."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    if SORTED:
        slot = tl.load(slot_ptr + pid_m)
    else:
        slot = pid_m
    expert = tl.load(expert_ptr + pid_m)
    if not SORTED:  # topk_ids: an id outside [0, E) is no expert (masked rows, counted once by w13)
        bad = (expert < 0) | (expert >= num_experts)
        if FUSE_SILU:
            tl.atomic_add(err_ptr, 1, mask=bad & (pid_n == 0))
        expert = tl.where(bad, 0, expert)
    if expert < 0:
        return
    expert = expert.to(tl.int64)
    a_row = (slot // a_row_div).to(tl.int64)
    r = tl.arange(0, BLOCK_N)
    if FUSE_SILU:
        HALF: tl.constexpr = BLOCK_N // 2
        n_out = pid_n * HALF + (r % HALF)
        rows = n_out + (r // HALF) * n_up
    else:
        n_out = pid_n * BLOCK_N + r
        rows = n_out
    if SORTED:
        row_ok = (n_out < N)[:, None]
    else:  # no weight row of a slot without an expert is read (the stores still write its zeros)
        row_ok = (n_out < tl.where(bad, 0, N))[:, None]
    w_rows = w_ptr + expert * stride_we + rows.to(tl.int64)[:, None] * stride_wn
    s_rows = ws_ptr + expert * stride_se + rows.to(tl.int64)[:, None] * stride_sn
    offs_w = tl.arange(0, BLOCK_KW)
    a_base = a_ptr + a_row * stride_am
    acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.float32)
    # software pipelining by hand: the next DEPTH tiles' codes and scales are in flight while this
    # tile is converted and multiplied (one load batch per iteration otherwise waits a full
    # DRAM latency: measured 20% of copy bandwidth without it, 31% with DEPTH=1)
    q = tl.load(w_rows + offs_w[None, :], mask=row_ok, other=0)
    sc = tl.load(s_rows + (offs_w // 2)[None, :], mask=row_ok, other=0)
    if DEPTH == 2:
        more1 = row_ok & (BLOCK_KW + offs_w < KW)[None, :]
        q1 = tl.load(w_rows + (BLOCK_KW + offs_w)[None, :], mask=more1, other=0)
        sc1 = tl.load(s_rows + ((BLOCK_KW + offs_w) // 2)[None, :], mask=more1, other=0)
    for kw in range(0, KW, BLOCK_KW):
        nxt = kw + DEPTH * BLOCK_KW + offs_w
        more = row_ok & (nxt < KW)[None, :]
        q_next = tl.load(w_rows + nxt[None, :], mask=more, other=0)
        sc_next = tl.load(s_rows + (nxt // 2)[None, :], mask=more, other=0)
        ap = a_base + (kw + offs_w) * 8
        a0 = tl.load(ap + 0).to(tl.float32)[None, :]
        a1 = tl.load(ap + 1).to(tl.float32)[None, :]
        a2 = tl.load(ap + 2).to(tl.float32)[None, :]
        a3 = tl.load(ap + 3).to(tl.float32)[None, :]
        a4 = tl.load(ap + 4).to(tl.float32)[None, :]
        a5 = tl.load(ap + 5).to(tl.float32)[None, :]
        a6 = tl.load(ap + 6).to(tl.float32)[None, :]
        a7 = tl.load(ap + 7).to(tl.float32)[None, :]
        acc = word_dot(q, sc.to(tl.int32), a0, a1, a2, a3, a4, a5, a6, a7, acc, FAST)
        if DEPTH == 2:
            q = q1
            sc = sc1
            q1 = q_next
            sc1 = sc_next
        else:
            q = q_next
            sc = sc_next
    res = tl.sum(acc, axis=1) * tl.load(alpha_ptr + expert)
    if FUSE_SILU:
        gate, up = tl.split(tl.trans(tl.reshape(res, (2, HALF))))
        val = gate / (1.0 + tl.exp(-gate)) * up
        offs = pid_n * HALF + tl.arange(0, HALF)
        if INTERPRETED and out_ptr.dtype.element_ty == tl.bfloat16:
            val = _round_bf16_rne(val)
        tl.store(out_ptr + slot.to(tl.int64) * stride_om + offs, val.to(out_ptr.dtype.element_ty), mask=offs < N)
    else:
        if MUL_ROUTING:
            res = res * tl.load(topk_w_ptr + slot).to(tl.float32)
        if INTERPRETED and out_ptr.dtype.element_ty == tl.bfloat16:
            res = _round_bf16_rne(res)
        tl.store(out_ptr + slot.to(tl.int64) * stride_om + n_out, res.to(out_ptr.dtype.element_ty), mask=n_out < N)
