"""Experiment: the MMA kernel with swapped operands (the dequantized weights as wgmma's register A operand,
the gathered activations as its shared-memory B operand) against the current form, on one GPU.

The swapped kernel is ``sm120lab/kernels/moe_gemm.py`` with ``data/bench/aux/swap_probe_h200_2026-12-03.patch``
applied (a ``SWAP`` constexpr: ``acc^T += W_lo @ A_even^T + W_hi @ A_odd^T``, transposed before the epilogue):

    mkdir -p plan_run/swap && patch -o plan_run/swap/swap_gemm.py sm120lab/kernels/moe_gemm.py \
        data/bench/aux/swap_probe_h200_2026-12-03.patch
    PYTHONPATH=.:plan_run/swap python3 scripts/swap_probe.py OUT.jsonl [presets] [tokens] [seconds]

One JSON line per (preset, T, tile): the layer's CUDA-graph time (``triton.testing.do_bench_cudagraph``)
through ``fused_moe_nvfp4`` with both GEMMs on that tile, and the relative difference from the current
kernel's output on the same inputs. Recorded: data/bench/aux/swap_probe_h200_2026-12-03.jsonl."""
import functools
import json
import sys
import time

import swap_gemm
import torch
import triton

import sm120lab.kernels.moe_layer as ml
from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
from sm120lab.kernels.moe_configs import GemmConfig
from sm120lab.moe.problem import PRESETS
from sm120lab.nvfp4.quant_error import relative_error

out = open(sys.argv[1], "a")
ORIG = ml.moe_nvfp4_gemm_kernel


class Swapped:
    def __getitem__(self, grid):
        def launch(*a, **k):
            return swap_gemm.moe_nvfp4_gemm_kernel[grid](*a, SWAP=True, **k)
        return launch


def layer_call(layer, x, ids, tw, c):
    """The whole layer with both GEMMs on tile ``c`` (through whichever kernel the module global holds)."""
    return ml.fused_moe_nvfp4(x, ids, tw, layer.w13, layer.w2, configs=(c, c))


def emit(r):
    print(json.dumps(r), flush=True)
    out.write(json.dumps(r) + "\n")
    out.flush()


BASE = GemmConfig(128, 64, 64, 8, 3)
SWAPS = [GemmConfig(64, 128, 64, 4, 3), GemmConfig(128, 128, 64, 8, 3), GemmConfig(64, 256, 64, 8, 3),
         GemmConfig(128, 128, 128, 8, 3), GemmConfig(64, 128, 128, 4, 3), GemmConfig(32, 128, 128, 4, 4),
         GemmConfig(128, 256, 64, 8, 3), GemmConfig(64, 128, 64, 4, 4)]
presets = sys.argv[2].split(",") if len(sys.argv) > 2 else ["gpt-oss-120b", "qwen3-235b-a22b", "qwen3.5-397b-a17b"]
tokens = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else [4096, 1024]
t_end = time.time() + (float(sys.argv[4]) if len(sys.argv) > 4 else 400)
for name in presets:
    cfg = PRESETS[name]
    layer = make_bench_layer(cfg.E, cfg.k, cfg.H, cfg.I, seed=7, bf16=False, fp8=False)
    gen = torch.Generator(device="cuda").manual_seed(11)
    for t in tokens:
        ids, tw = uniform_routing(t, cfg.E, cfg.k, gen=gen)
        x = torch.randn(t, cfg.H, device="cuda", generator=gen).to(torch.bfloat16)
        ml.moe_nvfp4_gemm_kernel = ORIG

        run = functools.partial(layer_call, layer, x, ids, tw)
        ref = run(BASE)
        us = triton.testing.do_bench_cudagraph(functools.partial(run, BASE), rep=200)
        emit({"preset": name, "T": t, "cfg": BASE.name, "swap": False, "us": us * 1e3})
        ml.moe_nvfp4_gemm_kernel = Swapped()
        for c in SWAPS:
            if time.time() > t_end:
                break
            try:
                o = run(c)
                torch.cuda.synchronize()
                rel = relative_error(ref, o)
                us = triton.testing.do_bench_cudagraph(functools.partial(run, c), rep=200)
                emit({"preset": name, "T": t, "cfg": c.name, "swap": True, "us": us * 1e3, "rel_vs_base": rel})
            except Exception as e:  # noqa: BLE001
                emit({"preset": name, "T": t, "cfg": c.name, "swap": True, "error": f"{type(e).__name__}: {str(e)[:200]}"})
        ml.moe_nvfp4_gemm_kernel = ORIG
    del layer
    torch.cuda.empty_cache()
