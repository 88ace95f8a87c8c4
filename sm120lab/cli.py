"""The ``sm120lab`` command line.

Each subcommand lives in its own module under :mod:`sm120lab.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (called with the parsed
namespace, returning the exit status). Adding a command is adding one file.

Exit statuses are one contract for every command (:mod:`sm120lab.cmdline`): 0 done, 1 a failed
judgement, 2 bad arguments or inputs, 3 a tool the command runs failed, 130 interrupted. A command
that raises ``SystemExit("one line")`` for a bad argument exits 2 with that line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__
from . import commands as _commands
from .cmdline import EXIT_TOOL, InputError, ToolError, UsageError, plain_help


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sm120lab",
        description="NVFP4 MoE on SM120/SM121: what is wrong, why, and what works.",
        epilog="exit status: 0 done, 1 a check/compare/doctor found something wrong, 2 bad arguments or inputs, "
               "3 a tool it runs (pip, a download) failed, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"sm120lab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(_commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return plain_help(parser)  # docstring RST (``x``, :func:`x`) shown as plain text


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for cmdline.command_line("sm120lab", args.argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        status = func(args)
    except UsageError as exc:
        print(exc.message, file=sys.stderr)
        raise
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise
        # SystemExit("message") would exit 1, a failed check's status: a message is a bad argument (2)
        print(exc.code, file=sys.stderr)
        raise UsageError(str(exc.code)) from None
    except ToolError as exc:  # pip or a download failed: no answer, exit 3 (not 1, a failed check)
        print(" ".join(str(exc).split()), file=sys.stderr)
        return EXIT_TOOL
    except InputError as exc:  # a damaged input named by the library: one line, exit 2, no traceback
        message = " ".join(str(exc).split())
        print(message, file=sys.stderr)
        raise UsageError(message) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`sm120lab recommend | head`): stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
