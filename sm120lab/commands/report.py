"""``sm120lab report RUN [--out FILE] [--gpu GPU]``: (re)write a run folder's self-contained report.html
(see sm120lab.runs.report). Its first screen is the decision guide's do-this block for the run's
machine (or --gpu), then one table of every notebook's verdict; below: summary, environment, every
notebook's verdict box, every notebook with its figures inline."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a run folder's self-contained report.html", description=__doc__)
    p.add_argument("run", type=Path, help="a run folder (made by `sm120lab run`, or archived under data/runs/)")
    p.add_argument("--out", type=Path, help="where to write the page (default RUN/report.html)")
    p.add_argument("--gpu", help="answer the do-this block for this GPU (rtx-pro-6000, rtx-5090, dgx-spark); "
                                 "default: the run's machine when it is an SM120/SM121 GPU, else rtx-pro-6000")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..runs.files import inside
    from ..runs.report import write_report
    from ..runs.results import SchemaError

    if args.out is not None and args.out.is_dir():
        raise SystemExit(f"--out: expected a file path, got the folder {args.out}")
    if args.out is not None and inside(args.out, args.run) and args.out.resolve() != (args.run / "report.html").resolve():
        raise SystemExit(f"--out: {args.out} lies inside the run folder {args.run}; only its report.html may be "
                         "written there (leave --out out, or choose a path outside the run)")
    try:
        path = write_report(args.run, args.out, gpu=args.gpu)
    except (FileNotFoundError, SchemaError) as exc:
        raise SystemExit(f"RUN: {exc}") from None
    except ValueError as exc:  # --gpu the guide does not know
        raise SystemExit(str(exc)) from None
    except OSError as exc:
        raise SystemExit(f"--out: cannot write {args.out or args.run / 'report.html'}: {exc.strerror or exc}") from None
    print(f"report: {path}")
    return 0
