"""The command line a result was produced by, recorded the same way everywhere."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path


def command_line(prog: str | None = None, argv: Sequence[str] | None = None) -> str:
    """Return ``prog arg1 arg2 ...`` with every argument shell-quoted (``shlex.join``).

    Args:
        prog: the program as a user would type it (``"sm120lab"``, ``"python -m sm120lab.kernels.aot"``).
            Defaults to the basename of ``sys.argv[0]``.
        argv: the arguments after the program. Defaults to ``sys.argv[1:]``.

    Returns:
        One string that a shell turns back into the same argument list.
    """
    if prog is None:
        prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([prog, *(shlex.quote(str(a)) for a in args)]) if args else prog
