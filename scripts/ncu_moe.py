#!/usr/bin/env python3
"""What bounds each MoE kernel: one layer call per (contender, T) under Nsight Compute, on one model shape.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --csv --page details \\
        python3 scripts/ncu_moe.py --model qwen3.5-397b-a17b --tokens 1,16,256,1024 \\
            --contenders triton-w4a16,vllm-marlin --windows windows.json > ncu.csv

Each window is one warmed-up layer call between ``cudaProfilerStart``/``Stop``, opened by a
``torch.cuda._sleep`` marker kernel (``spin_kernel``) so the CSV's kernels split into windows in the
order ``--windows`` records. Same weights (random NVFP4 at the preset's shape, seeded) and routings for
every contender; ours runs the plan the tile table picks (as ``bench moe``), Marlin vLLM's defaults.
:mod:`sm120lab.bench.ncu` reads the CSV back.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--shape", default=None)
    p.add_argument("--tokens", default="1,16,256,1024")
    p.add_argument("--contenders", default="triton-w4a16,vllm-marlin")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--windows", required=True, help="write the window order (JSON) here")
    args = p.parse_args()

    import torch

    from sm120lab.bench.contenders import make_moe
    from sm120lab.bench.moe import resolve_shape
    from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
    from sm120lab.kernels.plan import MoEShape, plan_moe
    from sm120lab.kernels.prepack import prepare_moe_weights

    cfg = resolve_shape(args.model, args.shape)
    layer = make_bench_layer(cfg.E, cfg.k, cfg.H, cfg.I, seed=args.seed, bf16=False, fp8=False)
    packed = prepare_moe_weights(layer.w13, layer.w2)
    shape = MoEShape.of(cfg.E, cfg.H, cfg.I, cfg.k)
    marlin = prepared = None
    if "vllm-marlin" in args.contenders:
        from sm120lab.moe.backends.vllm_nvfp4 import VllmMarlin

        marlin = VllmMarlin()
        prepared = marlin.prepare_weights(layer.w13, layer.w2)
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    windows = []
    for t in (int(x) for x in args.tokens.split(",")):
        ids, tw = uniform_routing(t, cfg.E, cfg.k, gen=gen)
        x = torch.randn(t, cfg.H, device="cuda", generator=gen).to(torch.bfloat16)
        for c in args.contenders.split(","):
            if c == "triton-w4a16":
                plan = plan_moe(shape, t, device="cuda")
                fn = make_moe(c, layer, x, ids, tw, packed=packed, plan=plan)
                extra = {"path": plan.path.value, "w13": plan.w13.name, "w2": plan.w2.name}
            elif c == "vllm-marlin":
                ids32 = ids.to(torch.int32)
                fn = (lambda ids32=ids32, x=x, tw=tw: marlin.call(prepared, x, tw, ids32))
                extra = {}
            else:
                raise SystemExit(f"--contenders: expected triton-w4a16 or vllm-marlin, got {c!r}")
            for _ in range(3):  # warm-up: compile, autotune nothing, fill caches of the allocator
                fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            torch.cuda._sleep(1000)
            fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
            windows.append({"model": cfg.name, "T": t, "contender": c, **extra})
            print(f"# window {len(windows)}: {cfg.name} T={t} {c} {extra}", file=sys.stderr, flush=True)
    Path(args.windows).write_text(json.dumps({"shape": {"E": cfg.E, "k": cfg.k, "H": cfg.H, "I": cfg.I},
                                              "seed": args.seed, "windows": windows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
