"""GPU probe: the fragment kernels' ``SHARE_B`` option (both weight tiles of a program multiply one activation load
per lane, issued inside the MMA asm) against the same tile without it, kernels alone, T = 1-4096.

    PYTHONPATH=. [SM120LAB_VLLM_CACHE=DIR] python3 scripts/share_b_probe.py OUT.jsonl [--presets P,...] [--tokens T,...]
        [--layer-tokens T,...] [--tiles TABLE] [--seed S]

Why (notes/triton_kernels.md, thirteenth round): ncu on the H100 at T = 1024 puts the w2 kernel at 84-88% of its
L1/TEX throughput (DRAM 33-47%), and each lane's activations are 4 of the 5 KB a ``f2w2oc2`` warp loads per K chunk:
Triton gives each of the program's two weight tiles its own load of the same activations. ``SHARE_B`` loads them
once (12 -> 8 loads per loop step in ``f2w2oc2``'s SASS, sm_90, Triton 3.9).

Per preset and T, on the same seeded weights and routing: each two-tile fragment tile the plan can pick there
(``f2w4`` unsorted up to T = 16; ``f2w2o`` from T = 16 to 256; ``f2w2oc2`` from T = 256), w13 and w2 alone, without
and with ``SHARE_B``, into NaN-poisoned outputs, timed with ``triton.testing.do_bench_cudagraph``; the two outputs
must be bit-identical (the same products in the same order). Then, at ``--layer-tokens``, the whole layer: the tile
table's plan, the same plan with each two-tile fragment tile replaced by its ``SHARE_B`` twin (``...b``; where the
table runs the MMA path, the fragment plan ``f2w2oc2b`` for both), each against fp64 of the same NVFP4 weights
(``rel_fp64``) and bit-compared with the table's fragment plan, and vLLM's Marlin in the same process where its wheel
cache is set. One JSON line per measurement; the first line is the environment.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from probe_io import decode_case, open_record, preset_layers  # noqa: E402

from sm120lab.kernels.moe_configs import FRAG_CONFIGS  # noqa: E402
from sm120lab.kernels.moe_frag import launch_frag  # noqa: E402
from sm120lab.kernels.moe_layer import fused_moe_packed  # noqa: E402
from sm120lab.kernels.moe_sort import moe_sort  # noqa: E402
from sm120lab.kernels.plan import Path as KPath  # noqa: E402
from sm120lab.kernels.plan import TileTable, plan_moe  # noqa: E402
from sm120lab.moe.problem import PRESETS  # noqa: E402
from sm120lab.moe.reference import moe_reference  # noqa: E402
from sm120lab.nvfp4.quant_error import relative_error  # noqa: E402


def bench(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3


def tiles_at(t: int) -> list[str]:
    return (["f2w4"] if t <= 16 else []) + (["f2w2o"] if 16 <= t <= 256 else []) + (["f2w2oc2"] if t >= 256 else [])


def twin(cfg):
    """The ``SHARE_B`` twin of a fragment tile (the tile itself where none is a candidate)."""
    if getattr(cfg, "SHARE_B", True):
        return cfg
    return FRAG_CONFIGS.get(cfg.name + "b", cfg) if cfg.SORTED or cfg.name == "f2w4" else cfg


def marlin_for(layer, emit):
    """(prepared weights, backend) of vLLM's Marlin, or None (the reason emitted) where it cannot run."""
    from sm120lab.moe.backends.vllm_nvfp4 import VllmMarlin

    m = VllmMarlin()
    why = m.skip_reason("cuda")
    if why is None:
        try:
            m.runtime()
            return m.prepare_weights(layer.w13, layer.w2), m
        except Exception as exc:  # a probe: record why and go on without Marlin
            why = f"{type(exc).__name__}: {exc}"
    emit({"marlin": "not run", "why": why})
    return None


