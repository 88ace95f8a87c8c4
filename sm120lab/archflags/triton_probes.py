"""Small Triton kernels for the Triton rows of the matrix (the second route to the SM120 tensor
cores): a bf16 ``tl.dot``, and ``tl.dot_scaled`` with E2M1 operands and MXFP4 (E8M0 per 32) or
NVFP4 (E4M3 per 16) scales. One program computes one BM x BN tile over K = BK.
Layouts: A packed [BM, BK/2] (two E2M1 per byte along K), B packed [BK/2, BN] (along K),
scales [BM, BK/G] and [BN, BK/G]."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot_bf16_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@triton.jit
def dot_scaled_fp4_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr, GROUP: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rkh = tl.arange(0, BK // 2)
    rs = tl.arange(0, BK // GROUP)
    a = tl.load(a_ptr + rm[:, None] * (BK // 2) + rkh[None, :])
    b = tl.load(b_ptr + rkh[:, None] * BN + rn[None, :])
    sa = tl.load(as_ptr + rm[:, None] * (BK // GROUP) + rs[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * (BK // GROUP) + rs[None, :])
    c = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1")
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)
