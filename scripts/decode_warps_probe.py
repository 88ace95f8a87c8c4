"""GPU probe: the fragment kernels at small T with more warps per program (fewer serial K iterations each).

    PYTHONPATH=. python3 scripts/decode_warps_probe.py OUT.jsonl [presets] [tokens]

Per preset and T (unsorted columns, one slot per program): the w13 kernel (:func:`.moe_frag.launch_frag`)
and the w2+sum kernel (:func:`.moe_frag.launch_frag_w2_sum`) alone, for several (tiles, warps), each timed
with ``triton.testing.do_bench_cudagraph`` and compared with the output of the plan's default tile on the
same inputs (max relative difference; the K split changes only the fp32 summation order). One JSON line
per kernel and tile, with the kernel's weight bytes over its time as % of the copy bandwidth measured in
the same process. Recorded: data/bench/aux/decode_warps_probe_h200_2026-12-03.jsonl.
"""

import functools
import json
import sys

import torch
import triton
from probe_io import decode_case

from sm120lab.bench.ceilings import measure_copy_gbps
from sm120lab.bench.moe_problem import make_bench_layer
from sm120lab.kernels.moe_frag import launch_frag, launch_frag_w2_sum
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe.problem import PRESETS

W13 = [(2, 4), (2, 8), (2, 16), (4, 8), (4, 16)]
W2 = [(1, 8), (1, 4), (1, 16), (2, 8), (2, 16)]


def w13_call(inter, tiles, warps, x, packed, twf, flat, s, k):
    launch_frag(x, packed.w13, inter, twf, flat, flat, num_slots=s, a_row_div=k, fuse_silu=True, mul_routing=False,
                sorted_cols=False, tiles=tiles, warps=warps, cg=0)


def w2_call(res, tiles, warps, inter, packed, twf, ids):
    launch_frag_w2_sum(inter, packed.w2, res, twf, ids, tiles=tiles, warps=warps)


def sweep(emit, head: dict, kernel: str, tiles_list, out_shape, floor_s: float, call, rest: tuple):
    """Time ``call(out, tiles, warps, *rest)`` for each tile into a NaN-poisoned ``out``; one line each, compared
    with the first tile's output (returned). ``floor_s``: the kernel's weight bytes / the copy bandwidth in GB/s."""
    first = None
    for tiles, warps in tiles_list:
        out = torch.full(out_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        fn = functools.partial(call, out, tiles, warps, *rest)
        fn()
        torch.cuda.synchronize()
        first = out.clone() if first is None else first
        us = triton.testing.do_bench_cudagraph(fn, rep=100) * 1e3
        emit({**head, "kernel": kernel, "tiles": tiles, "warps": warps, "us": us,
              "pct_copy": 100 * floor_s / (us * 1e-6) / 1e9, "rel_vs_first": rel(out, first),
              "finite": bool(torch.isfinite(out).all())})
    return first


def rel(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def main() -> int:
    out = open(sys.argv[1], "a")
    presets = sys.argv[2].split(",") if len(sys.argv) > 2 else ["gpt-oss-120b", "qwen3.5-397b-a17b",
                                                                  "qwen3-next-80b-a3b", "qwen3-235b-a22b"]
    tokens = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else [1, 4]
    copy = measure_copy_gbps()["copy_GBps"]

    def emit(r):
        print(json.dumps(r), flush=True)
        out.write(json.dumps(r) + "\n")
        out.flush()

    for name in presets:
        cfg = PRESETS[name]
        layer = make_bench_layer(cfg.E, cfg.k, cfg.H, cfg.I, seed=5, bf16=False, fp8=False)
        packed = prepare_moe_weights(layer.w13, layer.w2)
        gen = torch.Generator(device="cuda").manual_seed(9)
        for t in tokens:
            c = decode_case(layer, cfg.k, cfg.H, t, gen)
            head = {"preset": name, "T": t}
            ref13 = sweep(emit, head, "w13", W13, (c["s"], cfg.I), c["b13"] / copy, w13_call,
                          (c["x"], packed, c["twf"], c["flat"], c["s"], cfg.k))
            sweep(emit, head, "w2sum", W2, (t, cfg.H), c["b2"] / copy, w2_call, (ref13, packed, c["twf"], c["ids"]))
        del layer, packed
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
