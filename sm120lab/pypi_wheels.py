"""PyPI wheels for reading real package files, downloaded once into a shared cache.

``download_wheel(dist, version)`` runs ``pip download --no-deps --only-binary=:all:`` once and keeps
the ``.whl`` in ``<cache>/wheels/dl/``. ``fetch_wheel(dist, version)`` unpacks it (whole, or only
members under given prefixes) into ``<cache>/wheels/<dist>-<version>[-only-<hash>]/``, the
site-packages-like root that holds the import package. A finished unpack carries a
``.sm120lab-complete`` stamp written last, so an interrupted unpack is redone, never half-used.
The cache root is :func:`sm120lab.paths.cache_root` (``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .atomic_io import write_json_atomic
from .paths import cache_root

STAMP = ".sm120lab-complete"
_DIST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VER_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")


def canonical_name(name: str) -> str:
    """Wheel-file form of a distribution name (PEP 427 escaping, lower case)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _check(dist: str, version: str) -> None:
    if not isinstance(dist, str) or not _DIST_RE.match(dist):
        raise ValueError(f"dist: expected a PyPI distribution name like 'flashinfer-python', got {dist!r}")
    if not isinstance(version, str) or not _VER_RE.match(version):
        raise ValueError(f"version: expected an exact version like '0.6.5', got {version!r}")


def download_wheel(dist: str, version: str, *, quiet: bool = True) -> Path:
    """Path of the cached ``.whl`` for ``dist==version`` (downloaded on first use)."""
    _check(dist, version)
    dl = cache_root() / "wheels" / "dl"
    found = sorted(p for p in dl.glob("*.whl")
                   if canonical_name(p.name.split("-")[0]) == canonical_name(dist) and p.name.split("-")[1] == version)
    if found:
        return found[0]
    dl.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=dl) as tmp:
        if not quiet:
            print(f"downloading {dist}=={version} from PyPI ...", file=sys.stderr, flush=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--dest", tmp, f"{dist}=={version}"], capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"pip download {dist}=={version} failed (rc {proc.returncode}):\n"
                               f"{proc.stderr.strip()[-1500:]}")
        target = dl / wheels[0].name
        os.replace(wheels[0], target)  # same directory tree: atomic
    return target


def wheel_dir(dist: str, version: str, only: tuple[str, ...] | None = None) -> Path:
    """Where ``fetch_wheel`` unpacks ``dist==version`` (whether or not it exists yet)."""
    suffix = "" if not only else "-only-" + hashlib.sha256("\0".join(only).encode()).hexdigest()[:10]
    return cache_root() / "wheels" / f"{dist}-{version}{suffix}"


def fetch_wheel(dist: str, version: str, *, only: tuple[str, ...] | None = None, quiet: bool = False) -> Path:
    """Return the unpacked root of ``dist==version`` (downloading and unpacking on first use).

    ``only``: unpack just the members whose path starts with one of these prefixes (e.g. the
    headers of a large library wheel); such partial unpacks get their own cache directory.
    """
    _check(dist, version)
    if only is not None and (isinstance(only, str) or not all(isinstance(p, str) and p for p in only)):
        raise ValueError(f"only: expected a tuple of path prefixes, got {only!r}")
    dest = wheel_dir(dist, version, tuple(only) if only else None)
    if (dest / STAMP).is_file():
        return dest
    whl = download_wheel(dist, version, quiet=quiet)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dist}-{version}.", dir=dest.parent) as tmp:
        unpack = Path(tmp) / "unpack"
        with zipfile.ZipFile(whl) as zf:
            members = [n for n in zf.namelist() if not only or n.startswith(tuple(only))]
            if only and not members:
                raise RuntimeError(f"only: no member of {whl.name} starts with {only}")
            zf.extractall(unpack, members=members)
        write_json_atomic(unpack / STAMP, {"dist": dist, "version": version, "wheel": whl.name})
        if dest.exists():  # a stale, unstamped (interrupted) unpack
            shutil.rmtree(dest)
        os.replace(unpack, dest)
    return dest


def stamp_info(root: Path) -> dict:
    """The stamp written by :func:`fetch_wheel` (dist, version, wheel file name)."""
    return json.loads((Path(root) / STAMP).read_text())
