"""One device call for the correctness lab (issue 4): torch-bf16 vs the exact reference at a model
preset for several token counts, and FlashInfer's fp4_quantize diffed byte for byte.

    python3 scripts/h200_correctness.py --out DIR [--preset qwen3.5-397b-a17b] [--tokens 1 64 1024]
                                        [--skip-flashinfer]

Writes DIR/h200_moe_check.json (one entry per T: problem with its seed, the ``sm120lab check``
command that replays it, envelope, verdicts of reference, emulated-w4a4, torch-bf16 and the skip
lines of the others) and DIR/h200_fp4_quantize.json, each
with ``envinfo.collect()`` and the command, as soon as each part is done. Runs on CPU too (small
presets) for a dry run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sm120lab.atomic_io import write_json_atomic  # noqa: E402
from sm120lab.cmdline import command_line  # noqa: E402
from sm120lab.envinfo import collect  # noqa: E402
from sm120lab.moe.harness import default_device  # noqa: E402

DEFAULT_BACKENDS = ["reference", "emulated-w4a4", "torch-bf16", "flashinfer-cutlass", "flashinfer-sm12x-w4a4",
                    "flashinfer-sm12x-w4a16", "vllm-cutlass-fp4", "vllm-marlin"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="qwen3.5-397b-a17b")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 64, 1024])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-flashinfer", action="store_true")
    ap.add_argument("--backends", nargs="+", default=DEFAULT_BACKENDS,
                    help="backends to diff (default: the reference trio plus the skip lines of the others)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = default_device()
    command = command_line("python3 scripts/h200_correctness.py", sys.argv[1:])
    env = collect()

    from sm120lab.moe import make_moe_problem
    from sm120lab.moe.harness import check

    t0 = time.perf_counter()
    big = make_moe_problem(args.preset, tokens=max(args.tokens), routing="uniform", seed=args.seed, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    log(f"problem {big.describe()} in {time.perf_counter() - t0:.1f}s")
    runs = []
    payload = {"env": env, "command": command, "device": device, "runs": runs}
    for t in sorted(args.tokens):
        prob = big.take_tokens(t)
        t1 = time.perf_counter()
        res = check(prob, args.backends, probes=True, keep_output=False)
        entry = res.to_json()
        entry["seconds_total"] = round(time.perf_counter() - t1, 2)
        runs.append(entry)
        write_json_atomic(out / "h200_moe_check.json", payload)
        verdicts = {r["backend"]: (r["verdict"], r.get("rel_fro")) for r in entry["backends"]}
        log(f"T={t}: envelope e_a={res.envelope.e_a:.4g} e_w={res.envelope.e_w} {verdicts}")
        if device == "cuda":
            torch.cuda.empty_cache()

    if args.skip_flashinfer:
        return 0
    from sm120lab.moe.quantizer_diff import flashinfer_fp4_quantize_diffs

    x = big.hidden  # bf16 [T, H]: the activations the MoE quantizes first
    qpayload = {"env": env, "command": command, "input": {"shape": list(x.shape), "dtype": "bfloat16",
                                                          "gscale": float(big.a1_gscale)}}
    t2 = time.perf_counter()
    diffs = flashinfer_fp4_quantize_diffs(x, big.a1_gscale.reshape(1))
    qpayload["seconds"] = round(time.perf_counter() - t2, 1)
    qpayload["diffs"] = [d.as_dict() for d in diffs]
    write_json_atomic(out / "h200_fp4_quantize.json", qpayload)
    for d in diffs:
        log(f"fp4_quantize {d.layout}: {d.verdict} {d.reason} bytes={d.byte_match:.4g} codes={d.code_match:.4g} "
            f"scales={d.scale_match:.4g} silent={d.silent} {d.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
