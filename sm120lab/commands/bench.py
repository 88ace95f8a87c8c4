"""``sm120lab bench moe``: time the Triton NVFP4 MoE layer against torch contenders on this GPU
(results to data/bench/moe_<gpu>_<date>.json in the shared schema, plus a plot)."""

from __future__ import annotations

import sys


def _tokens(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--tokens must be comma-separated positive integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"--tokens must be comma-separated positive integers, got {text!r}")
    return vals


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks (GPU): 'sm120lab bench moe'")
    sub = p.add_subparsers(dest="bench_what", metavar="WHAT")
    m = sub.add_parser("moe", help="Triton NVFP4 MoE layer vs torch bf16/fp8 grouped GEMM and a per-expert loop")
    m.add_argument("--model", default="qwen3.5-397b-a17b", help="MoE shape preset (sm120lab.moe.problem.PRESETS)")
    m.add_argument("--tokens", default="1,4,16,64,256,1024,4096", help="comma-separated T values")
    m.add_argument("--contenders", default=None, help="comma-separated subset of the contenders (default all)")
    m.add_argument("--reps", type=int, default=50, help="timed repetitions per measurement (>= 50 for reports)")
    m.add_argument("--loop-reps", type=int, default=10, help="repetitions for the slow per-expert loop")
    m.add_argument("--no-sweep", action="store_true", help="use the heuristic tile configs, no per-T sweep")
    m.add_argument("--check", action="store_true", help="run the GPU correctness checks first")
    m.add_argument("--out", default=None, help="JSON path (default data/bench/moe_<gpu>_<UTC date>.json)")
    m.set_defaults(func=_run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("sm120lab bench moe needs a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    from ..atomic_io import write_json_atomic
    from ..bench.moe import CONTENDERS, default_out_path, run_moe_bench
    from ..bench.plot import plot_moe

    contenders = CONTENDERS if args.contenders is None else tuple(c.strip() for c in args.contenders.split(","))
    out = default_out_path() if args.out is None else args.out
    command = "sm120lab " + " ".join(sys.argv[1:])
    if args.check:
        from ..bench.check import run_checks

        res = run_checks()
        from pathlib import Path

        check_path = Path(out).parent / "aux" / (Path(out).stem + "_check.json")
        write_json_atomic(check_path, {"command": command, "checks": res, "all_ok": all(r.get("ok") for r in res)})
        if not all(r.get("ok") for r in res):
            print("correctness checks FAILED (see *_check.json); benchmark continues", file=sys.stderr)
    doc = run_moe_bench(out, model=args.model, tokens=_tokens(args.tokens), contenders=contenders, reps=args.reps,
                        loop_reps=args.loop_reps, sweep=not args.no_sweep, command=command)
    png = plot_moe(doc, str(out).replace(".json", ".png"))
    print(f"wrote {out} and {png}; targets: {doc['targets']}")
    return 0
