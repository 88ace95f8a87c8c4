#!/usr/bin/env python3
"""One device call: vLLM's Marlin NVFP4 MoE through ``sm120lab check`` on a GPU machine without vLLM.

Usage on the device machine (repo root, no install needed):
    PYTHONPATH=. SM120LAB_VLLM_CACHE=.vllm-cache python3 scripts/h200_marlin.py --out-dir $OUT

Steps, each recorded as it finishes (a failure is logged and the run goes on):
1. the wheel cache: which vLLM, from where, which modules were placeholders, the op schemas
   (``marlin_runtime().notes()``);
2. ``sm120lab check --backend vllm-marlin --device cuda --json ...`` at every model preset for
   T = 4, 64, 256, and at tiny and small with ``--faults`` (every planted fault through the same run);
   each command line, exit status and JSON report kept;
3. ``pytest -m gpu tests/gpu/test_vllm_marlin_gpu.py`` (log kept).
Everything goes into ``marlin_run/`` and is packed into ``$OUT/marlin.tar`` after each step.

How the wheel cache travels (the device machine has no registry; one carry holds at most 64 MiB with the
working tree): here, ``sm120lab upstream vllm-cache 0.26.0 --dest .vllm-cache --pack .vllm-parts`` writes
the cache as xz parts of at most 34 MiB into ``.vllm-parts/partNN/`` (ignored paths). Each part folder is
carried by one call and copied outside the repository (``/root/vparts``); ignored paths and that folder
stay on the machine while it is warm, so back-to-back calls bring them all. The last call runs
``sm120lab upstream vllm-cache 0.26.0 --from-parts /root/vparts --dest /root/vllm-cache``, which checks
every part's sha256 and the cache's own manifest before the cache is used (a part missing or damaged is
refused in one line). The recorded run of 2026-12-04 joined the parts with ``cat | xz -d | tar -x`` and
then ``--verify`` (the manifest check), before ``--from-parts`` existed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = ("qwen3.5-397b-a17b", "qwen3-next-80b-a3b", "qwen3-235b-a22b", "gpt-oss-120b")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    p.add_argument("--tokens", default="4,64,256")
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--no-tests", action="store_true")
    args = p.parse_args()
    t0 = time.time()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("marlin_run")
    work.mkdir(exist_ok=True)
    lines: list[str] = []

    def log(msg: str) -> None:
        line = f"[{time.time() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        lines.append(line)
        (work / "log.txt").write_text("\n".join(lines) + "\n")

    def pack() -> None:
        tmp = out / "marlin.tar.tmp"
        with tarfile.open(tmp, "w") as tf:
            for f in sorted(work.iterdir()):
                tf.add(f, arcname=f.name)
        tmp.replace(out / "marlin.tar")

    from sm120lab.cmdline import command_line
    from sm120lab.envinfo import collect
    from sm120lab.moe.vllm_wheel import marlin_runtime

    env = collect()
    cmd = command_line("scripts/h200_marlin.py", sys.argv[1:])
    try:
        rt = marlin_runtime()
        info = {**rt.notes(), "ops": rt.ops}
    except Exception as exc:  # noqa: BLE001 - recorded; nothing else can run
        info = {"error": f"{type(exc).__name__}: {exc}"}
    (work / "runtime.json").write_text(json.dumps({"env": env, "command": cmd, **info}, indent=1))
    log(f"runtime: {json.dumps(info)[:600]}")
    pack()
    if "error" in info:
        return 1

    jobs = [(pr, int(t), False) for pr in args.presets.split(",") if pr for t in args.tokens.split(",")]
    jobs += [("tiny", None, True), ("small", None, True)]

    def one(job):
        preset, t, faults = job
        name = f"check_{preset}" + (f"_T{t}" if t else "") + ("_faults" if faults else "")
        argv = ["check", "--preset", preset, "--device", "cuda", "--backend", "vllm-marlin",
                "--json", str(work / f"{name}.json")]
        argv += ["--tokens", str(t)] if t else []
        argv += ["--faults"] if faults else []
        started = time.time()
        res = subprocess.run([sys.executable, "-m", "sm120lab", *argv], capture_output=True, text=True, timeout=400)
        text = res.stdout + res.stderr
        (work / f"{name}.txt").write_text(f"command: sm120lab {' '.join(argv)}\nexit: {res.returncode}\n\n{text}")
        return name, res.returncode, time.time() - started, text

    with ThreadPoolExecutor(args.jobs) as pool:
        for name, rc, wall, text in pool.map(one, jobs):
            verdict = next((ln.strip() for ln in text.splitlines() if "vllm-marlin" in ln), "")[:200]
            log(f"{name}: exit {rc} in {wall:.0f} s; {verdict}")
            pack()

    if not args.no_tests:
        pcmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-m", "gpu", "-p", "no:cacheprovider",
                "tests/gpu/test_vllm_marlin_gpu.py"]
        res = subprocess.run(pcmd, capture_output=True, text=True, timeout=300)
        day = time.strftime("%Y-%m-%d", time.gmtime())
        (work / f"gpu_tests_marlin_h200_{day}.txt").write_text(
            f"command: {' '.join(pcmd[1:])}\nexit: {res.returncode}\n\n{res.stdout}{res.stderr}")
        log(f"gpu tests exit {res.returncode}: {(res.stdout.strip().splitlines() or [''])[-1]}")
    pack()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
