"""``sm120lab compare RUN_A RUN_B [...]``: what changed between run folders (see sm120lab.runs.compare).

Prints, per later run, the environment facts that differ and the changes of its checks grouped by
notebook (regressions, fixes and changes one per row; more than three not-comparable, new or
within-noise checks of a notebook folded into one row unless --all), then one summary line.
Runs on different devices (a CPU run against a GPU run) mark checks that ran on one side only, and
bench timings, "not comparable (device differs)" instead of regressions.

Exit status: 0 nothing got worse; 1 a regression (lost correctness evidence: a failed notebook, a
verdict that got worse, errored, was skipped where it ran before or is missing; a vanished compile
cell or bench figure; a bench figure slower beyond its noise band, or no longer finite);
2 bad input (a missing or malformed run folder, named in one line).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

#: changes listed one per row; the others fold into one row per notebook when there are many
ALWAYS_LISTED = ("regression", "fix", "improvement", "changed")
FOLD_ABOVE = 3
#: widest baseline / this-run / assessment cells
VALUE_WIDTH, ASSESS_WIDTH = 14, 14


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
    p.add_argument("--all", action="store_true", help="list every change, within-noise ones included, unfolded")
    p.add_argument("--json", metavar="FILE", type=Path, help="write the differences as JSON")
    p.set_defaults(func=run)


def breakable(text: str, width: int) -> str:
    """``text`` with line breaks after separators (``: @ / , =`` and spaces) so no line is wider
    than ``width``; a run without separators longer than ``width`` is the only thing cut. Continuation
    lines of an indented text keep its indent plus two spaces."""
    width = max(width, 8)
    lead = len(text) - len(text.lstrip(" "))
    indent = " " * (lead + 2 if lead else 0)
    lines, cur = [], ""
    for piece in re.findall(r"[^:@/,=\s]*[:@/,=\s]?", text):
        if not piece:
            continue
        if cur.strip() and len(cur) + len(piece.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = indent
        while len(cur) + len(piece) > width and len(piece) > width - len(indent):
            cut = width - len(cur)
            lines.append(cur + piece[:cut])
            cur, piece = indent, piece[cut:]
        cur += piece
    if cur.strip() or not lines:
        lines.append(cur.rstrip())
    return "\n".join(lines)


def show_value(value: Any, unit: str = "") -> str:
    """A cell value: 4 significant digits for floats, ``missing`` for an absent one."""
    if value is None:
        return "missing"
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def _unit(detail: str) -> str:
    """The unit a bench change's detail ends with (``+3.0% (noise band ±5.0%) us``)."""
    tail = detail.rsplit(" ", 1)[-1] if detail else ""
    return tail if tail.isalpha() and tail not in ("differs", "missing") else ""


def _table(console, header: list[str], rows: list[list[str]], widths: list[int]):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for name, w in zip(header, widths):
        table.add_column(name, width=w, no_wrap=True, overflow="ellipsis")
    for row in rows:
        if row and row[0].startswith("[bold]"):
            table.add_section()
        table.add_row(*[cell if cell.startswith("[") else breakable(cell, w).replace("[", r"\[")
                        for cell, w in zip(row, widths)])
    return table


def _widths(console, n_values: int, last: int) -> list[int]:
    """Column widths filling the console: each column has one space of padding on each inner side
    and one separator column between columns."""
    n = n_values + 2
    first = max(20, console.width - (2 * n - 2) - (n - 1) - VALUE_WIDTH * n_values - last)
    return [first, *[VALUE_WIDTH] * n_values, last]


