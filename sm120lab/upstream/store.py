"""Where the records live (``data/upstream/<dist>-<version>.json`` + ``index.json``) and how they are read."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..atomic_io import write_json_atomic
from ..paths import data_dir
from .record import BaseRecord, Index, IndexEntry, parse_record


def upstream_dir() -> Path:
    return data_dir() / "upstream"


def record_path(dist: str, version: str) -> Path:
    return upstream_dir() / f"{canonicalize_name(dist)}-{Version(version)}.json"


def index_path() -> Path:
    return upstream_dir() / "index.json"


def read_index() -> Index:
    path = index_path()
    if not path.is_file():
        return Index()
    return Index.model_validate_json(path.read_text())


def write_index(index: Index) -> Path:
    index.dists = {d: dict(sorted(v.items(), key=lambda kv: Version(kv[0]))) for d, v in sorted(index.dists.items())}
    _cached_index.cache_clear()
    _cached_record.cache_clear()
    return write_json_atomic(index_path(), index.model_dump(mode="json"))


def write_record(record: BaseRecord, index: Index | None = None) -> Path:
    """Write ``record`` atomically and enter it in the index (read from disk when not given)."""
    path = record_path(record.dist, record.version)
    write_json_atomic(path, record.model_dump(mode="json"))
    index = index if index is not None else read_index()
    rel = path.relative_to(data_dir().parent).as_posix()
    index.dists.setdefault(canonicalize_name(record.dist), {})[str(Version(record.version))] = IndexEntry(
        record=rel, kind=record.kind, wheel=record.wheel.filename, sha256=record.wheel.sha256, command=record.command)
    write_index(index)
    return path


@lru_cache(maxsize=1)
def _cached_index(path: str, mtime: float) -> Index:
    return Index.model_validate_json(Path(path).read_text())


def index() -> Index:
    """The index (cached while the file is unchanged)."""
    path = index_path()
    if not path.is_file():
        return Index()
    return _cached_index(str(path), path.stat().st_mtime)


def versions(dist: str) -> list[str]:
    """Recorded versions of ``dist``, ascending in :class:`packaging.version.Version` order."""
    return sorted(index().dists.get(canonicalize_name(dist), {}), key=Version)


@lru_cache(maxsize=256)
def _cached_record(path: str, mtime: float) -> BaseRecord:
    return parse_record(json.loads(Path(path).read_text()))


def load(dist: str, version: str) -> BaseRecord:
    """The record of ``dist==version``; ValueError naming the recorded versions when there is none."""
    have = versions(dist)
    try:
        want = Version(version)
    except (InvalidVersion, TypeError):
        want = None
    entries = index().dists.get(canonicalize_name(dist), {})
    entry = next((e for v, e in entries.items() if want is not None and Version(v) == want), None)
    if entry is None:
        shown = ", ".join(have) if have else "none"
        raise ValueError(f"{dist}: no recorded facts for {version} (recorded: {shown}); "
                         f"record them with `sm120lab upstream record {dist} {version}`")
    path = data_dir().parent / entry.record
    return _cached_record(str(path), path.stat().st_mtime)
