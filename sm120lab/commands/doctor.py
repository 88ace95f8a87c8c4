"""``sm120lab doctor``: one screen for a bug report (GPU, toolchain, versions, env, backend verdicts)."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor", help="machine + stack report with a verdict per NVFP4 MoE backend",
        description="GPU, compute capability, driver, CUDA runtime, every nvcc, torch/triton/flashinfer/"
                    "vllm/nvidia-cutlass-dsl versions, relevant env vars, patch audit, and whether each "
                    "NVFP4 MoE backend should work here (and what it needs).")
    p.add_argument("--json", metavar="FILE", help="also write the full report as JSON (atomically)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from .. import doctor

    report = doctor.run(args.json, command="sm120lab doctor" + (f" --json {args.json}" if args.json else ""))
    doctor.render(report)
    if args.json:
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
