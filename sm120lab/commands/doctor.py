"""``sm120lab doctor``: one screen for a bug report (GPU, toolchain, versions, env, backend verdicts)."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor", help="machine + stack report with a verdict per NVFP4 MoE backend",
        description="GPU, compute capability, driver, CUDA runtime, every nvcc, torch/triton/flashinfer/"
                    "vllm/nvidia-cutlass-dsl versions, relevant env vars, patch audit, and whether each "
                    "NVFP4 MoE backend should work here (and what it needs).")
    p.add_argument("--json", metavar="FILE", help="also write the full report as JSON (atomically)")
    p.add_argument("--measure", choices=["auto", "cuda", "cpu", "off"], default="auto",
                   help="run every MoE backend through the correctness harness (preset tiny) and show the real "
                        "verdicts: auto (default) = on the GPU when one is visible; off = predictions only")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the report; exit 1 when a measured backend is garbage or errored (2: bad --json)."""
    import sys

    from .. import doctor
    from ..cmdline import command_line

    if args.measure == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--measure cuda: torch sees no CUDA device; expected a GPU machine (or --measure cpu)", file=sys.stderr)
            return 2
    try:
        report = doctor.run(args.json, command=command_line("sm120lab", getattr(args, "argv", None)),
                            measure_on=None if args.measure == "off" else args.measure)
    except OSError as exc:
        print(f"--json: cannot write {args.json} ({exc.strerror or exc}); expected a writable file path", file=sys.stderr)
        return 2
    doctor.render(report)
    if args.json:
        print(f"wrote {args.json}", file=sys.stderr)
    bad = doctor.failures(report)
    if bad:
        print(f"doctor: measured failures: {'; '.join(bad)}", file=sys.stderr)
        return 1
    return 0
