"""Exact emulation of the SM120 block-scaled FP4 warp MMA, one instruction, from per-lane registers:

    mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::{4X|2X}
        .f32.e2m1.e2m1.f32.{ue4m3|ue8m0}  d, a, b, c, sfa, {byte-id-a, thread-id-a}, sfb, {byte-id-b, thread-id-b}

Semantics (PTX ISA 9.7.14.3 "Block Scaling for mma.sync"): ``D = (A * scale_A) (B * scale_B) + C``,
A is 16 x 64, B is 64 x 8 (given here as its transpose, N x K = 8 x 64, the ``.col`` layout),
scale_A is 16 x (64/VS), scale_B (64/VS) x 8, VS = 16 for ``scale_vec::4X`` (UE4M3, NVFP4) and 32 for
``scale_vec::2X`` (UE8M0, MXFP4).

Fragment layouts (PTX ISA 9.7.14.5.x "Matrix fragments for mma.m16n8k64", cross-checked with CUTLASS
``include/cute/atom/mma_traits_sm120.hpp``, SM120_16x8x64_TN_VS ALayout/BLayout/SFALayout/SFBLayout/
SM80_16x8_Row). With ``g = lane // 4`` and ``t = lane % 4``; E2M1 element ``i`` of a 32-bit register
sits in nibble ``i`` (bits 4i..4i+3, element 0 lowest):

- A, 4 registers: reg r, nibble i -> row ``g + 8 * (r % 2)``, k ``8 t + i + 32 * (r // 2)``.
- B, 2 registers: reg r, nibble i -> column n ``g``, k ``8 t + i + 32 r``.
- C/D, 4 floats: element j -> row ``g + 8 * (j // 2)``, column ``2 t + j % 2``.
- scale A: the register of lane ``4 * (m % 8) + 2 * thread-id-a + m // 8`` holds row m's scales.
- scale B: the register of lane ``4 * n + thread-id-b`` holds column n's scales.
- within the selected register, chunk j (k in [VS j, VS (j+1))) uses byte ``byte-id + j``
  (4X: byte-id 0, bytes 0..3; 2X: byte-id 0 or 2, two bytes).

The byte-id = thread-id = 0 form is what CUTLASS and Triton emit; the other selector values
follow the PTX ISA text and are not exercised by those libraries.

Products of E2M1 values and UE4M3/UE8M0 scales are exact in float64, and so is their sum for
operands of ordinary range (64 terms spanning < 2^40); the float64 result is rounded once to
float32. The hardware's internal accumulation is not documented to be exact, so a GPU check
compares with a tolerance and reports the largest difference. The GPU path for this instruction is
unverified on SM120 hardware.
"""

from __future__ import annotations

import torch

from ..nvfp4 import e2m1_decode, e8m0_to_float

M, N, K = 16, 8, 64
LANES = 32
SCALE_FORMATS = {"nvfp4": (16, "ue4m3"), "mxfp4": (32, "ue8m0")}


