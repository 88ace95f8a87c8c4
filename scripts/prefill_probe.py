"""GPU probe: the MMA kernel's prefill tiles: scale-word loads (``v``), the joined weight tile (``j``), and the
weights as wgmma's register operand in the K-halves order (``t``).

    sets vj, j:  git show 69690e2:sm120lab/kernels/moe_gemm.py > sm120lab/kernels/moe_gemm.py  (and moe_layer.py,
                 moe_configs.py); patch -p1 < data/bench/aux/prefill_probe_h200_2026-12-03.patch
    set t:       git apply data/bench/aux/khalf_probe_h200_2026-12-04.patch   (on the tree that recorded it)
    PYTHONPATH=. python3 scripts/prefill_probe.py OUT.jsonl [--budget-s S] [--presets a,b] [--tokens 4096,1024]
        [--set t|vj|j]

Each patch adds the ``GemmConfig`` options its set compares; the probe says in one line which patch is missing.
``vj``/``j``: ``SCALE_WORDS`` and ``JOIN_W`` on the files of commit 69690e2; the joined tile was kept and is now
the only form of the bf16 path without ``FAST`` (:mod:`sm120lab.kernels.moe_gemm`), the scale words were slower
and were dropped. Runs recorded on the H200: ``--set vj`` (``data/bench/aux/prefill_probe_h200_2026-12-03.jsonl``)
and ``--set j --tokens 4096,1024`` (``..._2.jsonl``). ``t``: ``SWAP`` (transposed accumulator: the dequantized
weights are the MMA's left operand, which wgmma reads from registers), ``KHALF`` (weight bytes in the K-halves
order of ``prepack.khalf_bytes``: the two nibbles of a tile are its two contiguous K halves, one dot each) and
their ``FAST`` form; all slower than the plan's tiles, nothing kept (``--set t --tokens 4096,1024,256,64``,
``data/bench/aux/khalf_probe_h200_2026-12-04.jsonl``).

``v`` (``GemmConfig.SCALE_WORDS``) reads a tile's E4M3 block scales as int32 words, so Triton's pipeliner
copies them asynchronously with the weights and activations (single bytes it loads synchronously, one
memory latency per K step). ``j`` (``JOIN_W``) interleaves the dequantized even/odd weight columns back
into one [N, K] tile, so each K step is one dot whose activation operand comes straight from shared
memory (no even/odd split in registers). For each preset (and H=7168, I=2048, E=256, k=8) and T: the
whole layer on the MMA path with both GEMMs on one tile, through ``fused_moe_packed``; 4 routings per
CUDA graph (``time_graph``); the first routing's output NaN-poisoned and checked against the fp32
reference of ``frag_depth_probe.reference``. The plan's own pick (any path) is timed alongside. One
JSON line per point, written as it goes; the first holds the environment, the copy bandwidth and the
command.
"""

from __future__ import annotations

import argparse
import time

import torch
from frag_depth_probe import SHAPES, reference
from probe_io import open_record, preset_layers

from sm120lab.bench.moe_problem import uniform_routing
from sm120lab.bench.timing import time_graph
from sm120lab.kernels.moe_configs import GemmConfig
from sm120lab.kernels.moe_layer import fused_moe_packed
from sm120lab.kernels.plan import Path, plan_moe
from sm120lab.nvfp4.quant_error import relative_error

BASE = GemmConfig(128, 64, 64, 8, 3)
#: per tile set: the GemmConfig option its patch adds, and the patch
_PATCHES = {"vj": ("JOIN_W", "prefill_probe_h200_2026-12-03.patch on the files of commit 69690e2"),
            "j": ("JOIN_W", "prefill_probe_h200_2026-12-03.patch on the files of commit 69690e2"),
            "t": ("KHALF", "khalf_probe_h200_2026-12-04.patch")}


def tile_sets(name: str) -> list[GemmConfig]:
    """The tiles of one run, each on its patched kernel files (see the docstring): "vj" (scale words, joined
    tile), "j" (the joined tile alone), "t" (transposed accumulator, K-halves weights)."""
    field, patch = _PATCHES[name]
    if field not in GemmConfig.__dataclass_fields__:
        raise SystemExit(f"prefill_probe: GemmConfig has no {field} option: apply data/bench/aux/{patch} first "
                         "(see the docstring)")
    return _PATCHED_SETS[name]()


