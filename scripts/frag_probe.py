"""GPU probe of the fragment kernel: correctness vs fp64 at model shape, then CUDA-graph timings of its
configs against the decode/MMA paths, with copy bandwidth measured in the same process. Prints JSON lines."""
import json
import os
import sys
import time

import torch

from sm120lab.bench.ceilings import measure_copy_gbps
from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
from sm120lab.bench.timing import time_graph
from sm120lab.constants import SENTINEL
from sm120lab.kernels.moe_configs import FRAG_CONFIGS
from sm120lab.kernels.moe_frag import launch_frag
from sm120lab.kernels.moe_layer import fused_moe_packed
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe.reference import moe_reference

RECORD = {"command": "PYTHONPATH=. python3 scripts/frag_probe.py " + " ".join(sys.argv[1:]), "lines": []}


def say(**kw):
    print(json.dumps(kw), flush=True)
    RECORD["lines"].append(kw)


quick = "--quick" in sys.argv
t0 = time.time()
E, K, H, I = 512, 10, 4096, 1024  # noqa: E741
layer = make_bench_layer(E, K, H, I, seed=1, bf16=False, fp8=False)
packed = prepare_moe_weights(layer.w13, layer.w2)
say(stage="prepared", s=round(time.time() - t0, 1))
gen = torch.Generator(device="cuda")
gen.manual_seed(5)
for t in (1, 16, 64, 256):
    ids, tw = uniform_routing(t, E, K, gen=gen)
    x = torch.randn(t, H, device="cuda", generator=gen).to(torch.bfloat16)
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    for name in ("f2w4", "f2w4+f1w8", "f2w2+f1w4", "f2w4o", "f4w4", "f2w4oc4", "f2w2oc4"):
        c13, c2 = (FRAG_CONFIGS[x] for x in (name.split("+") * 2)[:2])
        out = torch.full((t, H), SENTINEL, dtype=torch.bfloat16, device="cuda")
        try:
            fused_moe_packed(x, ids, tw, packed, frag=True, frag_configs=(c13, c2), out=out, _poison=True)
            torch.cuda.synchronize()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            say(check=name, T=t, rel=err, nan=bool(out.isnan().any()), sentinel=bool((out == SENTINEL).any()))
        except Exception as exc:  # noqa: BLE001
            say(check=name, T=t, error=repr(exc)[:300])
    old = fused_moe_packed(x, ids, tw, packed, frag=False)
    say(check="old", T=t, rel=((old.double() - ref).norm() / ref.norm()).item())
copy = measure_copy_gbps()
say(copy=copy)
bw = copy["copy_GBps"]


def floor_us(ids, op_bytes_per_expert):
    active = torch.unique(ids).numel()
    return active * op_bytes_per_expert / (bw * 1e9) * 1e6


w13_bytes = 2 * I * H * 0.5625
w2_bytes = H * I * 0.5625
sets = 8
for t in (1, 4, 16, 64, 256, 1024, 4096) if not quick else (1, 16):
    routs = [uniform_routing(t, E, K, gen=gen) for _ in range(sets)]
    xs = [torch.randn(t, H, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(sets)]
    fl = sum(floor_us(ids, w13_bytes + w2_bytes) for ids, _ in routs) / sets
    fl13 = sum(floor_us(ids, w13_bytes) for ids, _ in routs) / sets
    rows = {}
    names = (["f2w4", "f2w2", "f2w4+f1w8", "f2w2+f1w8", "f2w4+f1w4", "f2w2+f1w4", "f4w4+f1w8"] if t * K <= 160 else ["f2w4o", "f2w2o", "f4w4o", "f2w4oc2"]
             if t <= 256 else ["f2w2oc2", "f2w4oc4", "f2w2oc4"])
    sets = 8 if t <= 256 else 2
    for name in names:
        c, c2 = (FRAG_CONFIGS[x] for x in (name.split("+") * 2)[:2])
        fns = [lambda x=x, ids=ids, tw=tw, c=c, c2=c2: fused_moe_packed(x, ids, tw, packed, frag=True,
                                                                        frag_configs=(c, c2))
               for x, (ids, tw) in zip(xs, routs)]
        r = time_graph(fns)
        rows[name] = r["us_median"]
        # w13 alone (unsorted only: no sort needed)
        if not c.SORTED and "+" not in name:
            bufs = [torch.empty(t * K, I, dtype=torch.bfloat16, device="cuda") for _ in range(sets)]
            f13 = [lambda x=x, ids=ids, tw=tw, b=b, c=c, t=t: launch_frag(
                x, packed.w13, b, tw.reshape(-1), ids.reshape(-1), ids.reshape(-1), num_slots=t * K, a_row_div=K,
                fuse_silu=True, mul_routing=False, sorted_cols=False, tiles=c.TILES, warps=c.num_warps)  # noqa: B023
                for x, (ids, tw), b in zip(xs, routs, bufs)]
            r13 = time_graph(f13)
            rows[name + "_w13"] = r13["us_median"]
            rows[name + "_w13_pct_copy"] = 100 * fl13 / r13["us_median"]
    fns = [lambda x=x, ids=ids, tw=tw: fused_moe_packed(x, ids, tw, packed, frag=False) for x, (ids, tw) in zip(xs, routs)]
    rows["old"] = time_graph(fns)["us_median"]
    if t >= 1024:
        from sm120lab.kernels.moe_configs import CONFIGS

        for cn in ("m128n64k64w8s2", "m128n64k64w8s3", "m64n64k64w4s4"):
            cc = CONFIGS[cn]
            fns = [lambda x=x, ids=ids, tw=tw, cc=cc: fused_moe_packed(x, ids, tw, packed, frag=False, decode=False,
                                                                        configs=(cc, cc)) for x, (ids, tw) in zip(xs, routs)]
            rows["mma_" + cn] = time_graph(fns)["us_median"]
    say(T=t, floor_us=fl, **{k: round(v, 2) for k, v in rows.items()},
        best_vs_floor=round(min(v for k, v in rows.items() if "_" not in k) / fl, 3))
say(done=round(time.time() - t0, 1))
if os.environ.get("OUT"):
    from sm120lab.atomic_io import write_json_atomic
    from sm120lab.envinfo import collect

    RECORD["env"] = collect()
    write_json_atomic(os.path.join(os.environ["OUT"], "frag_probe.json"), RECORD)
