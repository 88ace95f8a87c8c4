"""Real wheel files for the audit, without unpacking whole wheels.

``wheel_subset(dist, version, members)`` extracts only the requested paths (plus the
``.dist-info/METADATA``) of ``dist==version`` into the one extraction cache of
:func:`sm120lab.toolchains.pypi_wheels.extract`; the wheel comes from a local wheelhouse
(``$SM120LAB_WHEELHOUSE``), the download cache, or PyPI, in that order. vLLM 0.17.0 is a
433 MB wheel that unpacks to gigabytes: this keeps a few of its files.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..paths import cache_root
from ..toolchains.pypi_wheels import INDEX, download_wheel, extract, local_wheels, wheelhouse_dirs

__all__ = ["audited_versions", "download_wheel", "evidence_quotes", "fallback_version", "fetch_for_audit",
           "local_versions", "spec_members", "wheel_subset"]


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


def audited_versions(package: str) -> list[str]:
    """Versions of ``package`` whose real files the spec set quotes (``[ver] path:line`` evidence)
    and that a spec covers, oldest first."""
    from .spec import SpecError, all_spec_files, load_specs, normalize_package

    dist = normalize_package(package)
    quoted = {ver for f in all_spec_files() if f["package"] == dist
              for item in list(f["patches"]) + list(f["settings"])
              for ver, _, _, _ in evidence_quotes(item.evidence)}
    out = []
    for ver in quoted:
        try:
            load_specs(dist, ver)
        except SpecError:  # quoted as a contrast (a release no spec covers)
            continue
        out.append(ver)
    return sorted(out, key=Version)

def local_versions(package: str, *, wheelhouse=None) -> list[str]:
    """Versions of ``package`` this machine already holds, oldest first: a ``.whl`` in the wheelhouse
    (``$SM120LAB_WHEELHOUSE``) or the download cache, or an extraction folder of the wheel cache."""
    from .spec import normalize_package

    dist = canonicalize_name(normalize_package(package))
    found = {v for _, _, v in local_wheels(wheelhouse_dirs(wheelhouse) + [cache_root() / "wheels" / "dl"], dist)}
    for index in (cache_root() / "wheels").glob(f"{dist}-*/{INDEX}"):
        try:
            found.add(Version(index.parent.name[len(dist) + 1:]))
        except InvalidVersion:
            continue
    return [str(v) for v in sorted(found)]


def fallback_version(package: str, *, wheelhouse=None) -> tuple[str, bool]:
    """``(version, held locally)`` to audit when ``package`` is not installed.

    The newest version this machine already holds that the specs quote as evidence, else the
    newest it holds that any spec covers, else the newest quoted version (downloaded once).
    """
    from .spec import SpecError, load_specs

    audited = audited_versions(package)
    if not audited:
        raise SpecError(f"no spec for {package} quotes a version's files")
    held = local_versions(package, wheelhouse=wheelhouse)
    for pool in ([v for v in held if v in audited], held):
        for ver in reversed(pool):
            try:
                load_specs(package, ver)
            except SpecError:
                continue
            return ver, True
    return audited[-1], False
