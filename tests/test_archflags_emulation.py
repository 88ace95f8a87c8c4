"""The block-scaled FP4 MMA emulation (sm120lab.archflags.mma_block_scale_emulation) on the CPU."""

import pytest
import torch

from sm120lab.archflags import mma_block_scale_emulation as E
from sm120lab.nvfp4 import dequantize_nvfp4, e2m1_decode, quantize_nvfp4


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_full_tile_matches_float64_matmul(fmt, seed):
    g = _gen(seed)
    for _ in range(5):
        o = E.random_operands(fmt, g)
        d = E.mma_block_scale(E.pack_a(o["a"]), E.pack_b(o["b"]), E.pack_c(o["c"]),
                              E.pack_scale_a(o["sfa"], fmt), E.pack_scale_b(o["sfb"], fmt), fmt)
        vs = 16 if fmt == "nvfp4" else 32
        sa = E.decode_scales(o["sfa"], fmt).repeat_interleave(vs, 1)
        sb = E.decode_scales(o["sfb"], fmt).repeat_interleave(vs, 1)
        ref = ((e2m1_decode(o["a"], torch.float64) * sa) @ (e2m1_decode(o["b"], torch.float64) * sb).T
               + o["c"].double()).float()
        assert torch.equal(E.unpack_d(d), ref)


def test_register_layout_matches_ptx_formulas():
    """Each register nibble holds the element the PTX ISA / CUTLASS layout formula names."""
    a = torch.randint(0, 16, (16, 64), dtype=torch.uint8)
    b = torch.randint(0, 16, (8, 64), dtype=torch.uint8)
    ra, rb = E.pack_a(a), E.pack_b(b)
    for lane in torch.randint(0, 32, (6,)).tolist():
        g, t = lane // 4, lane % 4
        for r in range(4):
            word = int(ra[lane, r])
            for i in range(8):
                row = g if r in (0, 2) else g + 8
                col = t * 8 + i + (32 if r >= 2 else 0)
                assert (word >> (4 * i)) & 0xF == int(a[row, col])
        for r in range(2):
            word = int(rb[lane, r])
            for i in range(8):
                assert (word >> (4 * i)) & 0xF == int(b[g, t * 8 + i + 32 * r])


def test_pack_unpack_roundtrip():
    a = torch.randint(0, 16, (16, 64), dtype=torch.uint8)
    b = torch.randint(0, 16, (8, 64), dtype=torch.uint8)
    c = torch.randn(16, 8)
    assert torch.equal(E.unpack_a(E.pack_a(a)), a)
    assert torch.equal(E.unpack_b(E.pack_b(b)), b)
    assert torch.equal(E.unpack_d(E.pack_c(c)), c)


@pytest.mark.parametrize("fmt,byte_id", [("nvfp4", 0), ("mxfp4", 0), ("mxfp4", 2)])
def test_unselected_lanes_and_bytes_are_ignored(fmt, byte_id, seed):
    g = _gen(seed)
    o = E.random_operands(fmt, g)
    regs = (E.pack_a(o["a"]), E.pack_b(o["b"]), E.pack_c(o["c"]))
    ref = E.reference_tile(o["a"], o["b"], o["c"], o["sfa"], o["sfb"], fmt)
    for tid_a, tid_b in [(0, 0), (1, 3), (1, 1)]:
        junk_a = torch.randint(0, 2**32, (32,), dtype=torch.int64, generator=g)
        junk_b = torch.randint(0, 2**32, (32,), dtype=torch.int64, generator=g)
        sfa = E.pack_scale_a(o["sfa"], fmt, byte_id=byte_id, thread_id=tid_a, fill=junk_a)
        sfb = E.pack_scale_b(o["sfb"], fmt, byte_id=byte_id, thread_id=tid_b, fill=junk_b)
        d = E.mma_block_scale(*regs, sfa, sfb, fmt, byte_id_a=byte_id, thread_id_a=tid_a,
                              byte_id_b=byte_id, thread_id_b=tid_b)
        assert torch.equal(E.unpack_d(d), ref)


def test_scale_factor_selection_changes_result(seed):
    """Changing one selected scale byte changes exactly that row's outputs."""
    o = E.random_operands("nvfp4", _gen(seed))
    o["a"][3] = 2  # row 3: every element 1.0, so its scales matter
    base = E.reference_tile(o["a"], o["b"], o["c"], o["sfa"], o["sfb"], "nvfp4")
    sfa = o["sfa"].clone()
    sfa[3, 1] = 0x38 if int(sfa[3, 1]) != 0x38 else 0x40  # 1.0 or 2.0
    regs = (E.pack_a(o["a"]), E.pack_b(o["b"]), E.pack_c(o["c"]))
    d = E.unpack_d(E.mma_block_scale(*regs, E.pack_scale_a(sfa), E.pack_scale_b(o["sfb"])))
    changed = (d != base).any(dim=1)
    assert changed[3] or torch.equal(o["b"][:, 16:32] & 7, torch.zeros(8, 16, dtype=torch.uint8))
    assert not changed[torch.arange(16) != 3].any()


def test_quantized_nvfp4_operands_give_dequantized_product():
    """quantize_nvfp4 -> fragments -> emulated MMA, times 1/(gsA*gsB), equals the dequantized matmul."""
    x = torch.randn(16, 64) * 3
    w = torch.randn(8, 64)
    qx, qw = quantize_nvfp4(x), quantize_nvfp4(w)
    sfa = qx.linear_scale().view(torch.uint8)
    sfb = qw.linear_scale().view(torch.uint8)
    d = E.mma_block_scale(E.pack_a(qx.codes()), E.pack_b(qw.codes()), torch.zeros(32, 4),
                          E.pack_scale_a(sfa), E.pack_scale_b(sfb))
    alpha = 1.0 / (qx.global_scale.double() * qw.global_scale.double())
    got = E.unpack_d(d).double() * alpha
    dx, dw = dequantize_nvfp4(qx).double(), dequantize_nvfp4(qw).double()
    ref = dx @ dw.T
    # dequantize rounds each element to fp32 (relative 2^-24), the MMA rounds once: bound by the abs sum
    bound = 2.0**-22 * (dx.abs() @ dw.abs().T)
    assert bool(((got - ref).abs() <= bound).all())


def test_bad_input_errors_name_the_argument():
    with pytest.raises(ValueError, match="codes"):
        E.pack_a(torch.zeros(16, 63, dtype=torch.uint8))
    with pytest.raises(ValueError, match="fmt"):
        E.pack_scale_a(torch.zeros(16, 4, dtype=torch.uint8), "fp8")
    with pytest.raises(ValueError, match="byte_id"):
        E.pack_scale_a(torch.zeros(16, 4, dtype=torch.uint8), "nvfp4", byte_id=2)
    with pytest.raises(ValueError, match="thread_id"):
        E.pack_scale_b(torch.zeros(8, 2, dtype=torch.uint8), "mxfp4", thread_id=4)
