"""Real wheel files for the audit, without unpacking whole wheels.

``wheel_subset(dist, version, members)`` downloads ``dist==version`` once with
``pip download --no-deps --only-binary=:all:`` into ``<cache>/wheels/dl/`` and extracts only the
requested paths (plus the ``.dist-info/METADATA``) into ``<cache>/wheels/<dist>-<version>-files/``,
one file at a time, atomically; later calls extract only what is missing. The cache root is
``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``; the download itself is :func:`sm120lab.pypi_wheels.download_wheel`.
vLLM 0.17.0 is a 433 MB wheel that unpacks to gigabytes: this keeps a few of its files.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from ..atomic_io import write_bytes_atomic
from ..paths import cache_root
from ..pypi_wheels import canonical_name as _canon
from ..pypi_wheels import download_wheel

__all__ = ["download_wheel", "evidence_quotes", "fetch_for_audit", "spec_members", "wheel_subset"]


def wheel_subset(dist: str, version: str, members: list[str], *, quiet: bool = True) -> Path:
    """Root of a tree holding ``members`` (paths inside the wheel) and the dist-info METADATA.

    Members the wheel does not contain are skipped (the patch status then says file-missing).
    """
    root = cache_root() / "wheels" / f"{dist}-{version}-files"
    want = set(members)
    meta_glob = f"{_canon(dist)}-{version}.dist-info/METADATA"
    missing = {m for m in want if not (root / m).is_file()}
    have_meta = any(_canon(str(p.relative_to(root))) == _canon(meta_glob)
                    for p in root.glob("*.dist-info/METADATA")) if root.is_dir() else False
    absent_marker = root / ".absent"
    known_absent = set(absent_marker.read_text().split("\n")) if absent_marker.is_file() else set()
    missing -= known_absent
    if not missing and have_meta:
        return root
    whl = download_wheel(dist, version, quiet=quiet)
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        metas = [n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        for name in sorted(missing | set(metas)):
            if name in names:
                write_bytes_atomic(root / name, zf.read(name))
        absent = sorted((missing - names) | known_absent)
        if absent:
            write_bytes_atomic(absent_marker, "\n".join(absent).encode())
    return root


EVIDENCE_LINE = re.compile(r"^\[(?P<ver>[^\]]+)\] (?P<path>[^:\s]+):(?P<line>\d+): ?(?P<text>.*)$")


def evidence_quotes(text: str) -> list[tuple[str, str, int, str]]:
    """``(version, path, line, quoted text)`` for each ``[ver] path:line: text`` evidence line."""
    out = []
    for raw in text.splitlines():
        m = EVIDENCE_LINE.match(raw)
        if m:
            out.append((m["ver"], m["path"], int(m["line"]), m["text"]))
    return out


def spec_members(package: str, version: str) -> list[str]:
    """Every file the spec set for ``package==version`` patches or quotes as evidence of ``version``."""
    from .spec import load_specs

    specs = load_specs(package, version)
    files = {p.file for p in specs.patches if p.file}
    for item in list(specs.patches) + list(specs.settings):
        files |= {path for ver, path, _, _ in evidence_quotes(item.evidence) if ver == version}
    return sorted(files)


def fetch_for_audit(package: str, version: str, *, quiet: bool = True) -> Path:
    """Root of a cached tree with every file the specs for ``package==version`` touch."""
    from .spec import normalize_package

    dist = normalize_package(package)
    return wheel_subset(dist, version, spec_members(dist, version), quiet=quiet)
