"""Download a wheel from PyPI and unpack it once into a cache directory.

``fetch_wheel(dist, version) -> Path`` runs ``pip download --no-deps --only-binary=:all:
<dist>==<version>`` and unzips the wheel into ``<cache>/wheels/<dist>-<version>/`` (the
site-packages-like root that holds the import package, e.g. ``.../flashinfer/``). The cache
root is ``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``. Idempotent: a finished unpack carries a
``.sm120lab-complete`` stamp (written last, atomically), so an interrupted unpack is redone,
never half-used. Generic: any pure or platform wheel PyPI serves for this interpreter/platform.
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

from ..atomic_io import write_json_atomic

STAMP = ".sm120lab-complete"
_DIST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VER_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")


def cache_root() -> Path:
    """``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``."""
    return Path(os.environ.get("SM120LAB_CACHE") or Path.home() / ".cache" / "sm120lab")


def wheel_dir(dist: str, version: str, only: tuple[str, ...] | None = None) -> Path:
    """Where ``fetch_wheel`` unpacks ``dist==version`` (whether or not it exists yet)."""
    suffix = "" if not only else "-only-" + hashlib.sha256("\0".join(only).encode()).hexdigest()[:10]
    return cache_root() / "wheels" / f"{dist}-{version}{suffix}"


def _check(dist: str, version: str) -> None:
    if not isinstance(dist, str) or not _DIST_RE.match(dist):
        raise ValueError(f"dist: expected a PyPI distribution name like 'flashinfer-python', got {dist!r}")
    if not isinstance(version, str) or not _VER_RE.match(version):
        raise ValueError(f"version: expected an exact version like '0.6.5', got {version!r}")


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
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dist}-{version}.", dir=dest.parent) as tmp:
        dl = Path(tmp) / "dl"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--dest", str(dl), f"{dist}=={version}"]
        if not quiet:
            print(f"downloading {dist}=={version} from PyPI ...", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip download {dist}=={version} failed:\n{proc.stderr.strip()[-2000:]}")
        wheels = sorted(dl.glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel for {dist}=={version}, got {[w.name for w in wheels]}")
        unpack = Path(tmp) / "unpack"
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [n for n in zf.namelist() if not only or n.startswith(tuple(only))]
            if only and not members:
                raise RuntimeError(f"only: no member of {wheels[0].name} starts with {only}")
            zf.extractall(unpack, members=members)
        write_json_atomic(unpack / STAMP, {"dist": dist, "version": version, "wheel": wheels[0].name})
        if dest.exists():  # a stale, unstamped (interrupted) unpack
            shutil.rmtree(dest)
        os.replace(unpack, dest)
    return dest


def stamp_info(root: Path) -> dict:
    """The stamp written by :func:`fetch_wheel` (dist, version, wheel file name)."""
    return json.loads((Path(root) / STAMP).read_text())
