"""Writing records: one dist-version (``record``) or the whole set the workbook keeps (``record_all``).

Which wheel: ``--wheel PATH`` when given; otherwise vLLM and flashinfer-python wheels are downloaded once
into the cache (:func:`sm120lab.toolchains.pypi_wheels.download_wheel`), and the metadata-only dists (torch, b12x,
flashinfer-cubin, ...) are read from PyPI by HTTP range requests: only the zip directory and METADATA of
one wheel travel (a CPython 3.12 manylinux x86_64 wheel, else a pure-Python one).
"""

from __future__ import annotations

import json
import zipfile

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from ..cmdline import InputError
from ..toolchains.pypi_wheels import download_wheel
from . import extract_flashinfer, extract_torch, extract_vllm, store
from .common import base_fields
from .record import BaseRecord, MetadataRecord, Unavailable, parse_record
from .wheelsrc import WheelSource, exact_pins, pick_remote_wheel, released_versions, simple_index

#: vLLM releases kept: every final release in this range.
VLLM_RANGE = ("0.17.0", "0.34.0")
#: flashinfer-python versions kept besides those some recorded vLLM pins.
FLASHINFER_BASE = ("0.6.4", "0.6.5", "0.6.7", "0.7.4")
#: dists recorded as metadata only when a recorded release pins them (or, for the FlashInfer side
#: packages, when a version matching a recorded flashinfer-python exists).
FLASHINFER_SIDE = ("flashinfer-cubin", "flashinfer-jit-cache")
#: dists read with an extractor (the rest: METADATA only); the first two are downloaded whole, torch is read
#: by range requests (METADATA and one source file)
FULL = {"vllm": extract_vllm.extract, "flashinfer-python": extract_flashinfer.extract, "torch": extract_torch.extract}
DOWNLOADED = ("vllm", "flashinfer-python")


def command_for(dist: str, version: str, wheel: str | None = None) -> str:
    line = f"sm120lab upstream record {canonicalize_name(dist)} {Version(version)}"
    return line + (f" --wheel {wheel}" if wheel else "")


class Unpublished(RuntimeError):
    """The registry serves no wheel for this dist-version."""


class WheelMismatch(InputError):
    """``--wheel`` is not a readable wheel of the dist-version named (nothing is written)."""


def wheel_identity(src: WheelSource) -> tuple[str, str]:
    """(name, version) a wheel declares in its METADATA (``Name``, ``Version``), checked against its file
    name; :class:`WheelMismatch` when either is missing or they disagree."""
    import email.parser

    try:
        fn_name, fn_version, _, _ = parse_wheel_filename(src.filename)
    except ValueError as exc:
        raise WheelMismatch(f"--wheel: {src.filename} is not a wheel file name ({exc})") from None
    try:
        meta = email.parser.Parser().parsestr(src.metadata_text(), headersonly=True)
    except ValueError as exc:
        raise WheelMismatch(f"--wheel: {src.filename}: {exc}") from None
    name, ver = meta.get("Name"), meta.get("Version")
    try:
        same = canonicalize_name(name or "") == fn_name and Version(ver or "") == fn_version
    except InvalidVersion:
        same = False
    if not same:
        raise WheelMismatch(f"--wheel: {src.filename}: its METADATA says {name} {ver}, its file name {fn_name} "
                            f"{fn_version}; expected one wheel of one dist-version")
    return str(canonicalize_name(name)), str(Version(ver))


def open_wheel(dist: str, version: str, wheel: str | None = None) -> WheelSource:
    """The wheel of ``dist==version``: ``wheel`` (checked to be that dist-version, :class:`WheelMismatch`
    otherwise), else a download or PyPI range reads."""
    if wheel:
        try:
            src = WheelSource.local(wheel)
        except zipfile.BadZipFile as exc:
            raise WheelMismatch(f"--wheel: {wheel} is not a readable wheel (zip: {exc})") from None
        name, ver = wheel_identity(src)
        if (name, Version(ver)) != (str(canonicalize_name(dist)), Version(version)):
            raise WheelMismatch(f"--wheel: {src.filename} is {name} {ver}, not {canonicalize_name(dist)} {version}; "
                                "nothing was written")
        return src
    if canonicalize_name(dist) in DOWNLOADED:
        return WheelSource.local(download_wheel(dist, version))
    picked = pick_remote_wheel(dist, version)
    if picked is None:
        raise Unpublished(f"{dist}=={version}: the package index this machine reached serves no wheel for this version")
    return WheelSource.remote(*picked)


