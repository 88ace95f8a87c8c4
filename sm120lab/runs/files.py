"""Reading a run folder's files without trusting them.

Every file ``compare``, ``report`` and ``archive`` read goes through :func:`read_bytes`: it must be
a regular file (checked on the open descriptor, so a FIFO never blocks and ``/dev/zero`` is never
read), no larger than its kind's limit, and, when a root is given, lie inside that folder once
symlinks are resolved. Anything else is a :class:`SchemaError` with one line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MiB = 1 << 20
#: the largest file of each kind read from a run folder
MAX_JSON_BYTES = 64 * MiB
MAX_NOTEBOOK_BYTES = 256 * MiB
MAX_FIGURE_BYTES = 32 * MiB
MAX_PAGE_BYTES = 256 * MiB


class SchemaError(ValueError):
    """A run-folder file that cannot be read or is not in its schema's shape; one line naming the file."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (symlinks resolved) lies in ``root`` (resolved)."""
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def read_bytes(path: str | os.PathLike, limit: int, root: str | os.PathLike | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Args:
        path: the file.
        limit: the most bytes it may hold.
        root: when given, the file (symlinks resolved) must lie inside this folder.

    Raises:
        SchemaError: missing, outside ``root``, not a regular file, too large, or unreadable.
    """
    path = Path(path)
    if root is not None and not inside(path, Path(root)):
        raise SchemaError(f"{path}: lies outside the run folder {root} (a link out of it?); not read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise SchemaError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SchemaError(f"{path}: expected a regular file, got {_kind(info.st_mode)}")
        if info.st_size > limit:
            raise SchemaError(f"{path}: {info.st_size:,} bytes, more than the {limit:,} such a file may hold")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise SchemaError(f"{path}: grew past the {limit:,} bytes such a file may hold while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise SchemaError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int, root: str | os.PathLike | None = None) -> str:
    """:func:`read_bytes` decoded as UTF-8; :class:`SchemaError` naming the file otherwise."""
    try:
        return read_bytes(path, limit, root).decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(f"{path}: not a UTF-8 text file") from None


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES, root: str | os.PathLike | None = None) -> Any:
    """:func:`read_text` parsed as JSON; :class:`SchemaError` naming the file for anything else."""
    text = read_text(path, limit, root)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply") from None


def regular_files(folder: Path, pattern: str = "*") -> list[Path]:
    """Entries of ``folder`` matching ``pattern``, sorted; :class:`SchemaError` for one that is not a
    regular file (a FIFO, a device, a folder, a dangling link) or leads outside ``folder``."""
    out = []
    for p in sorted(folder.glob(pattern)):
        try:
            mode = p.stat().st_mode
        except OSError as exc:
            raise SchemaError(f"{p}: cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(mode):
            raise SchemaError(f"{p}: expected a regular file, got {_kind(mode)}")
        if not inside(p, folder):
            raise SchemaError(f"{p}: lies outside {folder} (a link out of it?); not read")
        out.append(p)
    return out
