"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Write to a temporary file in the same directory, fsync it, then ``os.replace`` it over the
target (atomic on POSIX within one filesystem), then fsync the directory.
"""

from __future__ import annotations

import json
import os
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


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` atomically.

    Args:
        path: the target file; its folder is created if missing.
        data: the new contents.
        mode: permission bits. Default: the old file's bits when it exists, else ``0o666 & ~umask``,
            the mode ``open(path, "w")`` would give (``mkstemp`` alone would leave 0600).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
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
    return path


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int | None = None) -> Path:
    """Atomic text write (UTF-8)."""
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