def _check(name: str, t: torch.Tensor, shape: tuple, dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError(f"{name}: expected {dtype} of shape {shape}, got {t.dtype} {tuple(t.shape)}")


def _vs(fmt: str) -> tuple[int, str]:
    try:
        return SCALE_FORMATS[fmt]
    except KeyError:
        raise ValueError(f"fmt {fmt!r}: expected one of {sorted(SCALE_FORMATS)}") from None


# ---- coordinates (the layout tables above, as functions) -------------------------------------

def a_coord(lane: int, reg: int, nib: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), 8 * t + nib + 32 * (reg // 2)


def b_coord(lane: int, reg: int, nib: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g, 8 * t + nib + 32 * reg


def c_coord(lane: int, j: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (j // 2), 2 * t + j % 2


def sfa_lane(row: int, thread_id: int = 0) -> int:
    return 4 * (row % 8) + 2 * thread_id + row // 8


def sfb_lane(col: int, thread_id: int = 0) -> int:
    return 4 * col + thread_id


def _check_selectors(fmt: str, byte_id: int, thread_id: int, nthreads: int) -> None:
    vs, _ = _vs(fmt)
    allowed_bytes = (0,) if vs == 16 else (0, 2)
    if byte_id not in allowed_bytes:
        raise ValueError(f"byte_id {byte_id}: expected one of {allowed_bytes} for {fmt}")
    if not 0 <= thread_id < nthreads:
        raise ValueError(f"thread_id {thread_id}: expected 0..{nthreads - 1}")


def _index_tables():
    a = torch.tensor([[[a_coord(ln, r, i) for i in range(8)] for r in range(4)] for ln in range(LANES)])
    b = torch.tensor([[[b_coord(ln, r, i) for i in range(8)] for r in range(2)] for ln in range(LANES)])
    c = torch.tensor([[c_coord(ln, j) for j in range(4)] for ln in range(LANES)])
    return a, b, c


_A_IDX, _B_IDX, _C_IDX = _index_tables()
_SHIFTS = torch.arange(8, dtype=torch.int64) * 4


# ---- packing: matrices -> per-lane registers, and back -----------------------------------------

def _nibbles_to_words(nib: torch.Tensor) -> torch.Tensor:
    words = (nib.to(torch.int64) << _SHIFTS).sum(-1)
    return words.to(torch.int64)


def _words_to_nibbles(words: torch.Tensor) -> torch.Tensor:
    return ((words.to(torch.int64).unsqueeze(-1) >> _SHIFTS) & 0xF).to(torch.uint8)


def pack_a(codes: torch.Tensor) -> torch.Tensor:
    """A codes uint8 [16, 64] -> registers int64 [32, 4] (values 0..2^32-1)."""
    _check("codes", codes, (M, K), torch.uint8)
    return _nibbles_to_words(codes[_A_IDX[..., 0], _A_IDX[..., 1]])


def pack_b(codes_nk: torch.Tensor) -> torch.Tensor:
    """B^T codes uint8 [8, 64] (N x K) -> registers int64 [32, 2]."""
    _check("codes_nk", codes_nk, (N, K), torch.uint8)
    return _nibbles_to_words(codes_nk[_B_IDX[..., 0], _B_IDX[..., 1]])


def unpack_a(regs: torch.Tensor) -> torch.Tensor:
    _check("regs", regs, (LANES, 4), torch.int64)
    out = torch.empty(M, K, dtype=torch.uint8)
    out[_A_IDX[..., 0], _A_IDX[..., 1]] = _words_to_nibbles(regs)
    return out


def unpack_b(regs: torch.Tensor) -> torch.Tensor:
    _check("regs", regs, (LANES, 2), torch.int64)
    out = torch.empty(N, K, dtype=torch.uint8)
    out[_B_IDX[..., 0], _B_IDX[..., 1]] = _words_to_nibbles(regs)
    return out


def pack_c(c: torch.Tensor) -> torch.Tensor:
    """C float32 [16, 8] -> per-lane float32 [32, 4]."""
    _check("c", c, (M, N), torch.float32)
    return c[_C_IDX[..., 0], _C_IDX[..., 1]].clone()


def unpack_d(d: torch.Tensor) -> torch.Tensor:
    """Per-lane float32 [32, 4] -> D float32 [16, 8]."""
    _check("d", d, (LANES, 4), torch.float32)
    out = torch.empty(M, N, dtype=torch.float32)
    out[_C_IDX[..., 0], _C_IDX[..., 1]] = d
    return out


def _scale_words(bytes_rows: torch.Tensor, lanes: list[int], byte_id: int, fill: torch.Tensor | None) -> torch.Tensor:
    words = fill.clone() if fill is not None else torch.zeros(LANES, dtype=torch.int64)
    nchunks = bytes_rows.shape[1]
    for row, lane in enumerate(lanes):
        w = int(words[lane])
        for j in range(nchunks):
            shift = 8 * (byte_id + j)
            w = (w & ~(0xFF << shift)) | (int(bytes_rows[row, j]) << shift)
        words[lane] = w
    return words


def pack_scale_a(sf: torch.Tensor, fmt: str = "nvfp4", *, byte_id: int = 0, thread_id: int = 0,
                 fill: torch.Tensor | None = None) -> torch.Tensor:
    """scale_A bytes uint8 [16, 64/VS] -> per-lane scale registers int64 [32].

    ``fill`` gives the starting register values (e.g. random garbage in the lanes and bytes the
    selectors do not read)."""
    vs, _ = _vs(fmt)
    _check("sf", sf, (M, K // vs), torch.uint8)
    _check_selectors(fmt, byte_id, thread_id, 2)
    return _scale_words(sf, [sfa_lane(m, thread_id) for m in range(M)], byte_id, fill)


def pack_scale_b(sf: torch.Tensor, fmt: str = "nvfp4", *, byte_id: int = 0, thread_id: int = 0,
                 fill: torch.Tensor | None = None) -> torch.Tensor:
    """scale_B bytes uint8 [8, 64/VS] (one row per column n) -> per-lane registers int64 [32]."""
    vs, _ = _vs(fmt)
    _check("sf", sf, (N, K // vs), torch.uint8)
    _check_selectors(fmt, byte_id, thread_id, 4)
    return _scale_words(sf, [sfb_lane(n, thread_id) for n in range(N)], byte_id, fill)


def _select_scales(words: torch.Tensor, lanes: list[int], nchunks: int, byte_id: int) -> torch.Tensor:
    out = torch.empty(len(lanes), nchunks, dtype=torch.uint8)
    for row, lane in enumerate(lanes):
        w = int(words[lane])
        for j in range(nchunks):
            out[row, j] = (w >> (8 * (byte_id + j))) & 0xFF
    return out


def decode_scales(sf: torch.Tensor, fmt: str) -> torch.Tensor:
    """Scale bytes -> float64 values (UE4M3 via torch.float8_e4m3fn, UE8M0 as 2^(e-127))."""
    _, stype = _vs(fmt)
    if stype == "ue4m3":
        return sf.view(torch.float8_e4m3fn).to(torch.float64)
    return e8m0_to_float(sf, torch.float64)


# ---- the instruction ---------------------------------------------------------------------------

def mma_block_scale(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor,
                    fmt: str = "nvfp4", *, byte_id_a: int = 0, thread_id_a: int = 0,
                    byte_id_b: int = 0, thread_id_b: int = 0) -> torch.Tensor:
    """One warp's ``mma...block_scale`` from its registers.

    a int64 [32, 4], b int64 [32, 2] (32-bit register contents), c float32 [32, 4], sfa/sfb int64 [32]
    -> d float32 [32, 4] (per lane, as the instruction writes it).
    """
    vs, _ = _vs(fmt)
    _check("sfa", sfa, (LANES,), torch.int64)
    _check("sfb", sfb, (LANES,), torch.int64)
    _check("c", c, (LANES, 4), torch.float32)
    _check_selectors(fmt, byte_id_a, thread_id_a, 2)
    _check_selectors(fmt, byte_id_b, thread_id_b, 4)
    nchunks = K // vs
    a_val = e2m1_decode(unpack_a(a), torch.float64)                     # [16, 64]
    b_val = e2m1_decode(unpack_b(b), torch.float64)                     # [8, 64]
    sa = decode_scales(_select_scales(sfa, [sfa_lane(m, thread_id_a) for m in range(M)], nchunks, byte_id_a), fmt)
    sb = decode_scales(_select_scales(sfb, [sfb_lane(n, thread_id_b) for n in range(N)], nchunks, byte_id_b), fmt)
    a_scaled = a_val * sa.repeat_interleave(vs, dim=1)
    b_scaled = b_val * sb.repeat_interleave(vs, dim=1)
    d = a_scaled @ b_scaled.T + unpack_d(c).to(torch.float64)
    return pack_c(d.to(torch.float32))


def reference_tile(a_codes: torch.Tensor, b_codes_nk: torch.Tensor, c: torch.Tensor, sfa: torch.Tensor,
                   sfb: torch.Tensor, fmt: str = "nvfp4") -> torch.Tensor:
    """The same product from whole matrices (no fragments): float64 matmul of the decoded,
    block-scaled operands plus C, rounded to float32. [16, 8]."""
    vs, _ = _vs(fmt)
    a = e2m1_decode(a_codes, torch.float64) * decode_scales(sfa, fmt).repeat_interleave(vs, dim=1)
    b = e2m1_decode(b_codes_nk, torch.float64) * decode_scales(sfb, fmt).repeat_interleave(vs, dim=1)
    return (a @ b.T + c.to(torch.float64)).to(torch.float32)


def random_operands(fmt: str = "nvfp4", generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Random codes (all 16 E2M1 codes), finite positive scales and C for one tile."""
    vs, stype = _vs(fmt)
    g = generator
    a = torch.randint(0, 16, (M, K), dtype=torch.uint8, generator=g)
    b = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
    if stype == "ue4m3":  # positive finite E4M3 bytes: exponent field 1..14 keeps values in [2^-6, 240]
        def sf(rows):
            e = torch.randint(1, 15, (rows, K // vs), generator=g)
            m = torch.randint(0, 8, (rows, K // vs), generator=g)
            return ((e << 3) | m).to(torch.uint8)
    else:
        def sf(rows):
            return torch.randint(120, 135, (rows, K // vs), dtype=torch.uint8, generator=g)
    c = torch.randn(M, N, generator=g).to(torch.float32)
    return {"a": a, "b": b, "c": c, "sfa": sf(M), "sfb": sf(N)}
