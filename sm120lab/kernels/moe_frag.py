"""W4A16 MoE GEMM on tensor cores with weights pre-shuffled into MMA fragment order (decode and small T).

Per expert ``e`` and output row ``n`` (``alpha_e = 2**7 / gs_e``, :data:`.prepack.FRAG_SHIFT`):

    out[slot, n] = alpha_e * sum_k (e2m1(q[n, k]) * SF[n, k // 16] * 2**-7) * a[slot, k]

One warp owns one 16-row weight tile and runs ``mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32``
with the weights as the A operand (16 rows) and up to 8 slots' activations as B (8 columns), so
the output is computed transposed (``out^T = W a^T``). :func:`.prepack.canonical_to_frag` stores
each lane's A fragment of one MMA as one int32 word, so one 16-byte load brings a lane the codes of
4 MMAs, and no shared memory or shuffle sits between the load and the tensor core. Per word (8
weights) the inline PTX does:

- 9 integer instructions: ``R_r = rotr(word, r) & 0x81C081C0`` gives the bf16x2 pattern
  ``sign<<15 | magnitude<<6`` of two codes, i.e. ``e2m1 * 2**-126`` exactly (codes 0 and 0.5 are
  bf16 subnormals);
- the two block scales, once per lane and chunk (a lane's 4 words share one scale block,
  :mod:`.prepack`): ``cvt.rn.f16x2.e4m3x2`` (exact), ``>> 3`` (bf16 bits of ``SF * 2**-112``),
  ``+ 231 << 7`` (``SF * 2**119``), two ``prmt`` to broadcast each row's scale;
- 4 ``mul.rn.bf16x2``: ``e2m1 * 2**-126 * SF * 2**119 = e2m1 * SF * 2**-7``, exact in bf16 (at most
  6 significant bits, smallest 2**-17);
- 1 ``mma.sync``: exact products, fp32 accumulation.

In the compiled K loop (sm_90 and sm_120 SASS, ``sm120lab dev kernel-aot``) that is 2.5-2.7
instructions per weight element, all loads included, against 5.4 for :mod:`.moe_decode` and ~14 for
the MMA kernel's dequantization (notes/triton_kernels.md). Inline PTX is warp-collective here, so the
kernel depends on how Triton lays a 1-D tensor over threads: element ``i`` of an ``R``-element
int32 tensor loaded 16 bytes at a time sits in thread ``(i // 4) % (32 * num_warps)``, register
``i % 4`` (repeats for larger R). Every array handed to the asm is built from the same index, so
they share that layout; the GPU check of ``sm120lab bench moe`` (poisoned outputs, fp64 reference)
fails loudly if a Triton version lays it out differently. sm_90+ (``mul.rn.bf16x2``,
``cvt.rn.f16x2.e4m3x2``); the same PTX is valid for sm_120/121 (unverified on SM120 hardware).

Index of element ``i`` (``R = TILES * num_warps * 128``): ``j = i % 4`` (the lane's word, one MMA,
:mod:`.prepack`), ``lane = i // 4 % 32``, ``w = i // 128 % num_warps`` (warps split K: chunk ``it * W + w``),
``u = i // (128 W)`` (tile). w13 (``FUSE_SILU``): tiles ``[0, TILES/2)`` are gate rows,
``[TILES/2, TILES)`` the matching up rows, the epilogue writes ``silu(gate) * up`` in bf16.
w2 (``MUL_ROUTING``): multiplies by the slot's routing weight, writes fp32 per slot.

Columns (``CG``, the column groups of one program): 0 = one slot per program (every column the same
activation row; the fewest launches for small T); 1, 2 or 4 = the ``8 * CG`` slots of one block of
:func:`.moe_sort.moe_sort`, all routed to one expert, so each weight word is read and dequantized once
for ``CG`` MMAs of 8 slots each: the words are dequantized once (one asm block), then one asm block of 4
MMAs per group (``sm120lab dev kernel-aot --same-sass-as`` pins every config's SASS digest; the table
records it).

Small T: :func:`moe_w4a16_frag_w2sum_kernel` runs w2 and the sum over a token's k choices in one
launch (bf16 out).

:func:`emulate_word` is the same recipe in torch (bit for bit, CPU), used by the tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .id_errors import counter_for
from .plan import frag_supported  # noqa: F401  (re-exported: the gate lives in .plan)
from .prepack import FRAG_MASK, FRAG_R3_ROT, FRAG_R3_ROT_SEL, FRAG_R3_SELECT, FRAG_ROT

#: bf16 exponent offset turning the bf16 bits of SF * 2**-112 into SF * 2**119 (231 << 7, both halves)
SCALE_BIAS = (231 << 7) | (231 << 23)

_SCALE_ASM = tl.constexpr(f"""
{{
.reg .b32 s;
.reg .b16 sl, sh;
mov.b32 {{sl, sh}}, $2;
cvt.rn.f16x2.e4m3x2 s, sl;
shr.b32 s, s, 3; add.u32 s, s, {SCALE_BIAS:#x};
prmt.b32 $0, s, s, 0x1010; prmt.b32 $1, s, s, 0x3232;
}}
""")

def _dequant_word_ptx(q: str, r: tuple[str, str, str, str], t: str) -> str:
    """PTX for one word ``q``: the 4 A registers ``r`` as bf16x2 ``e2m1 * 2**-126`` bit patterns (module
    docstring; the caller multiplies by the scales). ``x`` and ``y`` are scratch; R3's select goes through
    ``t`` (``r[3]`` itself when it is a scratch register, ``y`` when it is an asm output)."""
    m = f"{FRAG_MASK:#x}"
    return (f"and.b32 {r[0]}, {q}, {m};\n"
            f"shf.r.wrap.b32 x, {q}, {q}, {FRAG_ROT[1]}; and.b32 {r[1]}, x, {m};\n"
            f"shf.r.wrap.b32 x, {q}, {q}, {FRAG_ROT[2]}; and.b32 {r[2]}, x, {m};\n"
            f"shf.r.wrap.b32 x, {q}, {q}, {FRAG_R3_ROT}; shf.r.wrap.b32 y, {q}, {q}, {FRAG_R3_ROT_SEL};\n"
            f"lop3.b32 {t}, y, x, {FRAG_R3_SELECT:#x}, 0xE4; and.b32 {r[3]}, {t}, {m};\n")


def _dequant_asm() -> str:
    """4 words (``$16..$19``) -> register r of word j in ``$(4r + j)``; scales ``$20`` / ``$24``."""
    body = ""
    for j in range(4):
        r = tuple(f"${4 * i + j}" for i in range(4))
        body += _dequant_word_ptx(f"${16 + j}", r, t="y")
        body += (f"mul.rn.bf16x2 {r[0]}, {r[0]}, $20; mul.rn.bf16x2 {r[2]}, {r[2]}, $20;\n"
                 f"mul.rn.bf16x2 {r[1]}, {r[1]}, $24; mul.rn.bf16x2 {r[3]}, {r[3]}, $24;\n")
    return "\n{\n.reg .b32 x, y;\n" + body + "}\n"


def _mma4_asm() -> str:
    """4 MMAs on dequantized registers ``$4..$19`` (word j: ``$4+j, $8+j, $12+j, $16+j``), B ``$20..$23``,
    into ``$0..$3`` (C in ``$24..$27``)."""
    body = ""
    for j in range(4):
        cin = "$24, $25, $26, $27" if j == 0 else "$0, $1, $2, $3"
        body += (f"mov.b64 {{b0, b1}}, ${20 + j};\n"
                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, "
                 f"{{${4 + j}, ${8 + j}, ${12 + j}, ${16 + j}}}, {{b0, b1}}, {{{cin}}};\n")
    return "\n{\n.reg .b32 b0, b1;\n" + body + "}\n"


def _mma_ld_asm(tiles: int = 2) -> str:
    """``tiles`` weight tiles' 4 MMAs each (pack ``P = 4 * tiles``: elements ``4u..4u+3`` are tile u's words;
    dequantized A in ``$P..$5P-1``, register r of element e in ``$(P + P r + e)``) on ONE load of the lane's
    activations: 32 bytes at the address of element 0 (``$5P``), zeros where element 0's mask (``$6P``) is 0;
    accumulators in ``$7P..$8P-1``, out ``$0..$P-1``. The lane's 8 activation words are the B operands of its 4
    MMAs, whichever weight tile they multiply, so one load serves every tile."""
    p = 4 * tiles
    body = (f"setp.ne.b32 p, ${6 * p}, 0;\n"
            "mov.b32 x0, 0; mov.b32 x1, 0; mov.b32 x2, 0; mov.b32 x3, 0;\n"
            "mov.b32 x4, 0; mov.b32 x5, 0; mov.b32 x6, 0; mov.b32 x7, 0;\n"
            f"@p ld.global.v4.b32 {{x0, x1, x2, x3}}, [${5 * p}];\n"
            f"@p ld.global.v4.b32 {{x4, x5, x6, x7}}, [${5 * p}+16];\n")
    for u in range(tiles):
        for j in range(4):
            cin = ", ".join(f"${7 * p + 4 * u + i}" for i in range(4)) if j == 0 else ", ".join(
                f"${4 * u + i}" for i in range(4))
            e = 4 * u + j
            body += ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {" + ", ".join(f"${4 * u + i}" for i in range(4))
                     + "}, {" + ", ".join(f"${p + p * r + e}" for r in range(4)) + f"}}, {{x{2 * j}, x{2 * j + 1}}}, {{{cin}}};\n")
    return "\n{\n.reg .pred p;\n.reg .b32 x0, x1, x2, x3, x4, x5, x6, x7;\n" + body + "}\n"


_DEQUANT_ASM = tl.constexpr(_dequant_asm())
_MMA4_ASM = tl.constexpr(_mma4_asm())
_MMA8_LD_ASM = tl.constexpr(_mma_ld_asm(2))
_MMA16_LD_ASM = tl.constexpr(_mma_ld_asm(4))


@triton.jit
def _frag_dequant(q, sg, sg8):
    """A lane's 4 words -> the 4 A registers of each word's MMA (bf16x2 ``e2m1 * SF * 2**-7``):
    (R0, R1, R2, R3), element j of ``R_r`` = register r of word j."""
    return tl.inline_asm_elementwise(_DEQUANT_ASM, "=r," * 16 + "r," * 11 + "r", [q, sg, sg8],
                                     dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=4)


@triton.jit
def _frag_mma_regs(r0, r1, r2, r3, b, c):
    """4 x mma.m16n8k16 (one per word j of the lane) on dequantized A registers into one accumulator ``c``."""
    return tl.inline_asm_elementwise(_MMA4_ASM, "=f,=f,=f,=f," + "r," * 16 + "l,l,l,l,f,f,f,f",
                                     [r0, r1, r2, r3, b, c], dtype=tl.float32, is_pure=True, pack=4)


@triton.jit
def _frag_mma_ld2(r0, r1, r2, r3, a, ok, c):
    """Two tiles (``TILES`` = 2) x 4 mma.m16n8k16 on dequantized A registers, their activations loaded once per lane
    inside the asm (:func:`_mma_ld_asm`): ``a`` the int64 addresses of the activations, ``ok`` their int32 masks
    (only element 0 of each 8 is read)."""
    return tl.inline_asm_elementwise(_MMA8_LD_ASM, "=f," * 8 + "r," * 32 + "l," * 8 + "r," * 8 + "f," * 7 + "f",
                                     [r0, r1, r2, r3, a, ok, c], dtype=tl.float32, is_pure=True, pack=8)


@triton.jit
def _frag_mma_ld4(r0, r1, r2, r3, a, ok, c):
    """:func:`_frag_mma_ld2` for four tiles (``TILES`` = 4, pack 16): 16 MMAs on one activation load per lane."""
    return tl.inline_asm_elementwise(_MMA16_LD_ASM, "=f," * 16 + "r," * 64 + "l," * 16 + "r," * 16 + "f," * 15 + "f",
                                     [r0, r1, r2, r3, a, ok, c], dtype=tl.float32, is_pure=True, pack=16)


@triton.jit
def _frag_mma_ld(r0, r1, r2, r3, a, ok, c, TILES: tl.constexpr):
    """``SHARE_B``: every weight tile of the lane multiplies one load of its activations (``TILES`` 2 or 4)."""
    tl.static_assert(TILES == 2 or TILES == 4, "SHARE_B: two or four weight tiles")
    if TILES == 2:
        return _frag_mma_ld2(r0, r1, r2, r3, a, ok, c)
    else:
        return _frag_mma_ld4(r0, r1, r2, r3, a, ok, c)


@triton.jit
def _frag_scales(sc):
    """int32 (low 16 bits: E4M3 bytes of rows g, g+8) -> bf16x2 (SF_g, SF_g) * 2**119, (SF_g8, SF_g8) * 2**119."""
    return tl.inline_asm_elementwise(_SCALE_ASM, "=r,=r,r", [sc], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def _frag_mma(q, sg, sg8, b, c):
    """A lane's 4 words (4 consecutive elements): dequantized (:func:`_frag_dequant`), then 4 x mma.m16n8k16
    into one accumulator. ``c`` holds the C fragment (c0..c3) in its 4 elements; ``sg``/``sg8``: the lane's
    bf16x2 scales; ``b``: int64 = 4 bf16."""
    r0, r1, r2, r3 = _frag_dequant(q, sg, sg8)
    return _frag_mma_regs(r0, r1, r2, r3, b, c)


@triton.jit
def _frag_lanes(pid_n, up_tiles, FUSE_SILU: tl.constexpr, TILES: tl.constexpr, WARPS: tl.constexpr,
                OUT_T: tl.constexpr):
    """The index of a program's ``R = TILES * WARPS * 128`` elements (module docstring):
    ``(i, j, lane, w, g, t, tile)`` with ``g = lane // 4``, ``t = lane % 4`` and ``tile`` the weight
    tile (w13: gate tiles then the matching up tiles ``up_tiles`` further)."""
    R: tl.constexpr = TILES * WARPS * 128
    i = tl.arange(0, R)
    lane = (i // 4) % 32
    u = i // (128 * WARPS)
    if FUSE_SILU:
        tile = pid_n * OUT_T + (u % OUT_T) + (u // OUT_T) * up_tiles
    else:
        tile = pid_n * TILES + u
    return i, i % 4, lane, (i // 128) % WARPS, lane // 4, lane % 4, tile


@triton.jit
def _frag_out_index(pid_n, OUT_T: tl.constexpr):
    """Output element of C-fragment entry ``e`` of lane ``lane`` in tile ``ol // 128``: ``(n, col)``,
    row ``n = 16 tile + lane // 4 + 8 (e // 2)``, column (slot in the group of 8) ``2 (lane % 4) + e % 2``."""
    ol = tl.arange(0, OUT_T * 128)
    o_e = ol % 4
    o_lane = (ol // 4) % 32
    return (pid_n * OUT_T + ol // 128) * 16 + o_lane // 4 + 8 * (o_e // 2), 2 * (o_lane % 4) + o_e % 2


@triton.jit
def _frag_group(a_ptr, slot_ptr, base, cg, g, t, j, pid_m, num_slots, a_row_div, stride_am, CG: tl.constexpr):
    """Activation pointers (int64 = 4 bf16) and mask of column group ``cg``: slot ``slot_ptr[base + 8 cg + g]``
    (``CG`` = 0: every column is slot ``pid_m``)."""
    if CG == 0:
        slot = tl.zeros_like(g) + pid_m
    else:
        slot = tl.load(slot_ptr + base + cg * 8 + g)
    return a_ptr + (slot // a_row_div).to(tl.int64) * stride_am + 4 * t + j, slot < num_slots


@triton.jit
def _frag_reduce(c, TILES: tl.constexpr, WARPS: tl.constexpr):
    """Sum the warps' partial C fragments: [TILES * WARPS * 128] -> [TILES * 128]."""
    return tl.reshape(tl.sum(tl.reshape(c, (TILES, WARPS, 128)), axis=1), (TILES * 128,))


@triton.jit
def _frag_epilogue(v, alpha, OUT_T: tl.constexpr, FUSE_SILU: tl.constexpr):
    """``v * alpha``; w13 (``FUSE_SILU``): ``silu(gate) * up`` of the gate and up halves."""
    v = v * alpha
    if FUSE_SILU:
        gate, up = tl.split(tl.trans(tl.reshape(v, (2, OUT_T * 128))))
        v = gate / (1.0 + tl.exp(-gate)) * up
    return v


@triton.jit
def _frag_store(v, out_ptr, topk_w_ptr, slot_ptr, base, cg, n, col, pid_m, N, num_slots, stride_om,
                MUL_ROUTING: tl.constexpr, OUT_T: tl.constexpr, CG: tl.constexpr):
    """Store column group ``cg``'s columns of ``v`` (w2: times the routing weight; ``CG`` = 0: column 0
    only, slot ``pid_m``)."""
    if CG == 0:
        slot = tl.zeros((OUT_T * 128,), tl.int32) + pid_m
        keep = col == 0
    else:
        slot = tl.load(slot_ptr + base + cg * 8 + col)
        keep = slot < num_slots
    if MUL_ROUTING:
        v = v * tl.load(topk_w_ptr + slot, mask=keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + slot.to(tl.int64) * stride_om + n, v.to(out_ptr.dtype.element_ty), mask=keep & (n < N))


@triton.jit
def _frag_chunk(q_base, s_base, a0, ok0, kn, KC):
    """K chunk ``kn`` of a lane (zeros past ``KC``): its weight words, scale pair and column group 0's activations."""
    okn = kn < KC
    return (tl.load(q_base + kn * 128, mask=okn, other=0), tl.load(s_base + kn * 32, mask=okn, other=0).to(tl.int32),
            tl.load(a0 + kn * 16, mask=ok0 & okn, other=0))


@triton.jit
def _frag_step(q, sc, b0, kc, KC, a1, a2, a3, ok1, ok2, ok3, c0, c1, c2, c3, CG: tl.constexpr):
    """One chunk of the ``PING`` loop: its words dequantized once, one MMA block per column group (group 0's
    activations ``b0`` travel with the chunk; groups 1-3 are loaded here, at chunk ``kc``)."""
    sg, sg8 = _frag_scales(sc)
    r0, r1, r2, r3 = _frag_dequant(q, sg, sg8)
    c0 = _frag_mma_regs(r0, r1, r2, r3, b0, c0)
    if CG > 1:
        kin = kc < KC
        c1 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a1 + kc * 16, mask=ok1 & kin, other=0), c1)
        if CG > 2:
            c2 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a2 + kc * 16, mask=ok2 & kin, other=0), c2)
            c3 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a3 + kc * 16, mask=ok3 & kin, other=0), c3)
    return c0, c1, c2, c3


