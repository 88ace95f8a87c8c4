"""The command line a result was produced by, recorded the same way everywhere; help texts as plain text."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path


def command_line(prog: str | None = None, argv: Sequence[str] | None = None) -> str:
    """Return ``prog arg1 arg2 ...`` with every argument shell-quoted (``shlex.join``).

    Args:
        prog: the program as a user would type it (``"sm120lab"``, ``"sm120lab dev kernel-aot"``).
            Defaults to the basename of ``sys.argv[0]``.
        argv: the arguments after the program. Defaults to ``sys.argv[1:]``.

    Returns:
        One string that a shell turns back into the same argument list.
    """
    if prog is None:
        prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([prog, *(shlex.quote(str(a)) for a in args)]) if args else prog


_RST_ROLE = re.compile(r":(?:func|mod|class|meth|attr|data|obj|exc):`~?([^`]+)`")


def plain_text(text: str | None) -> str | None:
    """Docstring reStructuredText as ``--help`` shows it: ````x```` -> ``x``, ``:func:`x``` -> ``x``.

    Args:
        text: a description, epilog or argument help (``None`` passes through).

    Returns:
        The text with RST literal markup and cross-reference roles removed, everything else kept.
    """
    return None if text is None else _RST_ROLE.sub(r"\1", text).replace("``", "")


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Apply :func:`plain_text` to the description, epilog and every argument help of ``parser``
    and, recursively, of its subcommands; returns ``parser``."""
    parser.description, parser.epilog = plain_text(parser.description), plain_text(parser.epilog)
    for action in parser._actions:
        action.help = plain_text(action.help) if isinstance(action.help, str) else action.help
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain_text(choice.help)
            for sub in dict.fromkeys(action.choices.values()):
                plain_help(sub)
    return parser
