"""``sm120lab toolchains install``: pinned PyPI wheels into the toolchain cache, idempotently.

One ``python -m pip install --no-deps --target <cache>/<version> <pinned wheels>`` per version
into a temporary sibling folder, renamed into place only when pip succeeded, then a marker file
(``sm120lab-toolchain.json``: wheels, time) is written; a version whose marker lists the same
wheels is skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..atomic_io import write_json_atomic
from .cache import MARKER, version_dir
from .pins import wheels_for


def is_installed(version: str) -> bool:
    marker = version_dir(version) / MARKER
    if not marker.is_file():
        return False
    try:
        return tuple(json.loads(marker.read_text()).get("wheels", ())) == wheels_for(version)
    except (json.JSONDecodeError, OSError):
        return False


def install(version: str, *, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Install ``version`` (e.g. ``"12.9"`` or ``"sass-tools"``) and return its folder."""
    wheels = wheels_for(version)
    dest = version_dir(version)
    if is_installed(version) and not force:
        log(f"{version}: already installed in {dest}")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{version}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    log(f"{version}: pip install {len(wheels)} wheels -> {dest} ...")
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-deps", "--only-binary=:all:", "--target", str(tmp), *wheels]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"pip failed installing toolkit {version}: " + " | ".join(tail))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    for exe in dest.glob("nvidia/*/bin/*"):
        exe.chmod(exe.stat().st_mode | 0o111)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    write_json_atomic(dest / MARKER, {
        "version": version, "wheels": list(wheels),
        "installed_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - t0, 1), "bytes": size,
    })
    log(f"{version}: done in {time.monotonic() - t0:.0f} s ({size / 2**20:.0f} MiB)")
    return dest


def install_many(versions: list[str], *, force: bool = False, log: Callable[[str], None] = print) -> list[Path]:
    """Install each version in turn with a ``[i/n]`` progress prefix."""
    for v in versions:  # validate all names before downloading anything
        wheels_for(v)
    out = []
    for i, v in enumerate(versions, 1):
        out.append(install(v, force=force, log=lambda s, i=i: log(f"[{i}/{len(versions)}] {s}")))
    return out
