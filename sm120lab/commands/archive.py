"""``sm120lab archive RUN [--dest data/runs] [--overwrite]``: keep a run folder in the repository:
results, environment, HTML, every figure as a PNG in figures/, and a self-contained report.html."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("archive", help="copy a run folder into data/runs/ with its figures as PNG files",
                       description=__doc__)
    p.add_argument("run", type=Path)
    p.add_argument("--dest", type=Path, default=None, help="default: <checkout>/data/runs")
    p.add_argument("--overwrite", action="store_true", help="replace an existing archive of the same run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..paths import data_dir
    from ..runs.archive import archive_run
    from ..runs.results import SchemaError

    dest_root = args.dest or data_dir() / "runs"
    try:
        dest = archive_run(args.run, dest_root, overwrite=args.overwrite)
    except (FileNotFoundError, SchemaError) as exc:
        raise SystemExit(f"RUN: {exc}") from None
    except FileExistsError as exc:
        raise SystemExit(f"--dest: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"--dest: cannot write into {dest_root}: {exc.strerror or exc}") from None
    print(f"archived to {dest}")
    return 0
