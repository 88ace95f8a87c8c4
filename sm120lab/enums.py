"""One str-valued Enum base for the package: ``str(member)`` and f-strings give the value, so JSON, ``==``
with plain strings and printed tables all see ``"garbage"``, not ``"Verdict.GARBAGE"`` (what
``enum.StrEnum`` does from Python 3.11; the package supports 3.10)."""

from __future__ import annotations

from enum import Enum

__all__ = ["StrEnum"]


class StrEnum(str, Enum):
    """A ``str`` Enum whose ``str()`` is its value."""

    def __str__(self) -> str:
        return self.value
