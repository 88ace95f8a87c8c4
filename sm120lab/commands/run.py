"""``sm120lab run``: every notebook through papermill into a run folder (see sm120lab.runner)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parse_value(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def load_params(pairs: list[list[str]] | None, params_file: str | None) -> dict:
    import yaml

    params: dict = {}
    if params_file:
        path = Path(params_file)
        if not path.is_file():
            raise SystemExit(f"--params: file not found: {path}")
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"--params: {path} must hold a mapping of parameter names (or notebook sections)")
        params.update(loaded)
    for name, value in pairs or []:
        params[name] = _parse_value(value)
    return params


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute every notebook through papermill into runs/<timestamp>-<host>-<gpu>/",
                       description=__doc__)
    p.add_argument("--only", nargs="+", metavar="NOTEBOOK", help="notebook names or prefixes, e.g. 01 03_grouped")
    p.add_argument("--out", type=Path, help="run folder (default runs/<UTC timestamp>-<host>-<gpu tag>)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="papermill parameter for every notebook that declares it (YAML value)")
    p.add_argument("--params", metavar="FILE.yaml",
                   help="YAML: global parameters and/or per-notebook sections keyed by notebook name")
    p.add_argument("--matrix", metavar="FILE.yaml",
                   help="run the notebooks once per combination of settings (see sm120lab.run_matrix); "
                        "--out is then the base folder (default runs/)")
    p.add_argument("--notebooks-dir", type=Path, help="where the notebooks are (default: the checkout's notebooks/)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..envinfo import collect
    from ..runner import default_run_dir, discover_notebooks, execute_all

    console = Console(stderr=False)
    try:
        notebooks = discover_notebooks(args.notebooks_dir, args.only)
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    if not notebooks:
        console.print("[red]no notebooks found[/red]")
        return 2
    params = load_params(args.parameter, args.params)
    if args.matrix:
        return _main_matrix(args, notebooks, params, console)
    env = collect()
    run_dir = args.out or default_run_dir(env=env)
    console.print(f"run folder: {run_dir}")
    summary = execute_all(notebooks, run_dir, params, progress=not args.no_progress, env=env)
    table = Table(title=f"sm120lab run -> {run_dir}")
    for col in ("notebook", "status", "wall s", "error"):
        table.add_column(col)
    for n in summary.notebooks:
        style = {"ok": "green", "failed": "red"}.get(n.status, "yellow")
        table.add_row(n.name, f"[{style}]{n.status}[/{style}]", f"{n.wall_s or 0:.1f}", n.error or "")
    console.print(table)
    failed = [n.name for n in summary.notebooks if n.status != "ok"]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/red]")
        return 1
    console.print(f"[green]all {len(summary.notebooks)} notebooks ok[/green]")
    return 0


def _main_matrix(args, notebooks, params, console) -> int:
    from ..run_matrix import execute_matrix, load_matrix

    try:
        combos = load_matrix(args.matrix)
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    base = args.out or Path("runs")
    summaries = execute_matrix(notebooks, base, combos, params, progress=not args.no_progress)
    bad = 0
    for combo, s in zip(combos, summaries):
        failed = [n.name for n in s.notebooks if n.status != "ok"]
        bad += bool(failed)
        console.print(f"{combo.label}: {s.run_dir} " + (f"[red]failed: {', '.join(failed)}[/red]" if failed else "[green]ok[/green]"))
    console.print(f"index: {base / 'matrix.json'}; compare with: sm120lab compare " + " ".join(str(s.run_dir) for s in summaries))
    return 1 if bad else 0