@triton.jit(do_not_specialize=["num_slots"])
def moe_w4a16_frag_kernel(
    a_ptr, q_ptr, s_ptr, alpha_ptr, out_ptr, topk_w_ptr, expert_ptr, slot_ptr,
    N, KC, num_slots, a_row_div, up_tiles,
    stride_am, stride_qe, stride_se, stride_om, err_ptr, num_experts,
    FUSE_SILU: tl.constexpr, MUL_ROUTING: tl.constexpr,
    TILES: tl.constexpr, WARPS: tl.constexpr, OUT_T: tl.constexpr, CG: tl.constexpr, PING: tl.constexpr = 0,
    SHARE_B: tl.constexpr = False,
):
    """Grid (N / (16 * tiles per program), column groups). ``a_ptr``: the activations as int64
    (4 bf16) [rows, K/4], row stride ``stride_am`` in int64; ``q_ptr`` int32 / ``s_ptr`` int16:
    :attr:`.prepack.PackedNVFP4.frag_words` / ``frag_scales``; ``KC = K / 64``; ``OUT_T``: output tiles
    per program (TILES / 2 with FUSE_SILU).

    ``CG`` (column groups): 0 = one slot per program (``expert_ptr``: ``topk_ids`` flat); 1, 2 or 4 =
    one ``8 * CG``-slot block of ``moe_sort(ids, E, 8 * CG)`` per program (``expert_ptr``/``slot_ptr``:
    ``block_expert``/``sorted_ids``): each weight word is dequantized once for ``CG`` MMAs, one per group
    of 8 slots (separate 1-D tensors, so every operand of the asm keeps one layout).

    ``CG`` = 0, an id outside [0, E) (issue 32): the slot runs on expert 0's address with factor 0 (writes
    exactly 0); the w13 launch (``FUSE_SILU``) adds one to ``err_ptr`` per such slot (``pid_n == 0``).

    ``PING`` (0, 2 or 4): each loop step works on ``PING`` chunks held in their own registers, each with its
    weights, scales and column group 0's activations (groups 1-3 are loaded where they are used, as in the default
    loop), and loads each chunk's successor ``PING`` chunks ahead into the same
    registers, so the loop carries no copy. The default loop (0) carries one chunk ahead and copies it into the
    current chunk's registers at the end of each step, and that copy waits for the load just issued (ncu source
    counters on the H100, T = 1: 35% of the w13 kernel's stall samples on that one move; notes/triton_kernels.md,
    twelfth round). ptxas still issues a step's loads after its last MMA (sm_90 SASS, Triton 3.6), so a step
    waits once for ``PING`` chunks instead of once per chunk. Same products, same fp32 summation order."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    expert = tl.load(expert_ptr + pid_m).to(tl.int64)
    if CG == 0:  # topk_ids straight: an id outside [0, E) is no expert
        bad = (expert < 0) | (expert >= num_experts)
        if FUSE_SILU:
            tl.atomic_add(err_ptr, 1, mask=bad & (pid_n == 0))
        expert = tl.where(bad, 0, expert)
    if expert < 0:
        return
    i, j, lane, w, g, t, tile = _frag_lanes(pid_n, up_tiles, FUSE_SILU, TILES, WARPS, OUT_T)
    R: tl.constexpr = TILES * WARPS * 128
    base = pid_m * (8 * CG)
    a0, ok0 = _frag_group(a_ptr, slot_ptr, base, 0, g, t, j, pid_m, num_slots, a_row_div, stride_am, CG)
    if CG > 1:
        a1, ok1 = _frag_group(a_ptr, slot_ptr, base, 1, g, t, j, pid_m, num_slots, a_row_div, stride_am, CG)
    if CG > 2:
        a2, ok2 = _frag_group(a_ptr, slot_ptr, base, 2, g, t, j, pid_m, num_slots, a_row_div, stride_am, CG)
        a3, ok3 = _frag_group(a_ptr, slot_ptr, base, 3, g, t, j, pid_m, num_slots, a_row_div, stride_am, CG)
    q_base = q_ptr + expert * stride_qe + tile.to(tl.int64) * (KC * 128) + (i % 128)
    s_base = s_ptr + expert * stride_se + tile.to(tl.int64) * (KC * 32) + lane
    c0 = tl.zeros((R,), tl.float32)
    c1 = tl.zeros((R,), tl.float32)
    c2 = tl.zeros((R,), tl.float32)
    c3 = tl.zeros((R,), tl.float32)
    kc = w
    ok = kc < KC
    q = tl.load(q_base + kc * 128, mask=ok, other=0)
    sc = tl.load(s_base + kc * 32, mask=ok, other=0).to(tl.int32)
    if PING > 0:
        tl.static_assert(PING == 2 or PING == 4, "PING: 2 or 4 chunks per step")
        if CG < 2:  # groups 1-3 (loaded in place, each step) exist from CG = 2 and 4 on
            a1, ok1 = a0, ok0
        if CG < 4:
            a2, ok2, a3, ok3 = a0, ok0, a0, ok0
        ba = tl.load(a0 + kc * 16, mask=ok0 & ok, other=0)
        qb, scb, bb = _frag_chunk(q_base, s_base, a0, ok0, WARPS + w, KC)
        if PING == 4:
            qc, scc, bc = _frag_chunk(q_base, s_base, a0, ok0, 2 * WARPS + w, KC)
            qd, scd, bd = _frag_chunk(q_base, s_base, a0, ok0, 3 * WARPS + w, KC)
        for k0 in range(0, KC, PING * WARPS):  # chunks k0 + (0, 1, ...) * WARPS + w
            c0, c1, c2, c3 = _frag_step(q, sc, ba, k0 + w, KC, a1, a2, a3, ok1, ok2, ok3, c0, c1, c2, c3, CG)
            q, sc, ba = _frag_chunk(q_base, s_base, a0, ok0, k0 + PING * WARPS + w, KC)
            c0, c1, c2, c3 = _frag_step(qb, scb, bb, k0 + WARPS + w, KC, a1, a2, a3, ok1, ok2, ok3, c0, c1, c2, c3,
                                        CG)
            qb, scb, bb = _frag_chunk(q_base, s_base, a0, ok0, k0 + (PING + 1) * WARPS + w, KC)
            if PING == 4:
                c0, c1, c2, c3 = _frag_step(qc, scc, bc, k0 + 2 * WARPS + w, KC, a1, a2, a3, ok1, ok2, ok3, c0, c1,
                                            c2, c3, CG)
                qc, scc, bc = _frag_chunk(q_base, s_base, a0, ok0, k0 + 6 * WARPS + w, KC)
                c0, c1, c2, c3 = _frag_step(qd, scd, bd, k0 + 3 * WARPS + w, KC, a1, a2, a3, ok1, ok2, ok3, c0, c1,
                                            c2, c3, CG)
                qd, scd, bd = _frag_chunk(q_base, s_base, a0, ok0, k0 + 7 * WARPS + w, KC)
    else:
        for k0 in range(0, KC, WARPS):
            kn = k0 + WARPS + w
            okn = kn < KC
            q_next = tl.load(q_base + kn * 128, mask=okn, other=0)
            sc_next = tl.load(s_base + kn * 32, mask=okn, other=0).to(tl.int32)
            kc = k0 + w
            kin = kc < KC
            sg, sg8 = _frag_scales(sc)
            r0, r1, r2, r3 = _frag_dequant(q, sg, sg8)
            if SHARE_B:  # one activation load per lane for both tiles, inside the MMA asm
                c0 = _frag_mma_ld(r0, r1, r2, r3, (a0 + kc * 16).to(tl.int64, bitcast=True),
                                  (ok0 & kin).to(tl.int32), c0, TILES)
                if CG > 1:
                    c1 = _frag_mma_ld(r0, r1, r2, r3, (a1 + kc * 16).to(tl.int64, bitcast=True),
                                      (ok1 & kin).to(tl.int32), c1, TILES)
                if CG > 2:
                    c2 = _frag_mma_ld(r0, r1, r2, r3, (a2 + kc * 16).to(tl.int64, bitcast=True),
                                      (ok2 & kin).to(tl.int32), c2, TILES)
                    c3 = _frag_mma_ld(r0, r1, r2, r3, (a3 + kc * 16).to(tl.int64, bitcast=True),
                                      (ok3 & kin).to(tl.int32), c3, TILES)
            else:
                c0 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a0 + kc * 16, mask=ok0 & kin, other=0), c0)
                if CG > 1:
                    c1 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a1 + kc * 16, mask=ok1 & kin, other=0), c1)
                if CG > 2:
                    c2 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a2 + kc * 16, mask=ok2 & kin, other=0), c2)
                    c3 = _frag_mma_regs(r0, r1, r2, r3, tl.load(a3 + kc * 16, mask=ok3 & kin, other=0), c3)
            q = q_next
            sc = sc_next
    alpha = tl.load(alpha_ptr + expert)
    if CG == 0:
        alpha = tl.where(bad, 0.0, alpha)
    n, col = _frag_out_index(pid_n, OUT_T)
    v0 = _frag_epilogue(_frag_reduce(c0, TILES, WARPS), alpha, OUT_T, FUSE_SILU)
    _frag_store(v0, out_ptr, topk_w_ptr, slot_ptr, base, 0, n, col, pid_m, N, num_slots, stride_om,
                MUL_ROUTING, OUT_T, CG)
    if CG > 1:
        _frag_store(_frag_epilogue(_frag_reduce(c1, TILES, WARPS), alpha, OUT_T, FUSE_SILU), out_ptr, topk_w_ptr,
                    slot_ptr, base, 1, n, col, pid_m, N, num_slots, stride_om, MUL_ROUTING, OUT_T, CG)
    if CG > 2:
        _frag_store(_frag_epilogue(_frag_reduce(c2, TILES, WARPS), alpha, OUT_T, FUSE_SILU), out_ptr, topk_w_ptr,
                    slot_ptr, base, 2, n, col, pid_m, N, num_slots, stride_om, MUL_ROUTING, OUT_T, CG)
        _frag_store(_frag_epilogue(_frag_reduce(c3, TILES, WARPS), alpha, OUT_T, FUSE_SILU), out_ptr, topk_w_ptr,
                    slot_ptr, base, 3, n, col, pid_m, N, num_slots, stride_om, MUL_ROUTING, OUT_T, CG)


@triton.jit
def _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, ids_ptr, a_tok, q_off, s_off, slot0, c, w, ITERS, KC,
                 stride_qe, stride_se, stride_am, num_experts, TOPK: tl.constexpr, WARPS: tl.constexpr,
                 WITH_ACT: tl.constexpr):
    """Chunk ``c`` of the w2+sum loop (expert ``c // ITERS`` of the token, K chunk ``(c % ITERS) * WARPS + w``):
    its weight words and scale pair, and with ``WITH_ACT`` also its activations and the expert's factor
    ``alpha[e] * topk_w`` (else zeros, loaded where they are used); zeros past the end and for an id
    outside [0, E) (no weights read, factor 0)."""
    jn = c // ITERS
    kn = (c % ITERS) * WARPS + w
    e = tl.load(ids_ptr + slot0 + jn, mask=jn < TOPK, other=0).to(tl.int64)
    live = (jn < TOPK) & (e >= 0) & (e < num_experts)
    e = tl.where(live, e, 0)
    ok = (kn < KC) & live
    q = tl.load(q_ptr + e * stride_qe + q_off + kn * 128, mask=ok, other=0)
    sc = tl.load(s_ptr + e * stride_se + s_off + kn * 32, mask=ok, other=0).to(tl.int32)
    if WITH_ACT:
        b = tl.load(a_tok + jn * stride_am + kn * 16, mask=ok, other=0)
        f = tl.load(alpha_ptr + e, mask=live, other=0.0) * tl.load(topk_w_ptr + slot0 + jn, mask=live,
                                                                    other=0.0).to(tl.float32)
    else:
        b = tl.zeros(q.shape, tl.int64)
        f = 0.0
    return q, sc, b, f


@triton.jit
def _w2sum_fold(q, sc, b, f, c, total, cidx, ITERS):
    """Chunk ``cidx``'s MMAs into ``c``; after an expert's last chunk, ``total += c * f`` and ``c`` restarts."""
    sg, sg8 = _frag_scales(sc)
    c = _frag_mma(q, sg, sg8, b, c)
    if (cidx + 1) % ITERS == 0:
        total += c * f
        c = tl.zeros(c.shape, tl.float32)
    return c, total


@triton.jit
def moe_w4a16_frag_w2sum_kernel(
    a_ptr, q_ptr, s_ptr, alpha_ptr, out_ptr, topk_w_ptr, topk_ids_ptr,
    N, KC, stride_am, stride_qe, stride_se, stride_om, num_experts,
    TOPK: tl.constexpr, TILES: tl.constexpr, WARPS: tl.constexpr, PREFETCH: tl.constexpr = False,
    PING: tl.constexpr = 0,
):
    """w2 and the sum over a token's k choices in one launch (small T): program (tile group, token t)
    streams the w2 tiles of the token's ``TOPK`` experts one after another (the next chunk, also across
    experts, is already in flight while the current one is multiplied) and writes

        out[t, n] = sum_j topk_w[t, j] * alpha[e_j] * (W2[e_j] @ inter[t * TOPK + j])[n]

    in the output's dtype (bf16), with no fp32 per-slot buffer and no separate sum and cast. A choice whose
    id lies outside [0, E) adds 0 and reads no w2 weights (issue 32; the w13 launch counted it).

    ``PREFETCH``: the chunk in flight also carries its activations and the expert's factor, so no load in
    the loop waits on another load of the same step; else they are loaded where they are used. Which is
    faster depends on the shape (H200, one tile per warp, 4 routings per graph: 0.82-0.91x the time at
    qwen3.5, qwen3-next and H=7168/I=2048/E=256/k=8, 1.05x at qwen3-235b and gpt-oss;
    data/bench/aux/w2sum_ab_probe_h200_2026-12-03_2.jsonl), so it is a tile choice (``FragConfig``).

    ``PING`` (0, 2 or 4): ``PING`` chunks per loop step in their own registers, each carrying its activations and
    factor as with ``PREFETCH``, each reloaded ``PING`` chunks ahead (:func:`moe_w4a16_frag_kernel`'s ``PING``)."""
    pid_n = tl.program_id(0)
    tok = tl.program_id(1)
    R: tl.constexpr = TILES * WARPS * 128
    i, j, lane, w, g, t, tile = _frag_lanes(pid_n, 0, False, TILES, WARPS, TILES)
    ITERS = (KC + WARPS - 1) // WARPS
    q_off = tile.to(tl.int64) * (KC * 128) + (i % 128)
    s_off = tile.to(tl.int64) * (KC * 32) + lane
    slot0 = tok * TOPK
    a_tok = a_ptr + slot0.to(tl.int64) * stride_am + (4 * t + j)
    q, sc, b, f = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off, slot0, 0, w,
                               ITERS, KC, stride_qe, stride_se, stride_am, num_experts, TOPK, WARPS, PREFETCH)
    c = tl.zeros((R,), tl.float32)
    total = tl.zeros((R,), tl.float32)
    if PING > 0:
        tl.static_assert(PREFETCH, "PING carries activations and factors (PREFETCH)")
        tl.static_assert(PING == 2 or PING == 4, "PING: 2 or 4 chunks per step")
        qb, scb, bb, fb = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off, slot0,
                                       1, w, ITERS, KC, stride_qe, stride_se, stride_am, num_experts, TOPK, WARPS, True)
        if PING == 4:
            qc, scc, bc, fc = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                           slot0, 2, w, ITERS, KC, stride_qe, stride_se, stride_am, num_experts, TOPK,
                                           WARPS, True)
            qd, scd, bd, fd = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                           slot0, 3, w, ITERS, KC, stride_qe, stride_se, stride_am, num_experts, TOPK,
                                           WARPS, True)
        for it in range(0, TOPK * ITERS, PING):  # chunks it, it + 1, ... (past the end: zeros, factor 0)
            c, total = _w2sum_fold(q, sc, b, f, c, total, it, ITERS)
            q, sc, b, f = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off, slot0,
                                       it + PING, w, ITERS, KC, stride_qe, stride_se, stride_am, num_experts, TOPK,
                                       WARPS, True)
            c, total = _w2sum_fold(qb, scb, bb, fb, c, total, it + 1, ITERS)
            qb, scb, bb, fb = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                           slot0, it + PING + 1, w, ITERS, KC, stride_qe, stride_se, stride_am,
                                           num_experts, TOPK, WARPS, True)
            if PING == 4:
                c, total = _w2sum_fold(qc, scc, bc, fc, c, total, it + 2, ITERS)
                qc, scc, bc, fc = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                               slot0, it + 6, w, ITERS, KC, stride_qe, stride_se, stride_am,
                                               num_experts, TOPK, WARPS, True)
                c, total = _w2sum_fold(qd, scd, bd, fd, c, total, it + 3, ITERS)
                qd, scd, bd, fd = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                               slot0, it + 7, w, ITERS, KC, stride_qe, stride_se, stride_am,
                                               num_experts, TOPK, WARPS, True)
    else:
        for it in range(0, TOPK * ITERS):
            q_n, sc_n, b_n, f_n = _w2sum_chunk(q_ptr, s_ptr, alpha_ptr, topk_w_ptr, topk_ids_ptr, a_tok, q_off, s_off,
                                               slot0, it + 1, w, ITERS, KC, stride_qe, stride_se, stride_am,
                                               num_experts, TOPK, WARPS, PREFETCH)
            jc = it // ITERS
            if not PREFETCH:
                kc = (it % ITERS) * WARPS + w
                b = tl.load(a_tok + jc * stride_am + kc * 16, mask=kc < KC, other=0)
            sg, sg8 = _frag_scales(sc)
            c = _frag_mma(q, sg, sg8, b, c)
            if (it + 1) % ITERS == 0:  # the last chunk of expert jc: fold it in with its factor
                if not PREFETCH:
                    e_c = tl.load(topk_ids_ptr + slot0 + jc).to(tl.int64)
                    f = tl.load(alpha_ptr + e_c, mask=(e_c >= 0) & (e_c < num_experts), other=0.0) * tl.load(
                        topk_w_ptr + slot0 + jc).to(tl.float32)
                total += c * f
                c = tl.zeros((R,), tl.float32)
            q, sc, b, f = q_n, sc_n, b_n, f_n
    v = _frag_reduce(total, TILES, WARPS)
    n, col = _frag_out_index(pid_n, TILES)
    keep = col == 0
    tl.store(out_ptr + tok.to(tl.int64) * stride_om + n, v.to(out_ptr.dtype.element_ty), mask=keep & (n < N))


