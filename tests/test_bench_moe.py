"""CPU checks of the MoE benchmark's pieces: the contenders compute the same MoE as the
reference (so the timings compare like with like), byte/flop accounting, targets, the plot,
never overwriting an earlier run, and the CLI's refusal without a GPU."""

import subprocess
import sys

import pytest
import torch

from sm120lab.bench.moe import default_out_path, evaluate_targets
from sm120lab.bench.moe_problem import BenchLayer, dequantize_to, random_nvfp4_experts, uniform_routing
from sm120lab.moe.reference import moe_reference
from sm120lab.nvfp4 import dequantize_nvfp4


def _layer(g, e=6, k=2, h=64, i=32):
    w13 = random_nvfp4_experts(e, 2 * i, h, device="cpu", gen=g)
    w2 = random_nvfp4_experts(e, h, i, device="cpu", gen=g)
    layer = BenchLayer(E=e, k=k, H=h, I=i, w13=w13, w2=w2)
    layer.w13_bf16, layer.w2_bf16 = dequantize_to(w13, chunk=4), dequantize_to(w2, chunk=4)
    return layer


def test_random_weights_are_valid_nvfp4_and_dequantize_to_matches(seed):
    g = torch.Generator().manual_seed(seed)
    q = random_nvfp4_experts(5, 32, 48, device="cpu", gen=g)
    assert q.data.dtype == torch.uint8 and q.data.shape == (5, 32, 24)
    assert q.scale.dtype == torch.float8_e4m3fn and q.scale.shape == (5, 32, 3)
    s = q.scale.float()
    assert bool(torch.isfinite(s).all()) and float(s.min()) >= 8 and float(s.max()) <= 448
    ref = dequantize_nvfp4(q).to(torch.bfloat16)
    assert torch.equal(dequantize_to(q, chunk=2), ref)


@pytest.mark.parametrize("tokens", [1, 7])
@pytest.mark.parametrize("contender", ["torch_bf16_moe", "torch_loop_moe"])
def test_torch_contenders_compute_the_reference_moe(contender, tokens, seed):
    """Each contender on its own, so a missing CPU kernel in one never skips the other."""
    from sm120lab.bench import contenders

    g = torch.Generator().manual_seed(seed)
    layer = _layer(g)
    ids, tw = uniform_routing(tokens, layer.E, layer.k, device="cpu", gen=g)
    x = torch.randn(tokens, layer.H, generator=g).to(torch.bfloat16)
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    try:
        out = getattr(contenders, contender)(layer, x, ids, tw)
    except (RuntimeError, NotImplementedError) as exc:  # _grouped_mm may lack a CPU kernel
        if contender == "torch_bf16_moe":
            pytest.skip(f"torch._grouped_mm on CPU: {exc}")
        raise
    rel = float((out.double() - ref).norm() / ref.norm())
    assert rel < 2e-2, (contender, rel)


def test_bytes_and_flops_accounting(seed):
    g = torch.Generator().manual_seed(seed)
    h, i = 16 * int(torch.randint(1, 9, (), generator=g)), 16 * int(torch.randint(1, 9, (), generator=g))
    layer = BenchLayer(E=4, k=2, H=h, I=i, w13=None, w2=None)
    assert layer.nvfp4_bytes_per_expert("w13") == 2 * i * h * 9 // 16
    assert layer.nvfp4_bytes_per_expert("moe") == 3 * i * h * 9 // 16
    assert layer.dense_bytes_per_expert("moe", 2) == 3 * i * h * 2
    assert layer.dense_bytes_per_expert("w13", 1, 4) == 2 * i * h + 2 * i * 4
    assert layer.flops("moe", 10) == 2.0 * 10 * 3 * i * h


def _row(t, c, op, us, **kw):
    return {"T": t, "contender": c, "op": op, "us_median": us, "timing": "cuda_graph", **kw}


def test_targets_are_ratios_of_measured_rows(seed):
    g = torch.Generator().manual_seed(seed)
    ours = {t: float(torch.rand((), generator=g)) * 100 + 10 for t in (1, 4, 16, 4096)}
    fp8 = {t: float(torch.rand((), generator=g)) * 100 + 10 for t in ours}
    rows = [_row(t, "triton-w4a16", "moe", us, x_floor=1.2) for t, us in ours.items()]
    rows += [_row(t, "torch-fp8-grouped", "moe", us) for t, us in fp8.items()]
    rows += [_row(t, "triton-w4a16", "w13", 1.0, pct_copy_bw=80.0) for t in (1, 4, 16)]
    rows += [_row(4096, "torch-bf16-grouped", "moe", 2 * ours[4096])]
    rows += [dict(_row(1, "triton-w4a16", "moe", 1e-3), timing="eager")]  # eager rows never count
    out = evaluate_targets({"rows": rows})
    for t in ours:
        assert out["speedup_vs_fp8"][str(t)] == pytest.approx(fp8[t] / ours[t])
    assert out["faster_than_fp8_every_T"] == all(fp8[t] > ours[t] for t in ours)
    assert out["w13_ge_75pct_copy_bw"] is True and out["layer_within_1.35x_floor"] is True
    assert out["speedup_vs_bf16_T4096"] == pytest.approx(2.0) and out["ge_1.0x_bf16_T4096"] is True
    rows[0]["x_floor"] = 1.4  # one miss fails the target
    assert evaluate_targets({"rows": rows})["layer_within_1.35x_floor"] is False
    assert evaluate_targets({"rows": rows[1:]})["layer_within_1.35x_floor"] is False  # a missing row too


def test_default_out_path_never_overwrites(tmp_path):
    first = default_out_path(tmp_path)
    first.write_text("{}")
    second = default_out_path(tmp_path)
    assert second != first and second.parent == tmp_path and second.name.startswith(first.stem)


def test_plot_writes_png(tmp_path):
    from sm120lab.bench.plot import pct_of_floor, plot_moe

    rows = [_row(t, c, "moe", 2.0 * t) for t in (1, 4, 16) for c in ("triton-w4a16", "torch-bf16-grouped")]
    doc = {"rows": rows, "floor_us": {str(t): {"moe": 1.0 * t} for t in (1, 4, 16)}, "model": "m",
           "shape": {"E": 8, "k": 2, "H": 64, "I": 32}}
    assert pct_of_floor(doc, "triton-w4a16") == [(1, 50.0), (4, 50.0), (16, 50.0)]
    p = plot_moe(doc, tmp_path / "x.png")
    assert p.exists() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cli_refuses_without_gpu():
    res = subprocess.run([sys.executable, "-m", "sm120lab", "bench", "moe", "--tokens", "1"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "needs a CUDA GPU" in res.stderr
