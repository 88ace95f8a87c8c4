#!/usr/bin/env python3
"""One device call on the H200: GPU correctness checks of the Triton NVFP4 MoE op, then
``sm120lab bench moe`` (all contenders), writing JSON/PNG under $OUT (or --out-dir) as it goes.

Usage on the device machine (repo root, no install needed):
    PYTHONPATH=. python3 scripts/h200_bench.py --out-dir $OUT [--quick] [--skip-check]
Every step is wrapped: a failure is recorded and the run goes on; partial JSON is always there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    p.add_argument("--quick", action="store_true", help="smoke run: T in {1,16,256,4096}, 20 reps")
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--tokens", default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--budget-s", type=float, default=500.0, help="stop starting new T values after this")
    args = p.parse_args()
    t_start = time.time()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    import torch
    import triton

    print(f"torch {torch.__version__} triton {triton.__version__} gpu {torch.cuda.get_device_name()} "
          f"cc {torch.cuda.get_device_capability()}", flush=True)
    from sm120lab.atomic_io import write_json_atomic
    from sm120lab.bench.moe import default_out_path, run_moe_bench
    from sm120lab.bench.plot import plot_moe

    log_lines = []

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_lines.append(line)

    if not args.skip_check:
        try:
            from sm120lab.bench.check import run_checks

            res = run_checks(log=log)
            write_json_atomic(out / "check.json", {"checks": res, "all_ok": all(r.get("ok") for r in res)})
            log(f"checks: {sum(bool(r.get('ok')) for r in res)}/{len(res)} ok")
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            log("CHECKS CRASHED\n" + traceback.format_exc())
    tokens = (1, 16, 256, 4096) if args.quick else (1, 4, 16, 64, 256, 1024, 4096)
    if args.tokens:
        tokens = tuple(int(x) for x in args.tokens.split(","))
    reps = args.reps or (20 if args.quick else 50)
    path = out / default_out_path("").name
    cmd = "PYTHONPATH=. python3 scripts/h200_bench.py " + " ".join(sys.argv[1:])
    try:
        deadline = t_start + args.budget_s
        doc = run_moe_bench(path, tokens=tokens, reps=reps, command=cmd, log=log, deadline=deadline)
        plot_moe(doc, path.with_suffix(".png"))
        log("targets: " + json.dumps(doc["targets"]))
        print("\nT      contender              op       us_med     GB/s  %copy  TFLOP/s  timing")
        for r in doc["rows"]:
            print(f"{r['T']:<6d} {r['contender']:22s} {r['op']:5s} {r['us_median']:10.1f} {r['GBps']:8.0f} "
                  f"{r['pct_copy_bw']:6.1f} {r['TFLOPs']:8.1f}  {r['timing'][:12]}")
    except Exception:  # noqa: BLE001
        log("BENCH CRASHED\n" + traceback.format_exc())
    (out / "log.txt").write_text("\n".join(log_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
