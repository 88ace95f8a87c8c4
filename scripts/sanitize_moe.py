#!/usr/bin/env python3
"""The project's MoE kernels at small odd shapes, on every path, for compute-sanitizer.

    compute-sanitizer --tool memcheck|racecheck|initcheck python3 scripts/sanitize_moe.py

Shapes (H, I, E, k): (512, 256, 16, 4) and (384, 192, 12, 3); T in 1, 5, 37, 300; paths decode,
fragment and MMA forced through :func:`sm120lab.kernels.plan.plan_moe` (``paths=``). Each call's output
is poisoned with SENTINEL and checked against the fp64 reference (< 1e-2, every row written), so a
kernel that the sanitizer slows or perturbs still has to be right. Prints one line per case.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ((512, 256, 16, 4), (384, 192, 12, 3))
TOKENS = (1, 5, 37, 300)


def main() -> int:
    import torch

    from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
    from sm120lab.constants import SENTINEL
    from sm120lab.kernels.moe_layer import fused_moe_packed
    from sm120lab.kernels.plan import MoEShape, plan_moe
    from sm120lab.kernels.plan import Path as KPath
    from sm120lab.kernels.prepack import prepare_moe_weights
    from sm120lab.moe.reference import moe_reference
    from sm120lab.nvfp4.quant_error import relative_error

    bad = 0
    for h, i, e, k in SHAPES:
        layer = make_bench_layer(e, k, h, i, seed=5, bf16=False, fp8=False)
        packed = prepare_moe_weights(layer.w13, layer.w2)
        shape = MoEShape.of(e, h, i, k)
        gen = torch.Generator(device="cuda").manual_seed(6)
        for t in TOKENS:
            ids, tw = uniform_routing(t, e, k, gen=gen)
            x = torch.randn(t, h, device="cuda", generator=gen).to(torch.bfloat16)
            ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
            for path in (KPath.DECODE, KPath.FRAG, KPath.MMA):
                try:
                    plan = plan_moe(shape, t, device="cuda", paths={path})
                    out = torch.full((t, h), SENTINEL, dtype=torch.bfloat16, device="cuda")
                    fused_moe_packed(x, ids, tw, packed, plan=plan, out=out, _poison=True)
                    torch.cuda.synchronize()
                    rel = relative_error(ref, out)
                    written = bool(torch.isfinite(out).all()) and not bool((out == SENTINEL).any())
                    ok = written and rel < 1e-2
                    print(f"H{h} I{i} E{e} k{k} T={t} {plan.path.value} {plan.w13.name}/{plan.w2.name}: "
                          f"rel {rel:.2e} written {written} {'ok' if ok else 'WRONG'}", flush=True)
                    bad += not ok
                except Exception as exc:  # noqa: BLE001 - a path this shape cannot take is reported, not fatal
                    print(f"H{h} I{i} E{e} k{k} T={t} {path.value}: not run ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160]})", flush=True)
    print(f"cases wrong: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
