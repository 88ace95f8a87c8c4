"""CPU checks of the MoE benchmark's pieces: the contenders compute the same MoE as the
reference (so the timings compare like with like), byte/flop accounting, statistics, targets,
the plot and the CLI's refusal without a GPU."""

import statistics
import subprocess
import sys

import pytest
import torch

from sm120lab.bench.moe import _row, evaluate_targets
from sm120lab.bench.moe_problem import BenchLayer, dequantize_to, random_nvfp4_experts, uniform_routing
from sm120lab.bench.timing import percentile
from sm120lab.moe.reference import moe_reference
from sm120lab.nvfp4 import dequantize_nvfp4


def _gen():
    return torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))


def _layer(g, e=6, k=2, h=64, i=32):
    w13 = random_nvfp4_experts(e, 2 * i, h, device="cpu", gen=g)
    w2 = random_nvfp4_experts(e, h, i, device="cpu", gen=g)
    layer = BenchLayer(E=e, k=k, H=h, I=i, w13=w13, w2=w2)
    layer.w13_bf16, layer.w2_bf16 = dequantize_to(w13, chunk=4), dequantize_to(w2, chunk=4)
    return layer


def test_random_weights_are_valid_nvfp4_and_dequantize_to_matches():
    g = _gen()
    q = random_nvfp4_experts(5, 32, 48, device="cpu", gen=g)
    assert q.data.dtype == torch.uint8 and q.data.shape == (5, 32, 24)
    assert q.scale.dtype == torch.float8_e4m3fn and q.scale.shape == (5, 32, 3)
    s = q.scale.float()
    assert bool(torch.isfinite(s).all()) and float(s.min()) >= 8 and float(s.max()) <= 448
    ref = dequantize_nvfp4(q).to(torch.bfloat16)
    assert torch.equal(dequantize_to(q, chunk=2), ref)


@pytest.mark.parametrize("tokens", [1, 7])
def test_torch_contenders_compute_the_reference_moe(tokens):
    from sm120lab.bench.contenders import torch_bf16_moe, torch_loop_moe

    g = _gen()
    layer = _layer(g)
    ids, tw = uniform_routing(tokens, layer.E, layer.k, device="cpu", gen=g)
    x = torch.randn(tokens, layer.H, generator=g).to(torch.bfloat16)
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    for fn in (torch_bf16_moe, torch_loop_moe):
        try:
            out = fn(layer, x, ids, tw)
        except (RuntimeError, NotImplementedError) as exc:  # _grouped_mm may lack a CPU kernel
            if fn is torch_bf16_moe:
                pytest.skip(f"torch._grouped_mm on CPU: {exc}")
            raise
        rel = float((out.double() - ref).norm() / ref.norm())
        assert rel < 2e-2, (fn.__name__, rel)


def test_bytes_and_flops_accounting():
    g = _gen()
    h, i = 16 * int(torch.randint(1, 9, (), generator=g)), 16 * int(torch.randint(1, 9, (), generator=g))
    layer = BenchLayer(E=4, k=2, H=h, I=i, w13=None, w2=None)
    assert layer.nvfp4_bytes_per_expert("w13") == 2 * i * h * 9 // 16
    assert layer.nvfp4_bytes_per_expert("moe") == 3 * i * h * 9 // 16
    assert layer.dense_bytes_per_expert("moe", 2) == 3 * i * h * 2
    assert layer.dense_bytes_per_expert("w13", 1, 4) == 2 * i * h + 2 * i * 4
    assert layer.flops("moe", 10) == 2.0 * 10 * 3 * i * h
    us = float(torch.rand(()) * 100 + 1)
    row = _row(layer, 3, "x", "w13", {"us_median": us, "us_p10": us, "us_p90": us, "n_reps": 50}, 1e6, 6,
               {"copy_GBps": 4000.0, "bf16_TFLOPs": 800.0}, "cuda_graph")
    assert row["GBps"] == pytest.approx(1e6 / (us * 1e-6) / 1e9)
    assert row["pct_copy_bw"] == pytest.approx(100 * row["GBps"] / 4000.0)
    assert row["TFLOPs"] == pytest.approx(layer.flops("w13", 6) / (us * 1e-6) / 1e12)
    assert row["pct_bf16"] == pytest.approx(100 * row["TFLOPs"] / 800.0)


def test_percentile_and_median():
    xs = torch.rand(101).tolist()
    s = sorted(xs)
    assert percentile(xs, 50) == statistics.median(xs)
    assert percentile(xs, 10) == s[10] and percentile(xs, 90) == s[90]
    with pytest.raises(ValueError):
        percentile([], 50)


def test_targets_are_ratios_of_measured_rows():
    ours1, bf1 = float(torch.rand(()) * 50 + 10), float(torch.rand(()) * 500 + 10)
    rows = [
        {"T": 1, "contender": "triton-w4a16", "op": "moe", "us_median": ours1, "timing": "cuda_graph"},
        {"T": 1, "contender": "torch-bf16-grouped", "op": "moe", "us_median": bf1, "timing": "cuda_graph"},
    ] + [{"T": t, "contender": "triton-w4a16", "op": "w13", "pct_copy_bw": 80.0, "timing": "cuda_graph"} for t in (1, 4, 16)]
    out = evaluate_targets({"rows": rows})
    assert out["speedup_vs_bf16_T1"] == pytest.approx(bf1 / ours1)
    assert out["speedup_vs_bf16_T1_ge_5.0"] == (bf1 / ours1 >= 5)
    assert out["w13_ge_75pct_copy_bw"] is True
    assert out["speedup_vs_bf16_T4096"] is None and out["speedup_vs_bf16_T4096_ge_1.5"] is False


def test_plot_writes_png(tmp_path):
    from sm120lab.bench.plot import plot_moe

    rows = [{"T": t, "contender": c, "op": "moe", "us_median": float(torch.rand(()) * 100 + 1), "timing": "cuda_graph",
             "weight_bytes": 10**7 * t} for t in (1, 4, 16) for c in ("triton-w4a16", "torch-bf16-grouped")]
    doc = {"rows": rows, "ceilings": {"copy_GBps": 4000.0}, "model": "m", "shape": {"E": 8, "k": 2, "H": 64, "I": 32}}
    p = plot_moe(doc, tmp_path / "x.png")
    assert p.exists() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cli_refuses_without_gpu():
    res = subprocess.run([sys.executable, "-m", "sm120lab", "bench", "moe", "--tokens", "1"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "needs a CUDA GPU" in res.stderr
