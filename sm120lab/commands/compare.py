"""``sm120lab compare RUN_A RUN_B [...]``: what changed between run folders (see sm120lab.compare).

Exit status: 0 nothing got worse; 1 a regression (lost correctness evidence: a failed notebook, a
verdict that got worse, errored, was skipped where it ran before or is missing; a vanished compile
cell or bench figure; a bench figure slower beyond its noise band, or no longer finite);
2 bad input (a missing or malformed run folder, named in one line).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def _min_rel(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="differences between run folders; exit 1 on any regression",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders; each later one is compared with the first")
    p.add_argument("--min-rel", type=_min_rel, default=0.05,
                   help="smallest relative bench change ever called a regression (default 0.05)")
    p.add_argument("--bench-informational", action="store_true",
                   help="report slower bench figures but do not fail on them (runs on different machines)")
    p.add_argument("--all", action="store_true", help="also list bench figures within the noise band")
    p.add_argument("--json", metavar="FILE", type=Path, help="write the differences as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..atomic_io import write_json_atomic
    from ..compare import Assessment, ChangeKind, SchemaError, compare_many

    console = Console()
    if args.json is not None and args.json.is_dir():
        raise SystemExit(f"--json: expected a file path, got the folder {args.json}")
    try:
        comparisons = compare_many(args.runs, min_rel=args.min_rel)
    except (FileNotFoundError, SchemaError, ValueError) as exc:
        console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        return 2
    styles = {Assessment.REGRESSION: "red", Assessment.FIX: "green", Assessment.IMPROVEMENT: "green",
              Assessment.WITHIN_NOISE: "dim"}
    failing = 0
    for cmp in comparisons:
        table = Table(title=f"{cmp.other}  vs  baseline {cmp.baseline}")
        for col in ("kind", "notebook", "key", "before", "after", "assessment", "detail"):
            table.add_column(col, overflow="fold")
        shown = [c for c in cmp.changes if args.all or c.assessment is not Assessment.WITHIN_NOISE]
        for c in shown:
            s = styles.get(c.assessment, "")
            cell = f"[{s}]{c.assessment}[/{s}]" if s else str(c.assessment)
            table.add_row(str(c.kind), escape(c.notebook), escape(c.key), escape(str(c.before)),
                          escape(str(c.after)), cell, escape(c.detail))
        if shown:
            console.print(table)
        else:
            console.print(f"{escape(cmp.other)} vs {escape(cmp.baseline)}: no differences")
        gate = [c for c in cmp.regressions
                if not (args.bench_informational and c.kind is ChangeKind.BENCH and c.after is not None
                        and math.isfinite(float(c.after)))]
        failing += len(gate)
        if gate:
            console.print(f"[red]{cmp.other}: {len(gate)} regression(s), {len(cmp.correctness_regressions)} "
                          f"of correctness evidence[/red]")
    if args.json:
        try:
            write_json_atomic(args.json, [c.to_json() for c in comparisons])
        except OSError as exc:
            raise SystemExit(f"--json: cannot write {args.json}: {exc.strerror or exc}") from None
    if failing:
        console.print(f"[red]{failing} regression(s)[/red]")
        return 1
    return 0
