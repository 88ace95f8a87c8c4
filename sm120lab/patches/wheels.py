"""Real wheel files for the audit, without unpacking whole wheels.

``wheel_subset(dist, version, members)`` extracts only the requested paths (plus the
``.dist-info/METADATA``) of ``dist==version`` into the one extraction cache of
:func:`sm120lab.pypi_wheels.extract`; the wheel comes from a local wheelhouse
(``$SM120LAB_WHEELHOUSE``), the download cache, or PyPI, in that order. vLLM 0.17.0 is a
433 MB wheel that unpacks to gigabytes: this keeps a few of its files.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..pypi_wheels import download_wheel, extract

__all__ = ["download_wheel", "evidence_quotes", "fetch_for_audit", "spec_members", "wheel_subset"]


def wheel_subset(dist: str, version: str, members: list[str], *, quiet: bool = True, wheelhouse=None) -> Path:
    """Root of a tree holding ``members`` (paths inside the wheel) and the dist-info METADATA.

    Members the wheel does not contain are skipped (the patch status then says file-missing).
    """
    return extract(dist, version, members=tuple(members), quiet=quiet, wheelhouse=wheelhouse)


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


def fetch_for_audit(package: str, version: str, *, quiet: bool = True, wheelhouse=None) -> Path:
    """Root of a cached tree with every file the specs for ``package==version`` touch."""
    from .spec import normalize_package

    dist = normalize_package(package)
    return wheel_subset(dist, version, spec_members(dist, version), quiet=quiet, wheelhouse=wheelhouse)
