"""Wheel files for reading real package files: one lookup, one download cache, one extraction cache.

Where a wheel for ``dist==version`` comes from, first hit wins:

1. a local *wheelhouse*: folders of ``.whl`` files named by the ``wheelhouse`` argument or by
   ``$SM120LAB_WHEELHOUSE`` (``os.pathsep``-separated), for machines without registry access;
2. the download cache ``<cache>/wheels/dl/``;
3. ``pip download --no-deps --only-binary=:all:`` into that cache (a failure raises
   :class:`WheelUnavailable` with pip's last error line).

Wheel file names are parsed with :func:`packaging.utils.parse_wheel_filename` (names compared
canonically, versions as :class:`packaging.version.Version`).

Extraction (:func:`extract`) writes into ONE folder per wheel, ``<cache>/wheels/<dist>-<version>/``,
a site-packages-like root holding the import package. Each member is written to a temporary
file and renamed (a reader never sees half a file); what was asked for is recorded in
``.sm120lab-extracted.json`` only after it was extracted, so an interrupted extraction is
redone, never half-used. Requests are either whole path ``prefixes`` (``("",)`` = the whole
wheel) or single ``members`` (members the wheel lacks are remembered as absent). The cache root is
:func:`sm120lab.paths.cache_root` (``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from packaging.tags import sys_tags
from packaging.utils import InvalidName, InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..atomic_io import write_json_atomic
from ..paths import cache_root

WHEELHOUSE_ENV = "SM120LAB_WHEELHOUSE"
INDEX = ".sm120lab-extracted.json"

__all__ = ["INDEX", "WHEELHOUSE_ENV", "WheelUnavailable", "download_wheel", "extract", "fetch_wheel",
           "find_wheel", "local_wheels", "wheel_dir", "wheelhouse_dirs"]


class WheelUnavailable(RuntimeError):
    """No wheel for ``dist==version`` in the wheelhouse or the cache, and pip could not fetch it."""


def _check(dist: str, version: str) -> Version:
    """``version`` parsed; a bad ``dist`` or ``version`` raises ValueError naming the argument."""
    try:
        canonicalize_name(dist, validate=True)
    except (InvalidName, TypeError):
        raise ValueError(f"dist: expected a PyPI distribution name like 'flashinfer-python', got {dist!r}") from None
    try:
        return Version(version)
    except (InvalidVersion, TypeError):
        raise ValueError(f"version: expected an exact version like '0.6.5', got {version!r}") from None


def wheelhouse_dirs(wheelhouse: str | os.PathLike | list | tuple | None = None) -> list[Path]:
    """The wheelhouse folders: ``wheelhouse`` (one path or a list) plus ``$SM120LAB_WHEELHOUSE``."""
    given = [] if wheelhouse is None else ([wheelhouse] if isinstance(wheelhouse, (str, os.PathLike)) else list(wheelhouse))
    env = [p for p in os.environ.get(WHEELHOUSE_ENV, "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in dict.fromkeys(map(os.fspath, given + env))]


def _tag_rank(path: Path) -> int:
    """Lower is better: the position of the wheel's best tag in this interpreter's tag order."""
    tags = set(parse_wheel_filename(path.name)[3])
    for i, tag in enumerate(sys_tags()):
        if tag in tags:
            return i
    return 1 << 30


def local_wheels(dirs: list[Path], dist: str | None = None) -> list[tuple[Path, str, Version]]:
    """``(path, canonical name, version)`` of every validly named ``.whl`` in ``dirs`` (optionally
    of one ``dist``), best tag for this interpreter first within each version."""
    out = []
    want = canonicalize_name(dist) if dist else None
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.whl")):
            try:
                name, version, _, _ = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
            if want is None or name == want:
                out.append((path, str(name), version))
    return sorted(out, key=lambda t: (t[1], t[2], _tag_rank(t[0])))


def find_wheel(dist: str, version: str, *, wheelhouse=None) -> Path | None:
    """A local ``.whl`` for ``dist==version``: from the wheelhouse, else the download cache."""
    v = _check(dist, version)
    for dirs in (wheelhouse_dirs(wheelhouse), [cache_root() / "wheels" / "dl"]):
        hits = [p for p, _, ver in local_wheels(dirs, dist) if ver == v]
        if hits:
            return hits[0]
    return None


def download_wheel(dist: str, version: str, *, quiet: bool = True, wheelhouse=None) -> Path:
    """Path of a ``.whl`` for ``dist==version``: local (see :func:`find_wheel`) or downloaded once.

    Raises:
        WheelUnavailable: pip failed; the message is one line ending with pip's last error line.
    """
    found = find_wheel(dist, version, wheelhouse=wheelhouse)
    if found is not None:
        return found
    dl = cache_root() / "wheels" / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=dl) as tmp:
        if not quiet:
            print(f"downloading {dist}=={version} from PyPI ...", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--dest", tmp, f"{dist}=={version}"], capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise WheelUnavailable(f"pip download {dist}=={version}: no answer in 30 minutes") from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["no output"]
            where = ", ".join(map(str, wheelhouse_dirs(wheelhouse))) or f"none (set ${WHEELHOUSE_ENV})"
            raise WheelUnavailable(f"pip download {dist}=={version} failed (rc {proc.returncode}): "
                                   f"{errors[-1][:300]}; wheelhouse searched: {where}")
        target = dl / wheels[0].name
        os.replace(wheels[0], target)  # same filesystem: atomic
    return target


def wheel_dir(dist: str, version: str) -> Path:
    """The one extraction folder of ``dist==version`` (whether or not anything is in it yet)."""
    _check(dist, version)
    return cache_root() / "wheels" / f"{canonicalize_name(dist)}-{Version(version)}"


def _safe(member: str) -> bool:
    p = PurePosixPath(member)
    return bool(member) and not member.endswith("/") and not p.is_absolute() and ".." not in p.parts


def _read_index(root: Path) -> dict:
    try:
        data = json.loads((root / INDEX).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _covered(index: dict, prefixes: tuple[str, ...], members: tuple[str, ...], root: Path) -> bool:
    done = tuple(index.get("prefixes", []))
    absent = set(index.get("absent", []))
    ok_prefixes = all(any(p.startswith(d) for d in done) for p in prefixes)
    ok_members = all(m in absent or (root / m).is_file() or any(m.startswith(d) for d in done) for m in members)
    return ok_prefixes and ok_members and bool(index.get("metadata"))


def extract(dist: str, version: str, *, prefixes: tuple[str, ...] = (), members: tuple[str, ...] | list[str] = (),
            quiet: bool = True, wheelhouse=None) -> Path:
    """Root of ``dist==version``'s extraction folder holding the requested files and the METADATA.

    Args:
        prefixes: extract every member whose path starts with one of these (``""``: everything).
        members: extract these exact paths; ones the wheel lacks are recorded as absent.
        quiet: no progress line when a download starts.
        wheelhouse: extra folders of ``.whl`` files searched before the cache and PyPI.

    Returns:
        The folder (``<cache>/wheels/<dist>-<version>/``).
    """
    _check(dist, version)
    if isinstance(prefixes, str) or not all(isinstance(p, str) for p in prefixes):
        raise ValueError(f"prefixes: expected a tuple of path prefixes, got {prefixes!r}")
    if isinstance(members, str) or not all(isinstance(m, str) and _safe(m) for m in members):
        raise ValueError(f"members: expected relative file paths inside the wheel, got {members!r}")
    prefixes, members = tuple(prefixes), tuple(members)
    root = wheel_dir(dist, version)
    index = _read_index(root)
    if _covered(index, prefixes, members, root):
        return root
    whl = download_wheel(dist, version, quiet=quiet, wheelhouse=wheelhouse)
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as zf:
        names = [n for n in zf.namelist() if _safe(n)]
        name_set = set(names)
        meta = [n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        wanted = [n for n in names if prefixes and n.startswith(prefixes)]
        wanted += [m for m in members if m in name_set] + meta
        for name in dict.fromkeys(wanted):
            dest = root / name
            if dest.is_file() and name not in meta and not prefixes:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as fh, zf.open(name) as src:
                    while chunk := src.read(1 << 20):
                        fh.write(chunk)
                os.replace(tmp, dest)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        index = _read_index(root)
        index.update({
            "dist": dist, "version": version, "wheel": whl.name, "metadata": meta,
            "prefixes": sorted(set(index.get("prefixes", [])) | set(prefixes)),
            "absent": sorted(set(index.get("absent", [])) | {m for m in members if m not in name_set}),
        })
        write_json_atomic(root / INDEX, index)
    return root


def fetch_wheel(dist: str, version: str, *, only: tuple[str, ...] | None = None, quiet: bool = False,
                wheelhouse=None) -> Path:
    """Root of ``dist==version`` with the whole wheel extracted, or only the members under the
    path prefixes in ``only`` (e.g. the headers of a large library wheel)."""
    _check(dist, version)
    if only is not None and (isinstance(only, str) or not all(isinstance(p, str) and p for p in only)):
        raise ValueError(f"only: expected a tuple of path prefixes, got {only!r}")
    return extract(dist, version, prefixes=tuple(only) if only else ("",), quiet=quiet, wheelhouse=wheelhouse)
