"""GPU probe: two versions of the w2+sum kernel, A and B, timed alternately in one process.

    PYTHONPATH=. python3 scripts/w2sum_ab_probe.py OUT.jsonl [--budget-s S] [--a MODULE] [--b MODULE]
        [--routings N] [--b-prefetch-one-tile]

A and B are modules of ``sm120lab.kernels`` holding ``launch_frag_w2_sum``; ``--b-prefetch-one-tile`` runs B
with ``prefetch=True`` where the tile has one 16-row tile per warp. Runs recorded on the H200:

1. ``--a moe_frag --b moe_frag_b`` (1 routing): A the kernel of commit 69690e2, B the same file with the
   ``moe_frag.py`` part of data/bench/aux/frag_depth_probe_h200_2026-12-03.patch applied (DEPTH 1: the
   chunk in flight also carries its activations and the factor ``alpha * topk_w``, so no load in the loop
   waits on another load of the same step) -> ``w2sum_ab_probe_h200_2026-12-03.jsonl``.
2. and 3. A the file of commit 69690e2 copied to ``moe_frag_a.py``, B the kernel with that loop built in
   (then chosen inside the kernel where a warp holds one tile; now ``FragConfig.PREFETCH``, the same
   code: ``--b moe_frag --b-prefetch-one-tile``), 4 routings per graph (2, as the bench times the layer)
   and 1 routing (3) -> ``..._2.jsonl``, ``..._3.jsonl``.

Per preset (and H=7168, I=2048, E=256, k=8) and T = 1, 4: both kernels alone on the same inputs, the
table's w2 tile, timed A, B, A, B with ``triton.testing.do_bench_cudagraph`` (the medians of each pair are
recorded), outputs NaN-poisoned and compared bit for bit. One JSON line per (preset, T), written as it goes.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
from dataclasses import replace

import torch
import triton
from frag_depth_probe import SHAPES
from probe_io import open_record, preset_layers

from sm120lab.bench.moe_problem import uniform_routing
from sm120lab.kernels.plan import plan_moe


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--a", default="moe_frag")
    ap.add_argument("--b", default="moe_frag_b")
    ap.add_argument("--routings", type=int, default=1)
    ap.add_argument("--b-prefetch-one-tile", action="store_true")
    args = ap.parse_args()
    old, new = (importlib.import_module(f"sm120lab.kernels.{m}") for m in (args.a, args.b))
    emit, copy, t0 = open_record("w2sum_ab_probe.py", args)
    for name, (e, k, h, inter), layer, packed, gen, shape in preset_layers(SHAPES, list(SHAPES), t0, args.budget_s,
                                                                            emit):
        w2 = packed.w2
        for t in (1, 4):
            # the table's tile without the loop option: A and B choose it
            cfg = replace(plan_moe(shape, t, device="cuda").w2, PREFETCH=False)
            cases = []
            for _ in range(args.routings):
                ids, tw = uniform_routing(t, e, k, gen=gen)
                inter_in = torch.randn(t * k, inter, device="cuda", generator=gen).mul(0.1).to(torch.bfloat16)
                cases.append((ids, tw.reshape(-1).contiguous(), inter_in))
            outs, fns = {}, {}
            for tag, mod in (("A", old), ("B", new)):
                extra = {"prefetch": True} if tag == "B" and args.b_prefetch_one_tile and cfg.TILES == 1 else {}
                bufs = [torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in cases]
                calls = [functools.partial(mod.launch_frag_w2_sum, c[2], w2, o, c[1], c[0], tiles=cfg.TILES,
                                           warps=cfg.num_warps, **extra) for o, c in zip(bufs, cases)]

                def run(calls=calls):
                    for f in calls:
                        f()
                fns[tag] = run
                run()
                torch.cuda.synchronize()
                outs[tag] = torch.stack(bufs)
            us = {"A": [], "B": []}
            for tag in ("A", "B", "A", "B"):
                us[tag].append(triton.testing.do_bench_cudagraph(fns[tag], rep=60) * 1e3 / len(cases))
            active = sum(int(torch.unique(c[0]).numel()) for c in cases) / len(cases)
            floor = layer.nvfp4_bytes_per_expert("w2") * active / (copy * 1e3)
            emit({"preset": name, "T": t, "w2": cfg.name, "us_A": us["A"], "us_B": us["B"],
                  "B_over_A": min(us["B"]) / min(us["A"]), "floor_us": floor,
                  "bit_equal": bool(torch.equal(outs["A"], outs["B"])),
                  "finite": bool(torch.isfinite(outs["A"]).all() and torch.isfinite(outs["B"]).all())})
    emit({"done_s": time.time() - t0})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