def emulate_word(q: torch.Tensor, sc: torch.Tensor) -> torch.Tensor:
    """The asm's weight recipe in torch, bit for bit: int32 words [...] and int16 scale pairs [...] ->
    fp32 [..., 8] weights ``x0..x7`` (``e2m1 * SF * 2**-7``; module docstring, :mod:`.prepack`)."""
    w = q.to(torch.int64) & 0xFFFFFFFF

    def rotr(v, r):
        return ((v >> r) | (v << (32 - r))) & 0xFFFFFFFF if r else v

    regs = [rotr(w, FRAG_ROT[0]) & FRAG_MASK, rotr(w, FRAG_ROT[1]) & FRAG_MASK, rotr(w, FRAG_ROT[2]) & FRAG_MASK]
    sel = torch.tensor(FRAG_R3_SELECT, dtype=torch.int64)
    regs.append(((rotr(w, FRAG_R3_ROT_SEL) & sel) | (rotr(w, FRAG_R3_ROT) & ~sel)) & FRAG_MASK)
    s16 = sc.to(torch.int64) & 0xFFFF
    sf = torch.stack((s16 & 0xFF, s16 >> 8), dim=-1).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    # bf16 bits of SF * 2**-112 (f16 bits >> 3), exponent + 231: exact for finite SF >= 0, SF * 2**119
    s_rows = sf.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF
    s_bits = (s_rows >> 3) + (231 << 7)
    s_val = _bf16_bits_to_f32(s_bits)  # [..., 2]: rows g, g + 8
    out = []
    for r, reg in enumerate(regs):
        lo, hi = reg & 0xFFFF, reg >> 16
        row_scale = s_val[..., 0] if r in (0, 2) else s_val[..., 1]
        for half in (lo, hi):
            prod = _bf16_bits_to_f32(half) * row_scale  # exact: the bf16 product has <= 6 significant bits
            out.append(prod)
    return torch.stack(out, dim=-1)


