"""The command line a result was produced by, recorded the same way everywhere; help texts as plain text;
the exit statuses every ``sm120lab`` command shares.

Exit statuses (one contract for every command):

- ``0`` (:data:`EXIT_OK`): done; a check, compare or doctor found nothing wrong.
- ``1`` (:data:`EXIT_FAILED`): a judgement failed: a backend is garbage, a run regressed, a notebook
  failed, a measured backend failed, a patch was refused.
- ``2`` (:data:`EXIT_USAGE`): bad arguments or unusable inputs (one line naming the argument or file
  and what was expected); nothing was judged.
- ``3`` (:data:`EXIT_TOOL`): a tool the command runs (pip, a download) failed, so there is no answer.
- ``130`` interrupted, ``141`` the reader of stdout went away.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TOOL = 3


class InputError(Exception):
    """An argument or input file that cannot be used, found below the command layer (a wheel that is not
    the one named, a damaged record): ``str()`` is one line naming it and what was expected.
    :func:`sm120lab.cli.main` prints that line and exits :data:`EXIT_USAGE` when a command lets it through."""


class ToolError(Exception):
    """A tool a command runs (pip, a download) failed, so there is no answer (not a failed check):
    ``str()`` is one line saying what failed. :func:`sm120lab.cli.main` prints it and exits :data:`EXIT_TOOL`."""


class UsageError(SystemExit):
    """Bad arguments: exits with :data:`EXIT_USAGE`; ``str()`` is the one-line message.

    ``raise SystemExit("message")`` would exit 1, the status of a failed check; :func:`sm120lab.cli.main`
    turns such a message into this (printing the message once on stderr).
    """

    def __init__(self, message: str):
        super().__init__(EXIT_USAGE)
        self.message = message

    def __str__(self) -> str:
        return self.message


#: the largest seed a command takes (a generator seed is 64 bits; negative ones would alias large ones)
SEED_MAX = 2**63 - 1


def seed_arg(text: str) -> int:
    """``type=`` of every ``--seed``: an integer in [0, 2**63-1] (what ``torch.Generator.manual_seed``
    takes without aliasing); argparse turns the ``ArgumentTypeError`` into one line naming the option, exit 2."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63-1], got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63-1], got {text}")
    return value


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
