"""``sm120lab bench moe``: time the Triton NVFP4 MoE layer against torch contenders on this GPU
(results to data/bench/moe_<gpu>_<date>.json in the shared schema, plus a plot)."""

from __future__ import annotations

import sys

from ..cmdline import seed_arg


def _tokens(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--tokens must be comma-separated positive integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"--tokens must be comma-separated positive integers, got {text!r}")
    return vals


def _check_tiles(path: str) -> None:
    """Refuse a ``--tiles`` table with a bad entry before anything is timed (a missing file is created by ``--tune``)."""
    from pathlib import Path

    from ..kernels.plan import TileTable

    p = Path(path)
    if p.is_dir():
        raise SystemExit(f"--tiles: expected a tile-table JSON file, got the folder {path!r}")
    if p.exists():
        try:
            TileTable.load(p)
        except ValueError as exc:
            raise SystemExit(f"--tiles: {exc}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks (GPU): 'sm120lab bench moe'")
    sub = p.add_subparsers(dest="bench_what", metavar="WHAT")
    m = sub.add_parser("moe", help="Triton NVFP4 MoE layer (prepared weights) vs the baseline kernel and torch "
                                   "bf16/fp8 grouped GEMM; correctness checks first")
    m.add_argument("--model", default=None,
                   help="MoE shape preset (sm120lab.moe.problem.PRESETS; default qwen3.5-397b-a17b)")
    m.add_argument("--shape", default=None, metavar="H,I,E,k",
                   help="any MoE shape instead of a preset: hidden, expert intermediate, experts, top-k")
    m.add_argument("--tokens", default="1,4,16,64,256,1024,4096", help="comma-separated T values")
    m.add_argument("--contenders", default=None,
                   help="comma-separated contenders (default: triton-w4a16, triton-w4a16-baseline, torch-bf16-grouped, "
                        "torch-fp8-grouped; also triton-w4a4, torch-loop)")
    m.add_argument("--tune", action="store_true",
                   help="time the plan's candidate tiles per T and write the winners to the tile table (--tiles)")
    m.add_argument("--tiles", default=None,
                   help="tile-table JSON to read (and write with --tune); default data/tiles/<device>.json")
    m.add_argument("--no-eager", action="store_true", help="CUDA-graph rows only (no eager timing of ours)")
    m.add_argument("--no-check", action="store_true", help="skip the correctness checks (not for reports)")
    m.add_argument("--seed", type=seed_arg, default=None, help="seed of weights and routings (default: fresh, recorded)")
    m.add_argument("--out", default=None, help="JSON path (default data/bench/moe_<gpu>_<UTC date>_<preset or shape>[_N].json)")
    m.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args) -> int:
    import torch

    from ..bench.moe import resolve_shape

    try:
        cfg = resolve_shape(args.model, args.shape)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    tokens = _tokens(args.tokens)
    if args.tiles is not None:
        _check_tiles(args.tiles)
    if not torch.cuda.is_available():
        print("sm120lab bench moe needs a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    from ..bench.moe import CONTENDERS, OPTIONAL_CONTENDERS, default_out_path, run_moe_bench
    from ..bench.plot import plot_moe
    from ..cmdline import command_line

    contenders = CONTENDERS if args.contenders is None else tuple(c.strip() for c in args.contenders.split(","))
    unknown = set(contenders) - set(CONTENDERS) - set(OPTIONAL_CONTENDERS)
    if unknown:
        raise SystemExit(f"--contenders: expected names from {', '.join(CONTENDERS + OPTIONAL_CONTENDERS)}, "
                         f"got {', '.join(sorted(unknown))}")
    out = default_out_path(name=cfg.name) if args.out is None else args.out
    doc = run_moe_bench(out, model=args.model, shape=args.shape, tokens=tokens, contenders=contenders,
                        tune=args.tune, tiles=args.tiles, check=not args.no_check, seed=args.seed,
                        eager=not args.no_eager, command=command_line("sm120lab", sys.argv[1:]))
    png = plot_moe(doc, str(out).replace(".json", ".png"))
    print(f"wrote {out} and {png}; targets: {doc['targets']}")
    if not args.no_check and not doc.get("checks_ok"):
        print("correctness checks FAILED (see 'checks' in the JSON)", file=sys.stderr)
        return 1
    return 0