def _change_rows(cmp, show_all: bool) -> list[list[str]]:
    from ..runs.compare import Assessment, ChangeKind

    styles = {Assessment.REGRESSION: "red", Assessment.FIX: "green", Assessment.IMPROVEMENT: "green",
              Assessment.WITHIN_NOISE: "dim", Assessment.NOT_COMPARABLE: "yellow"}
    rows: list[list[str]] = []
    notebooks = sorted({c.notebook for c in cmp.changes if c.kind is not ChangeKind.ENVIRONMENT})
    for nb in notebooks:
        mine = [c for c in cmp.changes if c.notebook == nb and c.kind is not ChangeKind.ENVIRONMENT]
        listed = [c for c in mine if show_all or c.assessment.value in ALWAYS_LISTED]
        folded: dict[tuple[Any, Any], list] = {}
        for c in mine:
            if c not in listed:
                folded.setdefault((c.kind, c.assessment), []).append(c)
        for group in folded.values():
            if len(group) <= FOLD_ABOVE:
                listed += group
        if not listed and all(c.assessment is Assessment.WITHIN_NOISE for c in mine) and not show_all:
            continue
        rows.append([f"[bold]{nb}[/bold]", "", "", ""])
        for c in sorted(listed, key=lambda c: (c.assessment is not Assessment.REGRESSION, c.kind.value, c.key)):
            unit = _unit(c.detail) if c.kind is ChangeKind.BENCH else ""
            s = styles.get(c.assessment, "")
            rel = c.detail.split(" ", 1)[0] if c.kind is ChangeKind.BENCH and c.detail else ""
            after = show_value(c.after, unit) + (f" ({rel})" if rel.endswith("%") else "")
            rows.append(["  " + c.key, show_value(c.before, unit), after,
                         f"[{s}]{c.assessment}[/{s}]" if s else str(c.assessment)])
        for (kind, assess), group in folded.items():
            if len(group) > FOLD_ABOVE:
                what = {ChangeKind.BENCH: "bench figures", ChangeKind.VERDICT: "verdicts",
                        ChangeKind.COMPILE: "compile cells"}.get(kind, str(kind))
                s = styles.get(assess, "")
                rows.append([f"  {len(group)} {what}", "", "",
                             f"[{s}]{assess}[/{s}]" if s else str(assess)])
    return rows


def print_comparison(console, cmp, show_all: bool = False, gate: int | None = None) -> None:
    """One comparison: title, environment table, changes table, summary line."""
    from rich.markup import escape

    from ..runs.compare import ChangeKind

    console.print(f"[bold]{escape(cmp.other)}[/bold] vs baseline [bold]{escape(cmp.baseline)}[/bold]")
    env = [[c.key, show_value(c.before), show_value(c.after), c.detail or "changed"]
           for c in cmp.changes if c.kind is ChangeKind.ENVIRONMENT]
    if env:
        console.print(_table(console, ["environment", "baseline", "this run", ""], env,
                             _widths(console, 2, 9)))
    rows = _change_rows(cmp, show_all)
    if rows:
        console.print(_table(console, ["check", "baseline", "this run", "assessment"], rows,
                             _widths(console, 2, ASSESS_WIDTH)))
    if any(r[0].lstrip().split(" ", 1)[0].isdigit() and not r[1] for r in rows):
        console.print("[dim](folded rows: --all lists every check)[/dim]")
    colour = "red" if (gate if gate is not None else len(cmp.regressions)) else "green"
    console.print(f"[{colour}]{escape(cmp.summary_line(gate))}[/{colour}]")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from ..atomic_io import write_json_atomic
    from ..runs.compare import ChangeKind, SchemaError, compare_many

    console = Console()
    from ..runs.files import inside

    if args.json is not None and args.json.is_dir():
        raise SystemExit(f"--json: expected a file path, got the folder {args.json}")
    clash = next((r for r in args.runs if args.json is not None and inside(args.json, Path(r))), None)
    if clash is not None:
        raise SystemExit(f"--json: {args.json} lies inside the run folder {clash}; write it outside the runs")
    try:
        comparisons = compare_many(args.runs, min_rel=args.min_rel)
    except (FileNotFoundError, SchemaError, ValueError) as exc:
        console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        return 2
    failing = 0
    for i, cmp in enumerate(comparisons):
        gate = [c for c in cmp.regressions
                if not (args.bench_informational and c.kind is ChangeKind.BENCH and c.after is not None
                        and math.isfinite(float(c.after)))]
        failing += len(gate)
        if i:
            console.print()
        print_comparison(console, cmp, args.all, len(gate))
    if args.json:
        try:
            write_json_atomic(args.json, [c.to_json() for c in comparisons])
        except OSError as exc:
            raise SystemExit(f"--json: cannot write {args.json}: {exc.strerror or exc}") from None
    if len(comparisons) > 1:
        colour = "red" if failing else "green"
        console.print(f"[{colour}]{failing} regression(s) over {len(comparisons)} comparisons[/{colour}]")
    return 1 if failing else 0
