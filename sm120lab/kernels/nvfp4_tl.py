"""Triton device helpers for NVFP4 (E2M1 codes, E4M3 block scales), shared by the MoE kernels.

Decode of one E2M1 code ``c`` (bit 3 sign, bits 0-2 magnitude ``m``) without a lookup table:
the fp16 bit pattern ``(c & 8) << 12 | (c & 7) << 9`` puts ``m`` into fp16's exponent field
(2 bits) and top mantissa bit, which is exactly ``e2m1(c) * 2**-14`` (``m = 1`` lands on the fp16
subnormal ``2**-15``, the E2M1 subnormal 0.5 scaled). Conversion fp16 -> fp32 is exact, so

    e2m1(c) * SF * 2**-14  = f32(fp16_bits(c)) * f32(SF)        (exact in fp32 and in bf16:
                                                                  <= 6 significant bits)

and the caller multiplies its fp32 accumulator by ``2**14 / gs`` once per tile. Encode follows
``sm120lab.nvfp4.quantize`` operation for operation (fp32, IEEE division) so the W4A4 activation
quantizer is bit-exact with it.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: 2**14: the fp16-bit decode above yields e2m1 * 2**-14 (the GEMM's alpha multiplies it back)
E2M1_F16_SHIFT: tl.constexpr = tl.constexpr(16384.0)
#: 2**28: both operands fp16-bit decoded (W4A4 dequant), (2**14)**2
E2M1_F16_SHIFT_SQ: tl.constexpr = tl.constexpr(268435456.0)
#: 2**112: bf16(SF * 2**112) turns the bf16 pattern of e2m1 * 2**-126 into e2m1 * SF * 2**-14
BF16_DENORM_RESCALE: tl.constexpr = tl.constexpr(5.192296858534828e33)
#: 2**14 as a rounding constant: (v + 2**14) - 2**14 rounds v to the fp32 ulp at 2**14, 2**-9 =
#: E4M3's subnormal step
E4M3_SUBNORMAL_ROUNDER: tl.constexpr = tl.constexpr(16384.0)


@triton.jit
def e2m1_to_f32_scaled(code, scale_f32):
    """E2M1 codes (any int dtype, low 4 bits) times fp32 block scale -> fp32 ``e2m1*SF*2**-14`` (exact)."""
    c = code.to(tl.int16)
    bits = ((c & 8) << 12) | ((c & 7) << 9)
    v = bits.to(tl.float16, bitcast=True).to(tl.float32)
    return v * scale_f32


@triton.jit
def e4m3_bits_to_f32(sbits):
    """uint8 E4M3 bit patterns -> fp32 (exact)."""
    return sbits.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def dequant_pair_tile(b, s):
    """Packed bytes ``b`` [R, KB] (uint8) with per-16-element scales ``s`` [R, KB//8] (uint8 E4M3)
    -> (even, odd) element tiles [R, KB] in bf16, each ``e2m1*SF*2**-14`` (exact).

    Byte j holds element 2j (low nibble) and 2j+1 (high nibble); block scale j//8 covers both.
    """
    R: tl.constexpr = b.shape[0]
    KB: tl.constexpr = b.shape[1]
    sf = e4m3_bits_to_f32(s)
    sf = tl.reshape(tl.broadcast_to(sf[:, :, None], (R, KB // 8, 8)), (R, KB))
    lo = e2m1_to_f32_scaled(b & 0xF, sf).to(tl.bfloat16)
    hi = e2m1_to_f32_scaled(b >> 4, sf).to(tl.bfloat16)
    return lo, hi


@triton.jit
def e4m3_rne_f32(v):
    """Non-negative fp32 -> the nearest E4M3 value (ties to even, saturating at 448), as fp32.

    Done in fp32 bit arithmetic (keep 3 mantissa bits with RNE carry; fixed ulp 2**-9 below
    2**-6 by the add-and-subtract-2**14 trick) rather than by a cast, because Triton 3.9's
    interpreter mis-rounds fp32 -> fp8e4nv when rounding carries into the exponent
    (124.000008 -> 64 instead of 128). The result is exact, so the cast to fp8e4nv after it is too.
    """
    bits = v.to(tl.int32, bitcast=True)
    rb = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576
    normal = rb.to(tl.float32, bitcast=True)
    sub = (v + E4M3_SUBNORMAL_ROUNDER) - E4M3_SUBNORMAL_ROUNDER
    r = tl.where(v < 0.015625, sub, normal)
    return tl.minimum(r, 448.0)


_E2M1X4_TO_BF16_ASM = tl.constexpr("""
{
.reg .b32 t0, t1, a, b;
prmt.b32 t0, $4, 0, 0x4140;
prmt.b32 t1, $4, 0, 0x4342;
shl.b32 a, t0, 6;  and.b32 a, a, 0x01C001C0; shl.b32 b, t0, 12; and.b32 b, b, 0x80008000; or.b32 a, a, b;
mul.rn.bf16x2 $0, a, $5;
shl.b32 a, t1, 6;  and.b32 a, a, 0x01C001C0; shl.b32 b, t1, 12; and.b32 b, b, 0x80008000; or.b32 a, a, b;
mul.rn.bf16x2 $1, a, $6;
shl.b32 a, t0, 2;  and.b32 a, a, 0x01C001C0; shl.b32 b, t0, 8;  and.b32 b, b, 0x80008000; or.b32 a, a, b;
mul.rn.bf16x2 $2, a, $5;
shl.b32 a, t1, 2;  and.b32 a, a, 0x01C001C0; shl.b32 b, t1, 8;  and.b32 b, b, 0x80008000; or.b32 a, a, b;
mul.rn.bf16x2 $3, a, $6;
}
""")


@triton.jit
def dequant_pair_tile3_asm(b3, s):
    """:func:`dequant_pair_tile` in inline PTX on bytes loaded as [R, G, 8] (G = scale groups of
    8 bytes = 16 elements) with scales [R, G]; 4 bytes per register (sm_90+, GPU only).

    prmt spreads 2 bytes into the two 16-bit lanes; ``(nib & 7) << 6 | (nib & 8) << 12`` is the
    bf16 pattern of ``e2m1 * 2**-126`` (bf16 denormal for magnitude 1); one ``mul.rn.bf16x2`` by
    ``bf16(SF * 2**112)`` gives ``e2m1 * SF * 2**-14`` exactly (bf16 arithmetic keeps denormal
    inputs; PTX ISA mul.bf16x2, sm_90). Same values as :func:`dequant_pair_tile`."""
    R: tl.constexpr = b3.shape[0]
    G: tl.constexpr = b3.shape[1]
    sf = (e4m3_bits_to_f32(s) * BF16_DENORM_RESCALE).to(tl.bfloat16)  # SF * 2**112, exact
    sfb = tl.broadcast_to(sf[:, :, None], b3.shape)
    lo, hi = tl.inline_asm_elementwise(_E2M1X4_TO_BF16_ASM, "=r,=r,=r,=r,r,r,r", [b3, sfb],
                                       dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    return tl.reshape(lo, (R, G * 8)), tl.reshape(hi, (R, G * 8))


@triton.jit
def e2m1_encode_f32(x):
    """fp32 -> E2M1 codes (int32 0..15): round to nearest even, saturate to +-6, sign of zero kept.

    Same thresholds as ``sm120lab.nvfp4.e2m1.e2m1_encode`` (ties at 0.75, 1.75, 3.5 round up).
    """
    a = tl.abs(x)
    m = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
         + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
         + (a > 5.0).to(tl.int32))
    sign = (x.to(tl.int32, bitcast=True) < 0).to(tl.int32)
    return m | (sign << 3)


#: launch options of :func:`nvfp4_quantize_rows_kernel` (its bit-exactness needs them)
QUANTIZE_LAUNCH_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def nvfp4_quantize_rows_kernel(x_ptr, gs_ptr, q_ptr, s_ptr, n_cols, stride_x, stride_q, stride_s,
                               BLOCK_G: tl.constexpr):
    """One program: row ``pid0``, ``BLOCK_G`` 16-element blocks starting at ``pid1*BLOCK_G``.

    x [R, K] (bf16/fp32) with a static fp32 global scale gs (pointer to a scalar) -> codes
    q [R, K/2] uint8 and scales s [R, K/16] uint8 (E4M3 bits). Formula (sm120lab.nvfp4.quantize):
    SF = e4m3_rn_satfinite(gs * (amax_b * f32(1/6))); s = 1/(SF * (1/gs)) (0 if SF == 0);
    q = e2m1_rn(x * s).

    Bit-exact with it only when launched with :data:`QUANTIZE_LAUNCH_OPTIONS` (no fp fusion: otherwise
    ``gs * t + 2**14`` in :func:`e4m3_rne_f32` becomes one fma) and with correctly rounded divisions
    (``tl.div_rn``; Triton 3.6 lowers ``tl.fdiv(..., ieee_rounding=True)`` to the approximate
    ``div.full.f32``, which put ``x * s`` one ulp below a rounding tie in 51 of 24,576 codes on the H200,
    ``data/correctness/w4a4_replay_h200_2026-12-03.json``).
    """
    row = tl.program_id(0).to(tl.int64)
    g0 = tl.program_id(1) * BLOCK_G
    offs_g = g0 + tl.arange(0, BLOCK_G)
    offs_e = tl.arange(0, 16)
    cols = offs_g[:, None] * 16 + offs_e[None, :]
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    gs = tl.load(gs_ptr).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    inv6: tl.constexpr = 0.16666666666666666
    sf_f = e4m3_rne_f32(gs * (amax * inv6))
    sf = sf_f.to(tl.float8e4nv)
    inv_gs = tl.div_rn(1.0, gs)
    denom = sf_f * inv_gs
    safe = tl.where(sf_f != 0.0, denom, 1.0)
    out_scale = tl.where(sf_f != 0.0, tl.div_rn(tl.full(safe.shape, 1.0, tl.float32), safe), 0.0)
    codes = e2m1_encode_f32(x * out_scale[:, None])
    pairs = tl.reshape(codes, (BLOCK_G, 8, 2))
    lo, hi = tl.split(pairs)
    packed = (lo | (hi << 4)).to(tl.uint8)
    offs_b = tl.arange(0, 8)
    bcols = offs_g[:, None] * 8 + offs_b[None, :]
    tl.store(q_ptr + row * stride_q + bcols, packed, mask=bcols < n_cols // 2)
    gmask = offs_g < n_cols // 16
    tl.store(s_ptr + row * stride_s + offs_g, sf.to(tl.uint8, bitcast=True), mask=gmask)
