"""GPU probe: the fragment kernels' ``PING`` option (two chunks in flight, each reloaded right after its MMAs)
against the tiles it derives from, at decode T, kernels alone and the whole layer.

    PYTHONPATH=. python3 scripts/ping_probe.py OUT.jsonl [--presets P,...] [--tokens T,...] [--tiles TABLE] [--seed S]

Why (notes/triton_kernels.md, twelfth round): ncu's source counters at T = 1 put 35% of the w13 kernel's stall
samples on one register move at the end of its K loop, which copies the chunk loaded one step ahead into the
current chunk's registers and so waits for that load; the activations and the w2+sum factor are loaded where
they are used. ``PING`` reloads each chunk's registers right after its MMAs, so the wait lands at the next use.

Per preset and T, on the same seeded weights and routing:
- up to T = 16, each unsorted kernel alone (``triton.testing.do_bench_cudagraph``), old tile against its twins, into NaN-poisoned
  outputs; the twin must give bit-identical outputs (same products, same fp32 order);
- the whole layer with the tile table's plan against the same plan with each tile replaced by its twin (where one
  exists), its output bit-compared, and both against fp64 of the same NVFP4 weights (``rel_fp64``, ||y - ref|| / ||ref||);
- the layer's NVFP4 byte floor (active experts' bytes / copy bandwidth measured in this process) and each time
  over it.
One JSON line per measurement; the first line is the environment.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from probe_io import decode_case, open_record, preset_layers  # noqa: E402

from sm120lab.kernels.moe_configs import FRAG_CONFIGS  # noqa: E402
from sm120lab.kernels.moe_frag import launch_frag, launch_frag_w2_sum  # noqa: E402
from sm120lab.kernels.moe_layer import fused_moe_packed  # noqa: E402
from sm120lab.kernels.plan import Path as KPath  # noqa: E402
from sm120lab.kernels.plan import TileTable, plan_moe  # noqa: E402
from sm120lab.moe.problem import PRESETS  # noqa: E402
from sm120lab.moe.reference import moe_reference  # noqa: E402
from sm120lab.nvfp4.quant_error import relative_error  # noqa: E402


def twin(cfg, ping: int):
    """The ``PING`` = ``ping`` twin of a fragment tile (None where none is a candidate; an unsorted one-tile w2+sum
    tile takes its ``PREFETCH`` twin's)."""
    if cfg.PING:
        return None
    t = replace(cfg, PING=ping, PREFETCH=cfg.PREFETCH or (not cfg.SORTED and cfg.TILES == 1))
    return FRAG_CONFIGS.get(t.name) or FRAG_CONFIGS.get(replace(cfg, PING=ping).name)


def bench(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--presets", default="qwen3.5-397b-a17b,qwen3-next-80b-a3b,qwen3-235b-a22b,gpt-oss-120b")
    p.add_argument("--tokens", default="1,4,16,64,256,1024")
    p.add_argument("--tiles", default="data/tiles/h200.json")
    p.add_argument("--seed", type=int, default=5, help="weights' seed; the inputs' generator takes seed + 1")
    args = p.parse_args()
    emit, copy, t0 = open_record("ping_probe.py", args)
    table = TileTable.load(args.tiles)
    shapes = {n: (PRESETS[n].E, PRESETS[n].k, PRESETS[n].H, PRESETS[n].I) for n in args.presets.split(",")}
    for name, (_, k, h, n_inter), layer, packed, gen, shape in preset_layers(
            shapes, list(shapes), t0, math.inf, emit, seed=args.seed, input_seed=args.seed + 1):
        for t in (int(x) for x in args.tokens.split(",")):
            case = decode_case(layer, k, h, t, gen)
            ids, tw, x, s, twf, flat = (case[key] for key in ("ids", "tw", "x", "s", "twf", "flat"))
            n_active, b13, b2 = case["n_active"], case["b13"], case["b2"]
            head = {"preset": name, "T": t, "active_experts": n_active}
            # kernels alone, unsorted (one slot per program, the plan's pick up to T = 16): w13 f2w4 and its twins,
            # w2+sum f1w8, f1w8p and theirs
            outs = {}
            for tile in () if t > 16 else ("f2w4", "f2w4d2", "f2w4d4"):
                c = FRAG_CONFIGS[tile]
                o = torch.full((s, n_inter), float("nan"), dtype=torch.bfloat16, device="cuda")
                fn = functools.partial(launch_frag, x, packed.w13, o, twf, flat, flat, num_slots=s, a_row_div=k,
                                       fuse_silu=True, mul_routing=False, sorted_cols=False, tiles=c.TILES,
                                       warps=c.num_warps, cg=0, ping=c.PING)
                us = bench(fn)
                outs[tile] = o.clone()
                emit({**head, "kernel": "w13", "tile": tile, "us": us, "pct_copy": 100 * b13 / copy / 1e3 / us,
                      "bit_equal_to_f2w4": bool(torch.equal(o, outs["f2w4"])), "finite": bool(o.isfinite().all())})
            inter = outs.get("f2w4")
            for tile in () if t > 16 else ("f1w8", "f1w8p", "f1w8pd2", "f1w8pd4"):
                c = FRAG_CONFIGS[tile]
                o = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
                fn = functools.partial(launch_frag_w2_sum, inter, packed.w2, o, twf, ids, tiles=c.TILES,
                                       warps=c.num_warps, prefetch=c.w2sum_prefetch, ping=c.PING)
                us = bench(fn)
                outs[tile] = o.clone()
                emit({**head, "kernel": "w2sum", "tile": tile, "us": us, "pct_copy": 100 * b2 / copy / 1e3 / us,
                      "bit_equal_to_f1w8": bool(torch.equal(o, outs["f1w8"])), "finite": bool(o.isfinite().all())})
            # the whole layer: the table's plan, then its PING twins
            base = plan_moe(shape, t, device="cuda", table=table)
            ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
            plans = [("table", base)]
            for ping in (2, 4) if base.path is KPath.FRAG else ():
                a, b = twin(base.w13, ping), twin(base.w2, ping)
                if a is not None or b is not None:
                    plans.append((f"ping{ping}", plan_moe(shape, t, device="cuda", tiles=(a or base.w13, b or base.w2))))
            first = None
            for label, plan in plans:
                fn = functools.partial(fused_moe_packed, x, ids, tw, packed, plan=plan)
                us = bench(fn)
                y = fn()
                first = y if first is None else first
                row = {**head, "kernel": "layer", "plan": label, "path": plan.path.value, "w13": plan.w13.name,
                       "w2": plan.w2.name, "us": us, "floor_us": (b13 + b2) / copy / 1e3,
                       "x_floor": us / ((b13 + b2) / copy / 1e3), "bit_equal_to_table": bool(torch.equal(y, first)),
                       "finite": bool(y.isfinite().all())}
                row["rel_fp64"] = relative_error(ref, y)
                emit(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
