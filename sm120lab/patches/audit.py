"""The audit table: for one tree, each patch's classification, state in the files, and advice.

:func:`audit_available` audits what this machine has: the installed FlashInfer / vLLM when they
are installed, else wheels from a local wheelhouse (``$SM120LAB_WHEELHOUSE``), else wheels
downloaded from PyPI; every package or version it could not audit gets a one-line reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sm120lab.enums import StrEnum

from . import textmatch as tm
from .engine import PatchState, status
from .site import SiteError, SiteTree, locate
from .spec import Classification, SpecError, SpecSet, import_name_of, load_specs, normalize_package


def advice(state: PatchState) -> str:
    """One phrase: what a user of this version should do about the patch."""
    p, st = state.patch, state.status
    if p.classification == Classification.HARMFUL:
        return "do not apply: unlocks a path with no SM120 kernels" + (" (applied here: revert)" if st == tm.APPLIED else "")
    if p.classification == Classification.UPSTREAMED:
        return f"not needed: upstream in {p.upstreamed_in}"
    if p.classification == Classification.NO_OP:
        return "not needed: changes nothing on SM120"
    if st == tm.APPLIED:
        return "needed: applied"
    if st == tm.APPLICABLE:
        return "needed: apply it" if p.default_apply else "needed: apply with --only"
    return f"needed, but {st}: the spec does not fit this tree"


def rows(tree: SiteTree, specs: SpecSet) -> list[dict]:
    """One dict per patch (JSON-ready), in spec order."""
    out = []
    for s in status(tree, specs):
        p = s.patch
        out.append({
            "id": p.id, "file": p.file, "line": s.line, "classification": p.classification.value,
            "upstreamed_in": p.upstreamed_in, "status": s.status, "advice": advice(s),
            "default_apply": p.default_apply, "seed_ref": p.seed_ref, "purpose": p.purpose,
            "evidence": p.evidence, "source": p.source,
        })
    return out


def settings_rows(specs: SpecSet) -> list[dict]:
    return [{"id": s.id, "env": s.env, "replaces": list(s.replaces), "purpose": s.purpose,
             "evidence": s.evidence} for s in specs.settings]


def summary(rows_: list[dict]) -> dict[str, int]:
    """``{classification: count}`` plus ``{status: count}`` under ``status:<name>`` keys."""
    out: dict[str, int] = {}
    for r in rows_:
        out[r["classification"]] = out.get(r["classification"], 0) + 1
        key = f"status:{r['status']}"
        out[key] = out.get(key, 0) + 1
    return out


# --- what this machine has -------------------------------------------------------------------

class Origin(StrEnum):
    """Where an audited tree came from."""

    INSTALLED = "installed"    # site-packages of this interpreter
    WHEELHOUSE = "wheelhouse"  # a local .whl ($SM120LAB_WHEELHOUSE or the wheelhouse argument)
    PYPI = "pypi"              # downloaded from PyPI (or found in the download cache)


#: audited from PyPI when a package is neither installed nor in the wheelhouse
DEFAULT_FALLBACK: dict[str, tuple[str, ...]] = {"flashinfer-python": ("0.6.5", "0.7.4"), "vllm": ()}


@dataclass
class TreeAudit:
    """One audited tree: its package, version, origin, root, specs and :func:`rows`."""

    package: str
    version: str
    origin: Origin
    root: Path
    specs: SpecSet
    rows: list[dict]

    @property
    def key(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass
class AvailableAudit:
    """Result of :func:`audit_available`.

    ``audits``: every tree audited. ``not_audited``: ``{package or package==version: one-line
    reason}`` for every package (or wheel) that could not be audited.
    """

    audits: list[TreeAudit] = field(default_factory=list)
    not_audited: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per audited tree and per reason, for printing."""
        out = [f"{a.key}: audited ({a.origin.value}, {len(a.rows)} patches) at {a.root}" for a in self.audits]
        return out + [f"{k}: not audited: {why}" for k, why in self.not_audited.items()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _audit_tree(tree: SiteTree, origin: Origin) -> TreeAudit:
    specs = load_specs(tree.package, tree.version)
    return TreeAudit(tree.package, tree.version, origin, tree.root, specs, rows(tree, specs))


def audit_available(packages: tuple[str, ...] | list[str] = ("flashinfer-python", "vllm"), *,
                    fallback: dict[str, tuple[str, ...]] | None = None,
                    wheelhouse: str | os.PathLike | list | None = None,
                    download: bool = True, quiet: bool = True) -> AvailableAudit:
    """Audit every package in ``packages`` from the best source this machine has.

    Per package: the installed one if it is installed and a spec covers its version; otherwise
    every wheel of it in the wheelhouse (``wheelhouse`` folders plus ``$SM120LAB_WHEELHOUSE``);
    otherwise (``download=True``) the ``fallback`` versions fetched from PyPI (default
    :data:`DEFAULT_FALLBACK`: FlashInfer 0.6.5 and 0.7.4; vLLM's 433 MB wheel only when asked).
    Only the files the specs touch are extracted from a wheel.

    Args:
        packages: distribution names or aliases (``flashinfer``, ``vllm``).
        fallback: ``{distribution: versions}`` to download when neither installed nor in the wheelhouse.
        wheelhouse: a folder (or list of folders) of ``.whl`` files.
        download: allow ``pip download`` (off: installed and wheelhouse only).
        quiet: no progress line when a download starts.

    Returns:
        :class:`AvailableAudit`: the audits, and a one-line reason per package/wheel not audited.
        Never raises for a missing package, a failed download or a version without a spec.
    """
    from ..toolchains.pypi_wheels import local_wheels, wheelhouse_dirs
    from .wheels import fetch_for_audit

    fallback = DEFAULT_FALLBACK if fallback is None else {normalize_package(k): tuple(v) for k, v in fallback.items()}
    result = AvailableAudit()
    dirs = wheelhouse_dirs(wheelhouse)
    for package in dict.fromkeys(normalize_package(p) for p in packages):
        import_name = import_name_of(package)
        why: list[str] = []
        try:
            result.audits.append(_audit_tree(locate(package, import_name), Origin.INSTALLED))
            continue
        except SiteError as exc:
            why.append(str(exc).splitlines()[0].split(";")[0])
        except SpecError as exc:  # installed, but no spec for its version: try wheels
            why.append(f"installed, but {str(exc).splitlines()[0].split(' (specs')[0]}")
        done = False
        for path, _, version in local_wheels(dirs, package):
            key = f"{package}=={version}"
            if any(a.key == key for a in result.audits):
                continue
            try:
                root = fetch_for_audit(package, str(version), wheelhouse=dirs)
                result.audits.append(_audit_tree(locate(package, import_name, root), Origin.WHEELHOUSE))
                done = True
            except (SpecError, SiteError, OSError, ValueError, RuntimeError) as exc:
                result.not_audited[key] = f"{path.name}: {_one_line(exc)}"
        if done:
            continue
        why.append(f"no {package} wheel in the wheelhouse ({', '.join(map(str, dirs)) or 'none given; set $SM120LAB_WHEELHOUSE'})")
        versions = fallback.get(package, ())
        if not download or not versions:
            why.append("downloads are off" if not download else f"no fallback versions to download for {package}")
            result.not_audited[package] = "; ".join(why)
            continue
        for version in versions:
            key = f"{package}=={version}"
            try:
                root = fetch_for_audit(package, version, quiet=quiet, wheelhouse=dirs)
                result.audits.append(_audit_tree(locate(package, import_name, root), Origin.PYPI))
            except (SpecError, SiteError, OSError, ValueError, RuntimeError) as exc:
                result.not_audited[key] = "; ".join([*why, _one_line(exc)])
    return result
