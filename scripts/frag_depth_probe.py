"""GPU probe: the fragment kernels with 1-4 K chunks in flight (``FragConfig.DEPTH``), the whole layer.

    PYTHONPATH=. python3 scripts/frag_depth_probe.py OUT.jsonl [--budget-s S] [--presets a,b] [--tokens 1,4,16]

Per preset (and the untuned shape H=7168, I=2048, E=256, k=8) and T: the plan's fragment tiles as the
H200 table picks them, run with DEPTH 1, 2, 3 and 4 on both GEMMs (the tiles otherwise unchanged).
Each layer output (NaN-poisoned buffers) is checked against an fp32 reference of the same NVFP4
weights on the routed experts (``rel`` = relative Frobenius error; W4A16 passes below 1e-2) and
against the DEPTH = 1 output of the same run (``bit_equal``: the depth changes no arithmetic). The
layer is timed with CUDA graphs (:func:`sm120lab.bench.timing.time_graph`, a pass over 4 routings),
with the layer's NVFP4 bytes over its time as % of the copy bandwidth measured in the same process.
One JSON line per (preset, T, depth), written as it goes; stops starting new work after ``--budget-s``.

``DEPTH`` is not in the package: the probe runs on commit e41b0d8 with
``data/bench/aux/frag_depth_probe_h200_2026-12-03.patch`` applied (``git apply``). Recorded:
``data/bench/aux/frag_depth_probe_h200_2026-12-03.jsonl`` (every deeper prefetch was slower, so the patch
was not kept; notes/triton_kernels.md), by this script at d36c9ff, whose reference was its own copy of the
same formula; it now calls the package's.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from probe_io import open_record, preset_layers

from sm120lab.bench.moe_problem import dequantize_to, uniform_routing
from sm120lab.bench.timing import time_graph
from sm120lab.kernels.moe_layer import fused_moe_packed
from sm120lab.kernels.plan import Path, plan_moe
from sm120lab.moe.grouping import grouped_moe_forward
from sm120lab.moe.problem import PRESETS
from sm120lab.nvfp4 import NVFP4Tensor
from sm120lab.nvfp4.quant_error import relative_error

SHAPES = {**{n: (PRESETS[n].E, PRESETS[n].k, PRESETS[n].H, PRESETS[n].I) for n in
             ("qwen3.5-397b-a17b", "qwen3-next-80b-a3b", "qwen3-235b-a22b", "gpt-oss-120b")},
          "shape-H7168-I2048-E256-k8": (256, 8, 7168, 2048)}


def subset(q: NVFP4Tensor, experts: torch.Tensor) -> NVFP4Tensor:
    """The experts ``experts`` of ``q`` (linear scales)."""
    return NVFP4Tensor(data=q.data[experts], scale=q.linear_scale()[experts],
                       global_scale=q.global_scale.reshape(-1)[experts].reshape(-1, 1),
                       shape=torch.Size((experts.numel(), *q.shape[1:])), scale_layout="linear")


def reference(layer, x, ids, tw) -> torch.Tensor:
    """fp32 layer on the exact dequantized weights of the routed experts, bf16-rounded intermediate
    (:func:`sm120lab.moe.grouping.grouped_moe_forward`, TF32 off)."""
    def expert(q):
        return lambda e: dequantize_to(subset(q, torch.tensor([e], device=x.device)), torch.float32)[0]

    return grouped_moe_forward(x.float(), ids, tw.float(), layer.E, expert(layer.w13), expert(layer.w2),
                               act_quant=lambda a: a.to(torch.bfloat16).float())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--presets", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="1,4,16")
    args = ap.parse_args()
    emit, copy, t0 = open_record("frag_depth_probe.py", args)
    for name, (e, k, h, _), layer, packed, gen, shape in preset_layers(SHAPES, args.presets.split(","), t0,
                                                                            args.budget_s, emit):
        for t in (int(v) for v in args.tokens.split(",")):
            if time.time() - t0 > args.budget_s:
                break
            routes = [uniform_routing(t, e, k, gen=gen) for _ in range(4)]
            xs = [torch.randn(t, h, device="cuda", generator=gen).to(torch.bfloat16) for _ in routes]
            ref = reference(layer, xs[0], *routes[0])
            active = sum(int(torch.unique(ids).numel()) for ids, _ in routes) / len(routes)
            floor_us = layer.nvfp4_bytes_per_expert("moe") * active / (copy * 1e3)
            base = plan_moe(shape, t, device="cuda")
            if base.path is not Path.FRAG:
                emit({"preset": name, "T": t, "skipped": f"the plan's path is {base.path.value}"})
                continue
            first = None
            for depth in (1, 2, 3, 4):
                plan = plan_moe(shape, t, device="cuda", tiles=(replace(base.w13, DEPTH=depth),
                                                                replace(base.w2, DEPTH=depth)))
                out = fused_moe_packed(xs[0], routes[0][0], routes[0][1], packed, plan=plan, _poison=True)
                torch.cuda.synchronize()
                first = out.clone() if first is None else first
                fns = [lambda x=x, r=r, p=plan, w=packed: fused_moe_packed(x, r[0], r[1], w, plan=p)
                       for x, r in zip(xs, routes)]
                timing = time_graph(fns)
                emit({"preset": name, "T": t, "depth": depth, "w13": plan.w13.name, "w2": plan.w2.name,
                      "us": timing["us_median"], "timing": timing, "floor_us": floor_us,
                      "x_floor": timing["us_median"] / floor_us, "rel_vs_ref": relative_error(ref, out),
                      "bit_equal_depth1": bool(torch.equal(out, first)), "finite": bool(torch.isfinite(out).all())})
    emit({"done_s": time.time() - t0})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
