"""``sm120lab archflags``: the probe x toolkit x target compile matrix with SASS evidence.

Compiles the probe kernels (sm120lab/archflags/cuda_probes/*.cu) with each CUDA toolkit (`sm120lab toolchains
--list`) for each target (sm_120a, compute_120f->sm_121a, ...), records accepted / rejected-arch /
rejected-ptxas, the first error, time, SASS opcodes and macros, plus Triton AOT rows; cells are cached; the
result is written atomically with envinfo."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("archflags", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              help="compile every probe for every toolkit and target; record status + SASS evidence")
    p.add_argument("--toolkit", nargs="+", metavar="V", help="toolkits by version (default: all found)")
    p.add_argument("--target", nargs="+", metavar="T", help="targets (default: the standard list)")
    p.add_argument("--probe", nargs="+", metavar="P",
                   help="probes (default: all): names of sm120lab/archflags/cuda_probes/*.cu and/or triton_dot_bf16, "
                        "triton_dot_scaled_mxfp4, triton_dot_scaled_nvfp4")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="output JSON (default data/archflags/matrix.json); cells are merged into the "
                        "matrix already there (same toolkit/probe/target replaced, the rest kept)")
    p.add_argument("--replace", action="store_true",
                   help="write exactly this run's cells, dropping the cells already in --json")
    p.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    p.add_argument("--no-cache", action="store_true", help="recompile cached cells")
    p.add_argument("--no-triton", action="store_true", help="skip the Triton AOT rows")
    p.add_argument("--triton-cc", nargs="+", type=int, default=None, metavar="CC",
                   help="Triton target compute capabilities (default 90 100 120 121)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from ..archflags import matrix as mx
    from ..archflags.summary import cell_code
    from ..archflags.triton_aot import DEFAULT_CCS, TRITON_PROBES
    from ..cmdline import command_line

    out = args.json or mx.default_json()
    try:
        if not args.replace:
            mx.read_matrix(out)  # refuse an unreadable file before compiling anything
    except mx.MatrixFileError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    triton_asked = [p for p in (args.probe or []) if p in TRITON_PROBES]
    cpp_asked = [p for p in (args.probe or []) if p not in TRITON_PROBES]
    try:
        if args.probe and not cpp_asked:
            result = {"schema": "sm120lab.archflags/1", "toolkits": [], "targets": [], "probes": {},
                      "wall_seconds": 0.0, "cells_compiled": 0, "cells": []}
        else:
            tks, tgs, prs = mx.resolve(args.toolkit, args.target, cpp_asked or None)
            result = mx.run_matrix(tks, tgs, prs, jobs=args.jobs, use_cache=not args.no_cache)
    except ValueError as exc:
        print(f"archflags: {exc}", file=sys.stderr)
        return 2
    if not args.no_triton and (not args.probe or triton_asked):
        try:
            from ..archflags.triton_aot import triton_rows
            rows = triton_rows(ccs=tuple(args.triton_cc or DEFAULT_CCS), probes=tuple(triton_asked or TRITON_PROBES))
            result["cells"].extend(rows)
            result["triton"] = {"toolkit": rows[0]["toolkit"] if rows else None}
        except (ImportError, RuntimeError) as exc:
            print(f"archflags: Triton rows skipped: {exc}", file=sys.stderr)
    try:
        _, kept = mx.write_matrix(result, out, command=command_line("sm120lab", getattr(args, "argv", None)), replace=args.replace)
    except mx.MatrixFileError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"--json: cannot write {out} ({exc.strerror or exc}); expected a writable file path", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for c in result["cells"]:
        counts[cell_code(c)] = counts.get(cell_code(c), 0) + 1
    print(f"{len(result['cells'])} cells ({result['cells_compiled']} compiled, rest cached) in "
          f"{result['wall_seconds']} s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"wrote {out}" + (f" (merged: {kept} earlier cells kept)" if kept else ""))
    return 0
