"""``sm120lab archive RUN [--dest data/runs]``: keep a run folder in the repository, trimmed."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("archive", help="copy a run folder into data/runs/ with bulky outputs trimmed",
                       description=__doc__)
    p.add_argument("run", type=Path)
    p.add_argument("--dest", type=Path, default=None, help="default: <checkout>/data/runs")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..paths import data_dir
    from ..run_archive import archive_run

    try:
        dest = archive_run(args.run, args.dest or data_dir() / "runs")
    except FileNotFoundError as exc:
        print(exc)
        return 2
    print(f"archived to {dest}")
    return 0