def _bf16_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    return (bits.to(torch.int32) << 16).view(torch.float32)


def launch_frag(a: torch.Tensor, w, out: torch.Tensor, topk_w: torch.Tensor, expert_ids: torch.Tensor,
                slot_ids: torch.Tensor, *, num_slots: int, a_row_div: int, fuse_silu: bool, mul_routing: bool,
                sorted_cols: bool, tiles: int, warps: int, cg: int = 0, id_errors: torch.Tensor | None = None,
                ping: int = 0, share_b: bool = False) -> None:
    """One fragment-kernel launch.

    Args:
        a: bf16 activations [rows, K] (hidden for w13: row = slot // a_row_div; the intermediate for w2).
        w: :class:`.prepack.PackedNVFP4` with ``frag_words``.
        out: [slots, N_out] (bf16 intermediate for w13, fp32 for w2).
        expert_ids / slot_ids: per column group, the expert (``topk_ids`` flat when not ``sorted_cols``,
            else ``block_expert``) and, when sorted, ``sorted_ids`` from ``moe_sort(ids, E, 8)``.
        tiles: 16-row tiles per program (w13: gate + up, even); warps: num_warps (split K).
        cg: column groups per program (:func:`moe_w4a16_frag_kernel`'s ``CG``): 0 with ``sorted_cols``
            means 1; 1, 2 or 4 need ``moe_sort(ids, E, 8 * cg)`` blocks in ``expert_ids`` / ``slot_ids``.
        id_errors: int32 [1] counter the unsorted w13 launch (``fuse_silu``) adds out-of-range ids to
            (None: :func:`.id_errors.id_error_counter` of the device).
        ping: 0, or 2 / 4 chunks per loop step (:func:`moe_w4a16_frag_kernel`'s ``PING``).
        share_b: the program's tiles (``tiles`` = 2 or 4, ``ping`` = 0) share one activation load per lane
            (``SHARE_B``).
    """
    e, n, k = w.shape
    if w.frag_words is None:
        raise ValueError("w has no fragment layout (N must be a multiple of 16 and K of 64; prepare with frag=True)")
    if a.dtype != torch.bfloat16 or a.shape[1] != k or a.stride(1) != 1 or a.stride(0) % 4:
        raise ValueError(f"a must be bf16 [rows, K={k}] with unit column stride, got {a.dtype} {tuple(a.shape)}")
    kc = k // 64
    n_out = n // 2 if fuse_silu else n
    out_t = tiles // 2 if fuse_silu else tiles
    groups = expert_ids.numel()
    grid = (triton.cdiv(n_out, 16 * out_t), groups)
    err = counter_for(a.device, id_errors)
    args = (a.view(torch.int64), w.frag_words, w.frag_scales, w.frag_alpha, out, topk_w, expert_ids, slot_ids,
            n_out, kc, num_slots, a_row_div, n_out // 16,
            a.stride(0) // 4, w.frag_words.stride(0), w.frag_scales.stride(0), out.stride(0), err, e)
    if cg not in (0, 1, 2, 4):
        raise ValueError(f"cg must be 0, 1, 2 or 4, got {cg}")
    if cg and not sorted_cols:
        raise ValueError("cg > 0 needs sorted columns (moe_sort blocks of 8 * cg)")
    if ping not in (0, 2, 4):
        raise ValueError(f"ping must be 0, 2 or 4, got {ping}")
    if n_out % (16 * out_t):
        raise ValueError(f"tiles={tiles}: the {'w13 intermediate' if fuse_silu else 'output'} size {n_out} must be a "
                         f"multiple of {16 * out_t} (16 rows per output tile)")
    if share_b and (tiles not in (2, 4) or ping):
        raise ValueError(f"share_b needs tiles=2 or 4 and ping=0, got tiles={tiles}, ping={ping}")
    moe_w4a16_frag_kernel[grid](*args, FUSE_SILU=fuse_silu, MUL_ROUTING=mul_routing, TILES=tiles, WARPS=warps,
                                OUT_T=out_t, CG=cg or int(sorted_cols), num_warps=warps, num_stages=1,
                                **({"PING": ping} if ping else {}), **({"SHARE_B": True} if share_b else {}))


def launch_frag_w2_sum(inter: torch.Tensor, w, out: torch.Tensor, topk_w: torch.Tensor, topk_ids: torch.Tensor, *,
                       tiles: int, warps: int, prefetch: bool = False, ping: int = 0) -> None:
    """w2 plus the k-sum (:func:`moe_w4a16_frag_w2sum_kernel`, its ``PREFETCH`` = ``prefetch``, ``PING`` = ``ping``;
    a tile's pair is ``FragConfig.w2sum_prefetch`` and ``FragConfig.PING``): inter bf16 [T*k, I] -> out [T, H]."""
    e, n, k = w.shape
    t, topk = topk_ids.shape
    if inter.dtype != torch.bfloat16 or inter.shape != (t * topk, k) or inter.stride(1) != 1 or inter.stride(0) % 4:
        raise ValueError(f"inter must be bf16 [T*k={t * topk}, I={k}], got {inter.dtype} {tuple(inter.shape)}")
    if ping not in (0, 2, 4):
        raise ValueError(f"ping must be 0, 2 or 4, got {ping}")
    if ping and not prefetch:
        raise ValueError("ping needs prefetch=True: a PING chunk carries its activations and factor "
                         "(FragConfig.w2sum_prefetch)")
    grid = (triton.cdiv(n, 16 * tiles), t)
    moe_w4a16_frag_w2sum_kernel[grid](
        inter.view(torch.int64), w.frag_words, w.frag_scales, w.frag_alpha, out, topk_w, topk_ids,
        n, k // 64, inter.stride(0) // 4, w.frag_words.stride(0), w.frag_scales.stride(0), out.stride(0), e,
        TOPK=topk, TILES=tiles, WARPS=warps, PREFETCH=bool(prefetch), num_warps=warps, num_stages=1,
        **({"PING": ping} if ping else {}))