def record(dist: str, version: str, wheel: str | None = None, force: bool = False) -> tuple[BaseRecord, str]:
    """Read ``dist==version`` and write its record. Returns ``(record, status)`` with status ``written``,
    ``unchanged`` or ``differs`` (an existing different record is kept unless ``force``)."""
    dist = str(canonicalize_name(dist))
    version = str(Version(version))
    src = open_wheel(dist, version, wheel)
    command = command_for(dist, version, wheel)
    if dist in FULL:
        rec = FULL[dist](src, version, command)
    else:
        method = (f"METADATA read from {src.filename} on PyPI by HTTP range requests (sha256 as listed by the index)"
                  if src.url else f"METADATA read from {src.filename}")
        rec = MetadataRecord(**base_fields(src, dist, version, command, method))
    path = store.record_path(dist, version)
    if path.is_file():
        try:
            same = parse_record(json.loads(path.read_text())).model_dump(mode="json") == rec.model_dump(mode="json")
        except (ValueError, ValidationError):  # an older schema or a damaged file: not the same facts
            same = False
        if same:
            store.write_record(rec)  # same facts: rewritten in the current schema, index entry refreshed
            return rec, "unchanged"
        if not force:
            return rec, "differs"
    store.write_record(rec)
    return rec, "written"


def _pins_of(dist: str, versions: list[str]) -> dict[str, dict[str, list[str]]]:
    """``{pinned dist: {version: [pinning 'vllm==x', ...]}}`` over recorded vLLM versions, extras included."""
    out: dict[str, dict[str, list[str]]] = {}
    for v in versions:
        rec = store.load(dist, v)
        reqs = list(rec.requires_dist)
        for raw in reqs:
            for name, spec in exact_pins([raw.split(";")[0]], always=()).items():
                for s in spec.split(","):
                    if s.startswith("=="):
                        out.setdefault(name, {}).setdefault(s[2:], []).append(f"{dist}=={v}")
    return out


def record_all(log=print, force: bool = False) -> dict:
    """Record every version the workbook keeps (see the module constants); returns a summary."""
    summary = {"written": [], "unchanged": [], "differs": [], "unavailable": []}

    def one(dist, version):
        try:
            _, status = record(dist, version, force=force)
        except Unpublished as exc:
            summary["unavailable"].append((dist, version, str(exc)))
            log(f"  {dist} {version}: not on the package index this machine reached")
            return
        summary[status].append(f"{dist}=={version}")
        log(f"  {dist} {version}: {status}")

    vllm_versions = released_versions("vllm", *VLLM_RANGE)
    log(f"vllm: {len(vllm_versions)} releases {vllm_versions[0]} .. {vllm_versions[-1]}")
    for v in vllm_versions:
        one("vllm", v)
    pins = _pins_of("vllm", vllm_versions)
    fi_index = simple_index("flashinfer-python")
    fi_published = {str(Version(v)) for v in fi_index.get("versions", [])}
    fi_versions = sorted(set(FLASHINFER_BASE) | set(pins.get("flashinfer-python", {})), key=Version)
    for v in fi_versions:
        if v not in fi_published:
            summary["unavailable"].append(("flashinfer-python", v, "the package index this machine reached lists no such version"))
            log(f"  flashinfer-python {v}: not on the package index this machine reached")
            continue
        one("flashinfer-python", v)
    for dist in sorted(set(pins) - {"flashinfer-python"}):
        if dist not in ("torch", "b12x", *FLASHINFER_SIDE):
            continue
        for v in sorted(pins[dist], key=Version):
            one(dist, v)
    for side in FLASHINFER_SIDE:
        try:
            published = {str(Version(v)) for v in simple_index(side).get("versions", [])}
        except Exception:  # noqa: BLE001 - a 404 means the dist is not on PyPI at all
            published = set()
            summary["unavailable"].append((side, "*", "the package index this machine reached serves no project of this name"))
            log(f"  {side}: not on the package index this machine reached")
        for v in fi_versions:
            if v in published and f"{side}=={v}" not in summary["written"] + summary["unchanged"]:
                one(side, v)
    idx = store.read_index()
    unavailable = []
    for dist, version, reason in summary["unavailable"]:
        pinned_by = pins.get(dist, {}).get(version, [])
        unavailable.append(Unavailable(dist=dist, version=version, pinned_by=sorted(set(pinned_by), key=lambda s: Version(
            s.split("==")[1])), reason=reason))
    idx.unavailable = unavailable
    store.write_index(idx)
    return summary
