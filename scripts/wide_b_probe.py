"""GPU probe: ``SHARE_B`` on four weight tiles and on the 32-slot tile (fourteenth round of issue 30), the whole layer
against the tile it derives from and vLLM's Marlin in the same process.

    PYTHONPATH=. [SM120LAB_VLLM_CACHE=DIR] python3 scripts/wide_b_probe.py OUT.jsonl [--presets P,...]
        [--shapes H,I,E,k;...] [--tokens T,...] [--tiles TABLE] [--seed S] [--once]

Why (notes/triton_kernels.md, thirteenth and fourteenth rounds): at T = 1024 the sorted fragment kernels are L1-bound
(ncu on the H100: the w2 kernel at 84-88% of L1/TEX throughput). Per K chunk a warp of ``f2w2oc2b`` loads 1 KB of
weights and 2 KB of activations for 16 MMAs (192 B per MMA through L1); ``f4w2oc2b`` 2 KB + 2 KB for 32 (128 B),
``f2w2oc4b`` 1 KB + 4 KB for 32 (160 B), ``f4w2oc4b`` 2 KB + 4 KB for 64 (96 B). The 32-slot tiles also read an
expert's weights once where 17-32 slots are routed to it, where 16-slot blocks read them twice.

Per preset or shape and T, on the same seeded weights and routing: the tile table's plan, the formula's fragment
plan (``f2w2oc2b`` for both GEMMs), and every pairing of the new tiles that shares a sort block size, each into its
own output, timed with ``triton.testing.do_bench_cudagraph``, checked against fp64 of the same NVFP4 weights
(``rel_fp64``) and bit-compared with the ``f2w2oc2b`` plan (the same products in the same fp32 order: a slot's column
does not depend on how many tiles or slots share a program); then vLLM's Marlin where its wheel cache is set.
``--once``: each plan runs once, untimed (for ncu). One JSON line per measurement; the first line is the environment.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from probe_io import decode_case, open_record, preset_layers  # noqa: E402
from share_b_probe import bench, marlin_for  # noqa: E402

from sm120lab.kernels.moe_configs import FRAG_CONFIGS, FragConfig  # noqa: E402
from sm120lab.kernels.moe_layer import fused_moe_packed  # noqa: E402
from sm120lab.kernels.plan import TileTable, plan_moe  # noqa: E402
from sm120lab.moe.problem import PRESETS  # noqa: E402
from sm120lab.moe.reference import moe_reference  # noqa: E402
from sm120lab.nvfp4.quant_error import relative_error  # noqa: E402

BASE = "f2w2oc2b"
#: (w13, w2) pairings tried: the base, then the new tiles, each pair sharing the sort's block size
PAIRS = [(BASE, BASE), ("f4w2oc2b", "f4w2oc2b"), ("f4w2oc2b", BASE), (BASE, "f4w2oc2b"),
         ("f2w2oc4b", "f2w2oc4b"), ("f4w2oc4b", "f4w2oc4b"), ("f4w2oc4b", "f2w2oc4b"), ("f2w2oc4b", "f4w2oc4b")]


def tile_named(name: str):
    """A fragment tile by its name (``FragConfig.name``): one of FRAG_CONFIGS, or one built from the name's fields
    (``f{TILES}w{warps}`` then ``o``, ``c{CG}``, ``p``, ``d{PING}``, ``b``), for the sixteenth round's warp-count
    probes; None for any other name. (That round's register-cap names, suffix ``r{N}``, need the FragConfig.MAXNREG
    field of data/bench/aux/reg_cap_probe_h100_2026-12-07/maxnreg_probe.patch, which did not land.)"""
    if name in FRAG_CONFIGS:
        return FRAG_CONFIGS[name]
    m = re.fullmatch(r"f([124])w([1248])(o?)(?:c([124]))?(p?)(?:d([24]))?(b?)", name)
    if not m:
        return None
    tiles, warps, o, cg, pre, ping, share = m.groups()
    cfg = FragConfig(int(tiles), int(warps), SORTED=bool(o), CG=int(cg or 0), PREFETCH=bool(pre), PING=int(ping or 0),
                     SHARE_B=bool(share))
    return cfg if cfg.name == name else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--presets", default="qwen3.5-397b-a17b,gpt-oss-120b,qwen3-235b-a22b,qwen3-next-80b-a3b")
    p.add_argument("--shapes", default="7168,2048,256,8;5120,1536,160,8", help="H,I,E,k of shapes of no preset")
    p.add_argument("--tokens", default="256,1024,4096")
    p.add_argument("--tiles", default="data/tiles/h200.json")
    p.add_argument("--seed", type=int, default=5, help="weights' seed; the inputs' generator takes seed + 1")
    p.add_argument("--once", action="store_true", help="run each plan once, untimed (under ncu)")
    p.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS),
                   help="w13:w2 pairings to time (default: all of PAIRS; the base pair must be among them)")
    args = p.parse_args()
    pairs = [tuple(x.split(":")) for x in args.pairs.split(",") if x]
    if (BASE, BASE) not in pairs or any(len(x) != 2 or None in map(tile_named, x) for x in pairs):
        p.error(f"--pairs: expected w13:w2 tile names (FRAG_CONFIGS or built as FragConfig.name), comma-separated,"
                f" including {BASE}:{BASE}")
    pairs.sort(key=lambda x: x != (BASE, BASE))  # the base first: every later pair is bit-compared with it
    emit, copy, t0 = open_record("wide_b_probe.py", args)
    shapes = {n: (PRESETS[n].E, PRESETS[n].k, PRESETS[n].H, PRESETS[n].I) for n in args.presets.split(",") if n}
    for s in (x for x in args.shapes.split(";") if x):
        h, i, e, k = (int(v) for v in s.split(","))
        shapes[f"shape-H{h}-I{i}-E{e}-k{k}"] = (e, k, h, i)
    table = TileTable.load(args.tiles)
    for name, (_e, k, h, _i), layer, packed, gen, shape in preset_layers(
            shapes, list(shapes), t0, math.inf, emit, seed=args.seed, input_seed=args.seed + 1):
        marlin = None if args.once else marlin_for(layer, emit)
        for t in (int(x) for x in args.tokens.split(",") if x):
            case = decode_case(layer, k, h, t, gen)
            ids, tw, x = case["ids"], case["tw"], case["x"]
            head = {"preset": name, "T": t, "active_experts": case["n_active"]}
            plans = [("table", plan_moe(shape, t, device="cuda", table=table))]
            plans += [(f"{a}+{b}", plan_moe(shape, t, device="cuda", tiles=(tile_named(a), tile_named(b))))
                      for a, b in pairs]
            ref = None if args.once else moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
            base = None
            for label, plan in plans:
                fn = functools.partial(fused_moe_packed, x, ids, tw, packed, plan=plan)
                if args.once:
                    fn()
                    torch.cuda.synchronize()
                    emit({**head, "plan": label, "ran": True})
                    continue
                us = bench(fn)
                y = fn()
                if label == f"{BASE}+{BASE}":
                    base = y
                emit({**head, "kernel": "layer", "plan": label, "path": plan.path.value, "w13": plan.w13.name,
                      "w2": plan.w2.name, "us": us, "rel_fp64": relative_error(ref, y),
                      "finite": bool(y.isfinite().all()),
                      "bit_equal_to_base": None if base is None else bool(torch.equal(y, base))})
            if marlin is not None:
                prepared, m = marlin
                fn = functools.partial(m.call, prepared, x, tw, ids.to(torch.int32))
                us = bench(fn)
                y = fn()
                emit({**head, "kernel": "layer", "plan": "vllm-marlin", "us": us, "rel_fp64": relative_error(ref, y),
                      "finite": bool(y.isfinite().all())})
            del ref
        del marlin
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