def layer_rows(emit, head, layer, packed, shape, case, table, marlin) -> None:
    """The whole layer at one T: the table's plan, its SHARE_B twin plan, Marlin."""
    ids, tw, x = case["ids"], case["tw"], case["x"]
    t = x.shape[0]
    base = plan_moe(shape, t, device="cuda", table=table)
    plans = [("table", base)]
    if base.path is KPath.FRAG:
        a, b = twin(base.w13), twin(base.w2) if base.w2.SORTED else base.w2
        if (a, b) != (base.w13, base.w2):
            plans.append(("share_b", plan_moe(shape, t, device="cuda", tiles=(a, b))))
    else:
        plans += [(name, plan_moe(shape, t, device="cuda", tiles=(FRAG_CONFIGS[name], FRAG_CONFIGS[name])))
                  for name in ("f2w2oc2", "f2w2oc2b")]
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    first = None
    for label, plan in plans:
        fn = functools.partial(fused_moe_packed, x, ids, tw, packed, plan=plan)
        us = bench(fn)
        y = fn()
        if plan.path is KPath.FRAG and first is None:
            first = y
        emit({**head, "kernel": "layer", "plan": label, "path": plan.path.value, "w13": plan.w13.name,
              "w2": plan.w2.name, "us": us, "rel_fp64": relative_error(ref, y), "finite": bool(y.isfinite().all()),
              "bit_equal_to_first_frag": bool(first is not None and torch.equal(y, first))})
    if marlin is not None:
        prepared, m = marlin
        fn = functools.partial(m.call, prepared, x, tw, ids.to(torch.int32))
        us = bench(fn)
        y = fn()
        emit({**head, "kernel": "layer", "plan": "vllm-marlin", "us": us, "rel_fp64": relative_error(ref, y),
              "finite": bool(y.isfinite().all())})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--presets", default="qwen3.5-397b-a17b,gpt-oss-120b,qwen3-235b-a22b,qwen3-next-80b-a3b")
    p.add_argument("--tokens", default="1,4,16,64,256,1024,4096")
    p.add_argument("--layer-tokens", default="256,1024,4096", help="T of the layer rows (empty: none)")
    p.add_argument("--tiles", default="data/tiles/h200.json")
    p.add_argument("--seed", type=int, default=5, help="weights' seed; the inputs' generator takes seed + 1")
    args = p.parse_args()
    emit, copy, t0 = open_record("share_b_probe.py", args)
    shapes = {n: (PRESETS[n].E, PRESETS[n].k, PRESETS[n].H, PRESETS[n].I) for n in args.presets.split(",")}
    table = TileTable.load(args.tiles)
    layer_ts = [int(x) for x in args.layer_tokens.split(",") if x]
    for name, (e, k, h, n_inter), layer, packed, gen, shape in preset_layers(
            shapes, list(shapes), t0, math.inf, emit, seed=args.seed, input_seed=args.seed + 1):
        marlin = marlin_for(layer, emit) if layer_ts else None
        for t in layer_ts:
            case = decode_case(layer, k, h, t, gen)
            layer_rows(emit, {"preset": name, "T": t, "active_experts": case["n_active"]}, layer, packed, shape,
                       case, table, marlin)
        del marlin
        for t in (int(x) for x in args.tokens.split(",") if x):
            case = decode_case(layer, k, h, t, gen)
            ids, x, s, twf, flat = (case[key] for key in ("ids", "x", "s", "twf", "flat"))
            a2 = torch.randn(s, n_inter, device="cuda", generator=gen).to(torch.bfloat16)
            head = {"preset": name, "T": t, "active_experts": case["n_active"]}
            for tile in tiles_at(t):
                c = FRAG_CONFIGS[tile]
                cols = moe_sort(ids, e, c.block_m)[::-1] if c.SORTED else (flat, flat)
                for op, a, w, n_out, dt, kw in (
                        ("w13", x, packed.w13, n_inter, torch.bfloat16, {"a_row_div": k, "fuse_silu": True,
                                                                        "mul_routing": False}),
                        ("w2", a2, packed.w2, h, torch.float32, {"a_row_div": 1, "fuse_silu": False,
                                                                "mul_routing": True})):
                    outs = []
                    for share in (False, True):
                        o = torch.full((s, n_out), float("nan"), dtype=dt, device="cuda")
                        fn = functools.partial(launch_frag, a, w, o, twf, cols[0], cols[1], num_slots=s,
                                               sorted_cols=c.SORTED, tiles=c.TILES, warps=c.num_warps, cg=c.CG,
                                               share_b=share, **kw)
                        us = bench(fn)
                        outs.append(o)
                        emit({**head, "kernel": op, "tile": tile, "share_b": share, "us": us,
                              "bit_equal": bool(torch.equal(o.nan_to_num(0.0), outs[0].nan_to_num(0.0))),
                              "nan_same": bool(torch.equal(o.isnan(), outs[0].isnan()))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
