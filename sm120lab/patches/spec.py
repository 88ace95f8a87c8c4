"""Patch specs: declarative, version-ranged text edits to an installed wheel (data, not code).

A spec file (``sm120lab/patches/specs/*.yaml``) names a distribution (``package``), its import
directory (``import_name``), a PEP 440 specifier set (``versions``), a list of ``patches``
(exact ``anchor`` text that must occur once in ``file`` -> ``replacement``) and optional
``settings`` (environment variables that make a patch unnecessary). Every patch carries its
``classification`` (needed | no-op | harmful | upstreamed) and the ``evidence`` read from the
wheel. A patch whose ``file``/``anchor`` are null is *documented only*: a source-tree edit that
no wheel contains (nothing to apply). :func:`load_specs` merges every file whose package and
range match one installed version.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sm120lab.enums import StrEnum


class Classification(StrEnum):
    """What a patch means for SM120 (a str-Enum: compares and serialises as its value)."""

    NEEDED = "needed"          # the fix matters on SM120 for this version
    NO_OP = "no-op"            # changes nothing on SM120
    HARMFUL = "harmful"        # unlocks a path with no SM120 kernels
    UPSTREAMED = "upstreamed"  # the version already does it

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


CLASSIFICATIONS = tuple(c.value for c in Classification)
_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SPEC_DIR_PACKAGE = "sm120lab.patches"

#: short names accepted by ``--package``
PACKAGE_ALIASES = {"flashinfer": "flashinfer-python", "vllm": "vllm"}


class SpecError(ValueError):
    """A spec file that does not follow the format (message names the file and field)."""


@dataclass(frozen=True)
class Patch:
    id: str
    file: str | None
    anchor: str | None
    replacement: str | None
    classification: Classification
    purpose: str
    evidence: str
    upstreamed_in: str | None = None
    seed_ref: str | None = None
    default_apply: bool = False
    source: str = ""  # spec file name it came from

    @property
    def documented_only(self) -> bool:
        """True for a source edit that is not in the wheel: nothing to apply or check."""
        return self.anchor is None


@dataclass(frozen=True)
class Setting:
    id: str
    env: dict[str, str]
    replaces: tuple[str, ...]
    purpose: str
    evidence: str
    source: str = ""


@dataclass
class SpecSet:
    """All patches and settings for one ``package`` at one version (merged over spec files)."""

    package: str
    import_name: str
    version: str
    patches: list[Patch] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def patch(self, patch_id: str) -> Patch:
        for p in self.patches:
            if p.id == patch_id:
                return p
        known = ", ".join(p.id for p in self.patches)
        raise KeyError(f"--only: no patch {patch_id!r} for {self.package} {self.version}; known ids: {known}")


def _req(d: dict, key: str, where: str, types=(str,)):
    if key not in d:
        raise SpecError(f"{where}: missing field {key!r}")
    value = d[key]
    if not isinstance(value, types):
        raise SpecError(f"{where}: field {key!r} must be {'/'.join(t.__name__ for t in types)}, got {value!r}")
    return value


def _opt_str(d: dict, key: str, where: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(f"{where}: field {key!r} must be a string or null, got {value!r}")
    return value


def _entries(raw: dict, key: str, name: str):
    """``(where, entry)`` for each mapping in the spec's list ``key`` (``where`` names it in errors)."""
    for i, entry in enumerate(raw.get(key) or []):
        where = f"{name}: {key}[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: expected a mapping")
        yield where, entry


def _prose(d: dict, where: str) -> dict[str, str]:
    """An entry's required ``purpose`` (stripped) and ``evidence`` (trailing newlines dropped)."""
    return {"purpose": _req(d, "purpose", where).strip(), "evidence": _req(d, "evidence", where).rstrip("\n")}


