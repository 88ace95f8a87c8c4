"""Where the records live (``data/upstream/<dist>-<version>.json`` + ``index.json``) and how they are read.

A record is not taken on trust: :func:`load` refuses, in one line naming the file (:class:`RecordError`),
a record that is missing, truncated or not JSON, of a newer ``schema_version`` than this code reads, or
whose content names another dist or version than the index entry it was reached by. :func:`versions`
lists only the versions whose record loads, so one broken record does not break every other release
(the skipped ones are named by :func:`broken` and in a warning).
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..atomic_io import write_json_atomic
from ..cmdline import InputError
from ..paths import data_dir
from .record import SCHEMA_VERSION, BaseRecord, Index, IndexEntry, parse_record


class RecordError(InputError):
    """A record or the index that cannot be used: one line naming the file and what was expected
    (:class:`~sm120lab.cmdline.InputError`: the command line prints it and exits 2)."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


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
    return _parse_index(str(path))


def _parse_index(path: str) -> Index:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{path}: expected the upstream index (JSON), could not read it: {_first_line(exc)}") from None
    if isinstance(doc, dict) and isinstance(doc.get("schema_version"), int) and doc["schema_version"] > SCHEMA_VERSION:
        raise RecordError(f"{path}: schema_version {doc['schema_version']} is newer than this sm120lab reads "
                          f"({SCHEMA_VERSION}); update sm120lab")
    try:
        return Index.model_validate(doc)
    except ValueError as exc:
        raise RecordError(f"{path}: expected the upstream index (schema {SCHEMA_VERSION}), got: "
                          f"{' '.join(str(exc).split())[:200]}") from None


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
    return _parse_index(path)


def index() -> Index:
    """The index (cached while the file is unchanged)."""
    path = index_path()
    if not path.is_file():
        return Index()
    return _cached_index(str(path), path.stat().st_mtime)


def indexed_versions(dist: str) -> list[str]:
    """Every version the index lists for ``dist`` (its record may be broken: :func:`broken`), ascending."""
    return sorted(index().dists.get(canonicalize_name(dist), {}), key=Version)


def broken(dist: str) -> dict[str, str]:
    """``{version: one-line reason}`` for the indexed versions of ``dist`` whose record does not load."""
    out = {}
    for v in indexed_versions(dist):
        try:
            load(dist, v)
        except RecordError as exc:
            out[v] = str(exc)
    return out


def versions(dist: str) -> list[str]:
    """Recorded versions of ``dist`` whose record loads, ascending in :class:`packaging.version.Version`
    order; a broken one is skipped with a warning naming its file (:func:`load` refuses it)."""
    bad = broken(dist)
    for v, why in bad.items():
        warnings.warn(f"skipped {dist} {v}: {why}", stacklevel=2)
    return [v for v in indexed_versions(dist) if v not in bad]


@lru_cache(maxsize=256)
def _cached_record(path: str, mtime: float, dist: str, version: str) -> BaseRecord:
    shown = _shown(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{shown}: expected the JSON record of {dist} {version}, could not read it (truncated or "
                          f"not JSON: {_first_line(exc)}); re-record it with `sm120lab upstream record {dist} "
                          f"{version} --force`") from None
    if not isinstance(data, dict):
        raise RecordError(f"{shown}: expected a JSON object (the record of {dist} {version}), got {type(data).__name__}")
    schema = data.get("schema_version")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA_VERSION:
        raise RecordError(f"{shown}: schema_version {schema!r} is not one this sm120lab reads (<= {SCHEMA_VERSION}); "
                          "update sm120lab or re-record it")
    try:
        rec = parse_record(data)
    except ValueError as exc:
        raise RecordError(f"{shown}: not a valid record of {dist} {version}: {' '.join(str(exc).split())[:200]}") from None
    try:
        same_version = Version(rec.version) == Version(version)
    except InvalidVersion:
        same_version = False
    if canonicalize_name(rec.dist) != canonicalize_name(dist) or not same_version:
        raise RecordError(f"{shown}: holds the record of {rec.dist} {rec.version}, expected {dist} {version} (the file "
                          "was copied or edited); re-record it with `sm120lab upstream record "
                          f"{dist} {version} --force`")
    return rec


def _shown(path: str) -> str:
    """``path`` relative to the checkout when it lies inside it."""
    try:
        return Path(path).relative_to(data_dir().parent).as_posix()
    except ValueError:
        return path


def load(dist: str, version: str) -> BaseRecord:
    """The record of ``dist==version``.

    Raises:
        ValueError: none is recorded (naming the recorded versions).
        RecordError: the record is missing, truncated, not JSON, of a newer schema, or names another
            dist or version (one line naming the file).
    """
    try:
        want = Version(version)
    except (InvalidVersion, TypeError):
        want = None
    entries = index().dists.get(canonicalize_name(dist), {})
    found = next(((v, e) for v, e in entries.items() if want is not None and Version(v) == want), None)
    if found is None:
        have = versions(dist)
        shown = ", ".join(have) if have else "none"
        raise ValueError(f"{dist}: no recorded facts for {version} (recorded: {shown}); "
                         f"record them with `sm120lab upstream record {dist} {version}`")
    listed, entry = found
    path = data_dir().parent / entry.record
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise RecordError(f"{_shown(str(path))}: the record of {dist} {listed} listed in index.json is missing "
                          f"({exc.strerror or exc}); re-record it with `sm120lab upstream record {dist} {listed}`") from None
    return _cached_record(str(path), mtime, str(canonicalize_name(dist)), listed)
