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


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` atomically; keep the old file's permission bits unless ``mode``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and path.exists():
        mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
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
