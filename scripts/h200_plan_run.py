#!/usr/bin/env python3
"""One device call: the GPU kernel tests (tests/gpu) and ``bench moe`` per preset with the plan's tile tables.

Usage on the device machine (repo root, no install needed):
    PYTHONPATH=. python3 scripts/h200_plan_run.py --out-dir $OUT [--gpu-tests] [--tune]
        [--presets qwen3.5-397b-a17b,...] [--shape 7168,2048,256,8] [--tokens 1,4,...] [--budget-s 540]

The peer (``oai-matmul-ogs-mxfp4``) runs where ``triton_kernels`` imports (put it on PYTHONPATH). Steps, each wrapped (a failure is logged and the run goes on): ``pytest -m gpu tests/gpu`` (log and a JSON
summary with the environment and the command); for each preset ``run_moe_bench`` with ``--tune`` writing
the tile table ``<gpu>.json`` (``h200.json``, ``h100-80gb-hbm3.json``...) in the work folder and timing the plan read from it (rows carry
``plan.as_dict()``); then each ``--shape`` untuned, planned from that table (nearest key or formula).
Everything lands in a work folder that is re-packed into ``$OUT/results.tar`` after every step (the device
returns at most 8 files), plus ``$OUT/log.txt``. New T values / presets are not started after ``--budget-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = ("qwen3.5-397b-a17b", "qwen3-next-80b-a3b", "qwen3-235b-a22b", "gpt-oss-120b")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    p.add_argument("--gpu-tests", action="store_true", help="run pytest -m gpu tests/gpu first")
    p.add_argument("--pytest-args", default="", help="extra pytest arguments (e.g. -k tile)")
    p.add_argument("--tune", action="store_true", help="tune each preset (writes the tile table), then time it")
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--shape", action="append", default=[], help="H,I,E,k timed untuned (repeatable)")
    p.add_argument("--tokens", default="1,4,16,64,256,1024,4096")
    p.add_argument("--tiles", default=None, help="start from this tile table (default: the repo's, if any)")
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--contenders", default="triton-w4a16,torch-bf16-grouped,torch-fp8-grouped,oai-matmul-ogs-mxfp4")
    p.add_argument("--no-check", action="store_true", help="skip ours' checks (plans checked in an earlier call)")
    p.add_argument("--work", default="plan_run",
                   help="work folder (its tile table is reused: a later call on a warm machine goes on tuning it)")
    p.add_argument("--tag", default="", help="suffix of the output names (log, tar, each JSON), e.g. peer")
    args = p.parse_args()
    t_start = time.time()
    deadline = t_start + args.budget_s
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)  # default in the repository copy on the device (relative: the recorded paths stay portable)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"_{args.tag}" if args.tag else ""
    log_path = out / f"log{tag}.txt"
    lines: list[str] = []

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        lines.append(line)
        log_path.write_text("\n".join(lines) + "\n")

    def pack() -> None:
        tmp = out / f"results{tag}.tar.tmp"
        with tarfile.open(tmp, "w") as tf:
            for f in sorted(work.iterdir()):
                tf.add(f, arcname=f.name)
        tmp.replace(out / f"results{tag}.tar")

    import torch
    import triton

    from sm120lab.cmdline import command_line
    from sm120lab.envinfo import collect
    from sm120lab.kernels.plan import device_slug

    env = collect()
    cmd = command_line("scripts/h200_plan_run.py", sys.argv[1:])
    log(f"torch {torch.__version__} triton {triton.__version__} gpu {torch.cuda.get_device_name()} "
        f"cc {torch.cuda.get_device_capability()} driver {env['gpu'].get('driver')}; command: {cmd}")
    slug = device_slug(torch.cuda.get_device_name())
    tiles = work / f"{slug}.json"  # this GPU's table: another GPU's measurements are never written into it
    src = Path(args.tiles) if args.tiles else Path(f"data/tiles/{slug}.json")
    if src.is_file() and not tiles.exists():
        src_device = json.loads(src.read_text()).get("device")
        if args.tune and src_device != slug:
            raise SystemExit(f"--tiles: {src} holds {src_device!r} measurements; --tune on this {slug} writes "
                             f"{slug}'s table (start from a {slug} table, or from none)")
        tiles.write_text(src.read_text())
        log(f"tile table: starting from {src}")

    if args.gpu_tests:
        t0 = time.time()
        pcmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-m", "gpu", "-p", "no:cacheprovider", "tests/gpu",
                *args.pytest_args.split()]
        env_t = {**os.environ, "SM120LAB_TILES_DIR": str(work)}
        env_t.pop("TRITON_INTERPRET", None)
        try:
            res = subprocess.run(pcmd, capture_output=True, text=True, env=env_t,
                                 timeout=max(60.0, min(300.0, deadline - time.time())))
            text, rc = res.stdout + res.stderr, res.returncode
        except subprocess.TimeoutExpired as exc:
            text, rc = f"TIMEOUT after {exc.timeout:.0f} s\n" + str(exc.stdout or "")[-20000:], 124
        day = time.strftime("%Y-%m-%d", time.gmtime())
        (work / f"gpu_tests_h200_{day}.txt").write_text(f"command: {' '.join(pcmd)}\n\n{text}")
        summary = {"env": env, "command": " ".join(pcmd), "driver_command": cmd, "rc": rc,
                   "wall_s": time.time() - t0, "summary": text.strip().splitlines()[-1:] if text.strip() else []}
        (work / f"gpu_tests_h200_{day}.json").write_text(json.dumps(summary, indent=1))
        log(f"gpu tests rc={rc} in {time.time() - t0:.0f} s: {summary['summary']}")
        pack()

    from sm120lab.bench.moe import default_out_path, run_moe_bench

    tokens = tuple(int(x) for x in args.tokens.split(","))
    jobs = [(name, None, args.tune) for name in args.presets.split(",") if name] + [
        (None, s, False) for s in args.shape]
    for model, shape, tune in jobs:
        label = model or f"shape {shape}"
        if time.time() > deadline:
            log(f"{label}: skipped, time budget used up")
            continue
        try:
            from sm120lab.bench.moe import resolve_shape

            cfg = resolve_shape(model, shape)
            path = work / default_out_path("", name=cfg.name + tag).name
            doc = run_moe_bench(path, model=model, shape=shape, tokens=tokens, tune=tune, tiles=tiles,
                                contenders=tuple(args.contenders.split(",")), check=not args.no_check,
                                command=cmd, log=log, deadline=deadline, eager=False)
            log(f"{label}: checks_ok={doc.get('checks_ok')} targets: " + json.dumps(doc["targets"]))
        except Exception:  # noqa: BLE001 - recorded, the next job runs
            log(f"{label}: CRASHED\n" + traceback.format_exc())
        torch.cuda.empty_cache()
        pack()
    pack()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
