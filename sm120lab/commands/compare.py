"""``sm120lab compare RUN_A RUN_B [...]``: what changed between run folders (see sm120lab.compare)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="differences between run folders; exit 1 on a correctness regression",
                       description=__doc__)
    p.add_argument("runs", nargs="+", help="run folders; each later one is compared with the first")
    p.add_argument("--min-rel", type=float, default=0.05,
                   help="smallest relative bench change ever called a regression (default 0.05)")
    p.add_argument("--all", action="store_true", help="also list bench figures within the noise band")
    p.add_argument("--json", metavar="FILE", help="write the differences as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..atomic_io import write_json_atomic
    from ..compare import compare_many

    console = Console()
    try:
        comparisons = compare_many(args.runs, min_rel=args.min_rel)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    styles = {"regression": "red", "fix": "green", "improvement": "green", "within-noise": "dim"}
    regressions = 0
    for cmp in comparisons:
        table = Table(title=f"{cmp.other}  vs  baseline {cmp.baseline}")
        for col in ("kind", "notebook", "key", "before", "after", "assessment", "detail"):
            table.add_column(col, overflow="fold")
        shown = [c for c in cmp.changes if args.all or c.assessment != "within-noise"]
        for c in shown:
            s = styles.get(c.assessment, "")
            table.add_row(c.kind, c.notebook, c.key, str(c.before), str(c.after),
                          f"[{s}]{c.assessment}[/{s}]" if s else c.assessment, c.detail)
        if shown:
            console.print(table)
        else:
            console.print(f"{cmp.other} vs {cmp.baseline}: no differences")
        regressions += len(cmp.correctness_regressions)
    if args.json:
        write_json_atomic(args.json, [{"baseline": c.baseline, "other": c.other,
                                       "changes": [ch.__dict__ for ch in c.changes]} for c in comparisons])
    if regressions:
        console.print(f"[red]{regressions} correctness regression(s)[/red]")
        return 1
    return 0