_PATCHED_SETS = {
    "vj": lambda: [BASE, GemmConfig(128, 64, 64, 8, 3, SCALE_WORDS=True),
           GemmConfig(128, 64, 64, 8, 3, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(128, 64, 64, 8, 3, FAST=True, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(128, 128, 64, 8, 3, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(128, 128, 64, 8, 2, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(64, 128, 64, 4, 3, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(128, 64, 128, 8, 3, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(64, 64, 64, 4, 4, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(64, 64, 128, 4, 3, SCALE_WORDS=True, JOIN_W=True),
           GemmConfig(64, 64, 64, 4, 4)],
    "j": lambda: [BASE, GemmConfig(128, 64, 64, 8, 3, JOIN_W=True), GemmConfig(128, 64, 64, 8, 4, JOIN_W=True),
          GemmConfig(128, 64, 128, 8, 2, JOIN_W=True), GemmConfig(256, 64, 64, 8, 2, JOIN_W=True),
          GemmConfig(64, 64, 64, 4, 4), GemmConfig(64, 64, 64, 4, 4, JOIN_W=True),
          GemmConfig(64, 64, 128, 4, 3, JOIN_W=True), GemmConfig(64, 128, 64, 4, 3, JOIN_W=True)],
    # third run: the transposed accumulator (SWAP: the weights as the MMA's register operand), K-halves weights
    # (KHALF), inline-PTX dequantization (FAST), at prefill and mid-T tiles, against the plan's two MMA tiles
    "t": lambda: [BASE, GemmConfig(64, 64, 64, 4, 4),
                  *(GemmConfig(m, n, 64, w, s, FAST=True, SWAP=True, KHALF=True) for m, n, w, s in (
                      (128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 4), (64, 128, 8, 3), (256, 64, 4, 3),
                      (256, 128, 8, 3), (128, 64, 4, 4), (32, 64, 4, 3), (32, 128, 4, 3), (16, 64, 4, 4))),
                  GemmConfig(128, 64, 64, 8, 3, FAST=True, KHALF=True), GemmConfig(128, 64, 64, 4, 3, SWAP=True, KHALF=True),
                  GemmConfig(128, 64, 64, 4, 3, SWAP=True), GemmConfig(128, 128, 64, 8, 3, SWAP=True)],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--presets", default="qwen3-235b-a22b,gpt-oss-120b,shape-H7168-I2048-E256-k8,qwen3.5-397b-a17b,"
                                         "qwen3-next-80b-a3b")
    ap.add_argument("--tokens", default="4096,1024,256")
    ap.add_argument("--set", default="t", choices=("t", "vj", "j"))
    args = ap.parse_args()
    tiles = tile_sets(args.set)
    emit, _, t0 = open_record("prefill_probe.py", args)
    for name, (e, k, h, _), layer, packed, gen, shape in preset_layers(SHAPES, args.presets.split(","), t0,
                                                                            args.budget_s, emit):
        weights = {False: packed, True: None}
        if any(getattr(c, "KHALF", False) for c in tiles):
            from sm120lab.kernels.prepack import khalf_packed  # the "t" patch's

            weights[True] = khalf_packed(packed)
        for t in (int(v) for v in args.tokens.split(",")):
            routes = [uniform_routing(t, e, k, gen=gen) for _ in range(4)]
            xs = [torch.randn(t, h, device="cuda", generator=gen).to(torch.bfloat16) for _ in routes]
            ref = reference(layer, xs[0], *routes[0])
            plans = [("plan", plan_moe(shape, t, device="cuda"))]
            plans += [(c.name, plan_moe(shape, t, device="cuda", paths={Path.MMA}, tiles=(c, c))) for c in tiles]
            for tag, plan in plans:
                if time.time() - t0 > args.budget_s:
                    emit({"stopped": f"budget {args.budget_s} s spent at {name} T={t} {tag}"})
                    break
                try:
                    w = weights[plan.path is Path.MMA and getattr(plan.w13, "KHALF", False)]
                    out = fused_moe_packed(xs[0], routes[0][0], routes[0][1], w, plan=plan, _poison=True)
                    torch.cuda.synchronize()
                    fns = [lambda x=x, r=r, p=plan, w=w: fused_moe_packed(x, r[0], r[1], w, plan=p)
                           for x, r in zip(xs, routes)]
                    timing = time_graph(fns)
                    emit({"preset": name, "T": t, "tile": tag, "path": plan.path.value, "w13": plan.w13.name,
                          "w2": plan.w2.name, "us": timing["us_median"], "timing": timing,
                          "rel_vs_ref": relative_error(ref, out), "finite": bool(torch.isfinite(out).all())})
                except Exception as exc:  # noqa: BLE001 -- a tile that fails to compile or run is a result
                    emit({"preset": name, "T": t, "tile": tag, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        del weights
    emit({"done_s": time.time() - t0})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
