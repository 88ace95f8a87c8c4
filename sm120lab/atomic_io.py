"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Write to a temporary file in the same directory, fsync it, then ``os.replace`` it over the
target (atomic on POSIX within one filesystem), then fsync the directory.

Writes go *through* a symbolic link: the file it points to is replaced (in its own folder) and the
link stays a link; replacing the link itself would leave the real file stale. A target that exists
and is not a regular file (a folder, a device node such as ``/dev/full``, a FIFO, a socket) is
refused with an ``OSError`` whose ``strerror`` says so in one line, before anything is written.
Text writes keep the line endings of the file they replace (a CRLF file stays CRLF).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process umask (read from ``/proc/self/status`` where it is shown, else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def real_target(path: str | os.PathLike) -> Path:
    """The file a write to ``path`` must replace: ``path`` with every symbolic link resolved (a dangling
    link's target is created), checked to be a regular file when it exists.

    Raises:
        OSError: the target exists and is not a regular file (``strerror`` names what it is), or the
            links loop.
    """
    given = Path(path)
    target = Path(os.path.realpath(given))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "expected a file path, but its symbolic links loop", str(given)) from None
        return target  # a parent that is a file, no permission...: the write itself reports it
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        err = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL
        where = f" ({target})" if given.is_symlink() else ""
        raise OSError(err, f"expected a regular file, but it is {kind}{where}; refusing to replace it", str(given))
    return target


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` atomically (through symbolic links; see the module docstring).

    Args:
        path: the target file; its folder is created if missing. A symbolic link: the file it points
            to is replaced and the link kept.
        data: the new contents.
        mode: permission bits. Default: the old file's bits when it exists, else ``0o666 & ~umask``,
            the mode ``open(path, "w")`` would give (``mkstemp`` alone would leave 0600).

    Returns:
        ``path`` as a :class:`~pathlib.Path` (the path given, a link stays a link).

    Raises:
        OSError: the target exists and is not a regular file (a folder, a device node, a FIFO, a
            socket), or it cannot be written.
    """
    given = Path(path)
    path = real_target(given)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
    return given


def newline_of(path: str | os.PathLike) -> str:
    """``"\r\n"`` when the regular file at ``path`` (through links) ends its first line with CRLF, else ``"\n"``."""
    try:
        target = real_target(path)
        with open(target, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return "\n"
    i = head.find(b"\n")
    return "\r\n" if i > 0 and head[i - 1:i] == b"\r" else "\n"


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int | None = None,
                      newline: str | None = "keep") -> Path:
    """Atomic text write (UTF-8).

    ``newline``: ``"keep"`` (default): when the file being replaced uses CRLF line endings, every bare
    ``\n`` of ``text`` is written as ``\r\n`` (so a file read with universal newlines and written back
    keeps its CRLF outside what was changed, and the change matches it); ``None`` or ``"\n"``: ``text``
    as given; ``"\r\n"``: CRLF throughout.
    """
    if newline == "keep":
        newline = newline_of(path)
    if newline == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_json_atomic(path: str | os.PathLike, obj: Any, *, indent: int = 2) -> Path:
    """Atomic JSON write; non-JSON values (paths, numpy scalars) go through ``str``/``float``."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, (Path, os.PathLike)):
        return os.fspath(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)
