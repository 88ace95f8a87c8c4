#!/usr/bin/env python3
"""One device call on the H200: ``sm120lab bench moe`` (correctness checks first, then all
contenders), optionally the SM120 AOT table under the machine's Triton; everything written under $OUT (or --out-dir) as it goes.

Usage on the device machine (repo root, no install needed):
    PYTHONPATH=. python3 scripts/h200_bench.py --out-dir $OUT [--tokens 1,4,16] [--aot]
Every step is wrapped: a failure is recorded and the run goes on; partial JSON is always there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    p.add_argument("--tokens", default="1,4,16,64,256,1024,4096")
    p.add_argument("--tune", action="store_true", help="tune the tiles first (writes the tile table)")
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--aot", action="store_true", help="also build the SM120 AOT table with this machine's Triton")
    p.add_argument("--budget-s", type=float, default=480.0, help="stop starting new T values after this")
    args = p.parse_args()
    t_start = time.time()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    import torch
    import triton

    print(f"torch {torch.__version__} triton {triton.__version__} gpu {torch.cuda.get_device_name()} "
          f"cc {torch.cuda.get_device_capability()}", flush=True)
    from sm120lab.bench.moe import default_out_path, run_moe_bench
    from sm120lab.bench.plot import plot_moe
    from sm120lab.cmdline import command_line

    log_lines = []

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_lines.append(line)

    aot_proc = None
    if args.aot:  # in parallel with the benchmark: it only uses CPU cores
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        aot_out = out / f"sm120_triton{triton.__version__}.json"
        aot_proc = subprocess.Popen([sys.executable, "-m", "sm120lab.archflags.kernel_aot", "--quiet", "--jobs", "8",
                                     "--out", str(aot_out)], env=env, stdout=open(out / "aot_log.txt", "w"),
                                    stderr=subprocess.STDOUT)
    tokens = tuple(int(x) for x in args.tokens.split(","))
    path = out / default_out_path("").name
    cmd = command_line("scripts/h200_bench.py", sys.argv[1:])
    try:
        doc = run_moe_bench(path, tokens=tokens, command=cmd, log=log, tune=args.tune,
                            check=not args.no_check, seed=args.seed, deadline=t_start + args.budget_s)
        plot_moe(doc, path.with_suffix(".png"))
        log("targets: " + json.dumps(doc["targets"]))
        print("\nT      contender              op       us_med     GB/s  %copy  xfloor  timing")
        for r in doc["rows"]:
            print(f"{r['T']:<6d} {r['contender']:22s} {r['op']:5s} {r['us_median']:10.1f} {r['GBps']:8.0f} "
                  f"{r['pct_copy_bw']:6.1f} {r['x_floor'] or 0:7.2f}  {r['timing'][:12]}")
    except Exception:  # noqa: BLE001
        log("BENCH CRASHED\n" + traceback.format_exc())
    if aot_proc is not None:
        try:
            rc = aot_proc.wait(timeout=max(10.0, t_start + 560 - time.time()))
            log(f"aot exit {rc}")
        except subprocess.TimeoutExpired:
            aot_proc.kill()
            log("aot: timed out")
    (out / "log.txt").write_text("\n".join(log_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
