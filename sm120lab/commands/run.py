"""``sm120lab run``: every notebook through papermill into a run folder (see sm120lab.runs.execute).

A folder given with ``--out`` that already holds files is refused unless ``--resume`` (run its
missing, failed or not-run notebooks; same machine and software only) or ``--overwrite`` (replace
that earlier run) is given.
"""

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
    """Parameters from ``--params FILE.yaml`` then ``-p NAME VALUE``; ``SystemExit`` with one line on bad input."""
    from ..runs.matrix import read_yaml

    params: dict = {}
    if params_file:
        path = Path(params_file)
        try:
            loaded = read_yaml(path, "--params")
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
            raise SystemExit(f"--params: expected a YAML mapping of parameter names (or notebook sections) "
                             f"in {path}, got {type(loaded).__name__}")
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
                   help="run the notebooks once per combination of settings (see sm120lab.runs.matrix); "
                        "--out is then the base folder (default runs/)")
    p.add_argument("--notebooks-dir", type=Path, help="where the notebooks are (default: the checkout's notebooks/)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="--out is an earlier run folder: run its missing, failed or not-run notebooks into it "
                           "(refused unless this machine and software match its environment.json)")
    mode.add_argument("--overwrite", action="store_true",
                      help="--out is an earlier run folder: replace its notebooks, results and summary")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..cmdline import command_line
    from ..envinfo import collect
    from ..runs.execute import (
        RunFolderError,
        RunMode,
        check_parameters,
        default_run_dir,
        discover_notebooks,
        execute_all,
    )

    console = Console(stderr=False)
    try:
        notebooks = discover_notebooks(args.notebooks_dir, args.only)
    except ValueError as exc:
        print(exc, file=sys.stderr)  # one line: rich would wrap it at the terminal width
        return 2
    if not notebooks:
        print(f"--notebooks-dir: expected a folder of NN_name.ipynb notebooks, found none in "
              f"{args.notebooks_dir or 'the checkout'}", file=sys.stderr)
        return 2
    params = load_params(args.parameter, args.params)
    try:
        check_parameters(notebooks, params)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    mode = RunMode.RESUME if args.resume else RunMode.OVERWRITE if args.overwrite else RunMode.NEW
    command = command_line("sm120lab", args.argv) if getattr(args, "argv", None) is not None else command_line()
    if args.matrix:
        if mode is not RunMode.NEW:
            raise SystemExit("--resume/--overwrite: not available with --matrix (each combination gets a new folder)")
        return _main_matrix(args, notebooks, params, console, command)
    env = collect()
    run_dir = args.out or default_run_dir(env=env)
    console.print(f"run folder: {run_dir}")
    try:
        summary = execute_all(notebooks, run_dir, params, progress=not args.no_progress, env=env, mode=mode,
                              command=command)
    except RunFolderError as exc:
        raise SystemExit(f"--out: {exc}") from None
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    except KeyboardInterrupt:
        report = run_dir / "report.html"
        console.print(f"[red]interrupted[/red]: unfinished notebooks are marked 'not run' in {run_dir / 'summary.json'}"
                      + (f"; report: {report}" if report.exists() else "")
                      + f"; finish with: sm120lab run --out {run_dir} --resume", soft_wrap=True)
        return 130
    table = Table(title=f"sm120lab run -> {run_dir}")
    for col in ("notebook", "status", "wall s", "error"):
        table.add_column(col)
    for n in summary.notebooks:
        style = {"ok": "green", "failed": "red"}.get(n.status.value, "yellow")
        table.add_row(n.name, f"[{style}]{n.status}[/{style}]", f"{n.wall_s or 0:.1f}", n.error or "")
    console.print(table)
    if (run_dir / "report.html").exists():
        console.print(f"report: {run_dir / 'report.html'}")
    failed = [n.name for n in summary.notebooks if n.status.value != "ok"]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/red]")
        return 1
    console.print(f"[green]all {len(summary.notebooks)} notebooks ok[/green]")
    return 0


def _main_matrix(args, notebooks, params, console, command: str) -> int:
    from ..runs.execute import RunFolderError
    from ..runs.matrix import execute_matrix, load_matrix

    try:
        combos = load_matrix(args.matrix)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    base = args.out or Path("runs")
    try:
        summaries = execute_matrix(notebooks, base, combos, params, progress=not args.no_progress, command=command)
    except RunFolderError as exc:
        raise SystemExit(f"--out: {exc}") from None
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    bad = 0
    for combo, s in zip(combos, summaries):
        failed = [n.name for n in s.notebooks if n.status.value != "ok"]
        bad += bool(failed)
        console.print(f"{combo.label}: {s.run_dir} " + (f"[red]failed: {', '.join(failed)}[/red]" if failed else "[green]ok[/green]"))
    console.print(f"index: {base / 'matrix.json'}; compare with: sm120lab compare " + " ".join(str(s.run_dir) for s in summaries))
    return 1 if bad else 0