def parse_spec_file(text: str, name: str) -> dict:
    """Validate one YAML spec file; returns a dict with ``package``, ``import_name``,
    ``versions`` (SpecifierSet), ``patches`` and ``settings`` lists."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise SpecError(f"{name}: not valid YAML{at}: {getattr(exc, 'problem', None) or type(exc).__name__}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{name}: expected a mapping at top level")
    package = _req(raw, "package", name)
    import_name = _req(raw, "import_name", name)
    try:
        versions = SpecifierSet(_req(raw, "versions", name))
    except InvalidSpecifier as exc:
        raise SpecError(f"{name}: field 'versions' is not a PEP 440 specifier set: {exc}") from exc
    patches = []
    for where, p in _entries(raw, "patches", name):
        pid = _req(p, "id", where)
        if not _ID_RE.match(pid):
            raise SpecError(f"{where}: id {pid!r} must be kebab-case (a-z, 0-9, '-')")
        where = f"{name}: patch {pid}"
        file_, anchor, repl = (_opt_str(p, k, where) for k in ("file", "anchor", "replacement"))
        if (anchor is None) != (repl is None) or (anchor is not None and file_ is None):
            raise SpecError(f"{where}: 'file', 'anchor' and 'replacement' must all be set "
                            "(or anchor and replacement both null for a documented-only entry)")
        if anchor is not None and (anchor == "" or anchor == repl):
            raise SpecError(f"{where}: 'anchor' must be non-empty and differ from 'replacement'")
        if file_ is not None and (file_.startswith("/") or ".." in Path(file_).parts):
            raise SpecError(f"{where}: 'file' must be relative to the site-packages root, got {file_!r}")
        cls = _req(p, "classification", where)
        if cls not in CLASSIFICATIONS:
            raise SpecError(f"{where}: classification must be one of {CLASSIFICATIONS}, got {cls!r}")
        upstreamed_in = p.get("upstreamed_in")
        if upstreamed_in is not None:
            upstreamed_in = str(upstreamed_in)
        if cls == "upstreamed" and not upstreamed_in:
            raise SpecError(f"{where}: classification 'upstreamed' needs 'upstreamed_in'")
        default_apply = p.get("default_apply", False)
        if not isinstance(default_apply, bool):
            raise SpecError(f"{where}: default_apply must be true or false")
        patches.append(Patch(
            id=pid, file=file_, anchor=anchor, replacement=repl, classification=Classification(cls),
            **_prose(p, where), upstreamed_in=upstreamed_in, seed_ref=_opt_str(p, "seed_ref", where),
            default_apply=default_apply, source=name,
        ))
    settings = []
    for where, s in _entries(raw, "settings", name):
        sid = _req(s, "id", where)
        env = _req(s, "env", where, (dict,))
        replaces = s.get("replaces") or []
        if not isinstance(replaces, list) or not all(isinstance(r, str) for r in replaces):
            raise SpecError(f"{where}: 'replaces' must be a list of patch ids")
        settings.append(Setting(
            id=sid, env={str(k): str(v) for k, v in env.items()}, replaces=tuple(replaces), **_prose(s, where),
            source=name,
        ))
    return {"package": package, "import_name": import_name, "versions": versions,
            "patches": patches, "settings": settings}


EXTRA_SPECS_ENV = "SM120LAB_PATCH_SPECS"


def spec_texts() -> dict[str, str]:
    """``{file name: YAML text}`` of every packaged spec file, sorted by name, plus the ``*.yaml``
    in each directory listed in ``$SM120LAB_PATCH_SPECS`` (os.pathsep-separated; for specs you
    write yourself before they are packaged)."""
    root = resources.files(SPEC_DIR_PACKAGE) / "specs"
    out = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            out[entry.name] = entry.read_text(encoding="utf-8")
    for directory in filter(None, os.environ.get(EXTRA_SPECS_ENV, "").split(os.pathsep)):
        d = Path(directory).expanduser()
        if not d.is_dir():
            raise SpecError(f"${EXTRA_SPECS_ENV}: {d} is not a directory of *.yaml spec files")
        for f in sorted(d.glob("*.yaml")):
            if f.name in out:
                raise SpecError(f"${EXTRA_SPECS_ENV}: {f} has the same name as a packaged spec file")
            try:
                out[f.name] = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SpecError(f"${EXTRA_SPECS_ENV}: {f} is not a readable UTF-8 YAML spec file "
                                f"({type(exc).__name__}); fix or remove it") from None
    return out


def all_spec_files() -> list[dict]:
    return [parse_spec_file(text, name) | {"name": name} for name, text in spec_texts().items()]


def import_name_of(package: str) -> str:
    """The import directory of ``package`` as its spec files name it (``flashinfer-python`` ->
    ``flashinfer``); the distribution name itself when no spec file names it."""
    package = normalize_package(package)
    names = {f["import_name"] for f in all_spec_files() if f["package"] == package}
    return names.pop() if len(names) == 1 else package


def normalize_package(name: str) -> str:
    """``flashinfer`` -> ``flashinfer-python``; distribution names pass through."""
    return PACKAGE_ALIASES.get(name, name)


def supported_ranges(package: str) -> list[str]:
    package = normalize_package(package)
    return [str(f["versions"]) for f in all_spec_files() if f["package"] == package]


def load_specs(package: str, version: str) -> SpecSet:
    """Merge every spec file for ``package`` whose ``versions`` contains ``version``.

    Raises :class:`SpecError` when no file matches (with the ranges that exist) or when two
    files define the same patch id.
    """
    package = normalize_package(package)
    try:
        v = Version(version)
    except InvalidVersion as exc:
        raise SpecError(f"version: {version!r} is not a PEP 440 version") from exc
    files = [f for f in all_spec_files() if f["package"] == package]
    matching = [f for f in files if f["versions"].contains(v, prereleases=True)]
    if not matching:
        ranges = ", ".join(str(f["versions"]) for f in files) or "none"
        raise SpecError(
            f"no patch spec for {package} {version} (specs exist for: {ranges}). Nothing is known "
            f"about this version: install a covered version, or write a spec file in "
            f"sm120lab/patches/specs/ after reading that version's files.")
    import_names = {f["import_name"] for f in matching}
    if len(import_names) != 1:
        raise SpecError(f"spec files for {package} disagree on import_name: {sorted(import_names)}")
    out = SpecSet(package=package, import_name=import_names.pop(), version=version)
    seen: dict[str, str] = {}
    for f in matching:
        out.sources.append(f["name"])
        for p in f["patches"]:
            if p.id in seen:
                raise SpecError(f"patch id {p.id!r} defined twice ({seen[p.id]} and {f['name']})")
            seen[p.id] = f["name"]
            out.patches.append(p)
        out.settings.extend(f["settings"])
    return out
