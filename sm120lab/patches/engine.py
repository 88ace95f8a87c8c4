"""Check, apply and revert patch specs on a site-packages tree, safely.

* ``status``: per patch, applicable / applied / anchor-missing / anchor-ambiguous /
  file-missing / documented-only (see :mod:`.textmatch`).
* ``apply``: every selected anchor must match exactly once (or the patch be applied already:
  a second apply is a no-op). Order of writes: byte-exact backups, then the manifest
  (``<root>/.sm120lab-patches/<dist>/manifest.json``: original and new SHA-256 per file), then
  each file by temp file + ``os.replace`` (:func:`sm120lab.atomic_io.write_bytes_atomic`). A
  crash at any point leaves every file either original or fully patched, and the manifest
  knows both hashes, so ``revert`` still works.
* ``revert``: restores every file from its backup, byte for byte, after checking that each file
  still has the hash apply wrote (or the original one); then deletes the backups.
Refusals raise :class:`PatchError` with what to do.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic_io import write_bytes_atomic, write_json_atomic
from . import textmatch as tm
from .site import SiteTree
from .spec import Patch, SpecSet

STATE_DIR = ".sm120lab-patches"


class PatchError(RuntimeError):
    """A refusal: the message says why and what to do."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class PatchState:
    patch: Patch
    status: str
    line: int | None = None  # where the anchor (or, if applied, the replacement) starts


@dataclass
class FileChange:
    rel: str
    old: bytes
    new: bytes
    patch_ids: list[str] = field(default_factory=list)

    def diff(self) -> str:
        a = self.old.decode("utf-8", errors="replace").splitlines(keepends=True)
        b = self.new.decode("utf-8", errors="replace").splitlines(keepends=True)
        return "".join(difflib.unified_diff(a, b, f"a/{self.rel}", f"b/{self.rel}"))


@dataclass
class Outcome:
    action: str                      # "apply" | "revert"
    changes: list[FileChange]
    skipped: list[str]               # patch ids already applied / files already original
    dry_run: bool
    manifest: Path
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def state_dir(tree: SiteTree) -> Path:
    return tree.root / STATE_DIR / tree.package


def manifest_path(tree: SiteTree) -> Path:
    return state_dir(tree) / "manifest.json"


def read_manifest(tree: SiteTree) -> dict | None:
    path = manifest_path(tree)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PatchError(f"{path} is not valid JSON ({exc}); it was not written by this version "
                         f"of sm120lab or was edited. Reinstall {tree.package}=={tree.version} "
                         f"(pip install --force-reinstall --no-deps) and delete {state_dir(tree)}") from exc


def _file(tree: SiteTree, rel: str) -> Path:
    return tree.root / rel


def sweep_temps(path: Path) -> list[Path]:
    """Delete temp files a killed atomic write left beside ``path`` (``.<name>.<random>.tmp``,
    the names :func:`sm120lab.atomic_io.write_bytes_atomic` uses); only for files we manage."""
    removed = []
    for t in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            t.unlink()
            removed.append(t)
        except FileNotFoundError:
            pass
    return removed


def status(tree: SiteTree, specs: SpecSet) -> list[PatchState]:
    """State of every patch in ``specs`` on ``tree`` (reads files, writes nothing)."""
    cache: dict[str, bytes | None] = {}
    out = []
    for p in specs.patches:
        if p.documented_only:
            out.append(PatchState(p, tm.DOCUMENTED_ONLY))
            continue
        if p.file not in cache:
            path = _file(tree, p.file)
            cache[p.file] = path.read_bytes() if path.is_file() else None
        data = cache[p.file]
        if data is None:
            out.append(PatchState(p, tm.FILE_MISSING))
            continue
        st = tm.classify(data, p.anchor.encode(), p.replacement.encode())
        needle = p.replacement if st == tm.APPLIED else p.anchor
        out.append(PatchState(p, st, tm.line_of(data, needle.encode())))
    return out


def select(specs: SpecSet, only: list[str] | None) -> list[Patch]:
    """``only`` ids (any classification), else every ``needed`` patch with default_apply."""
    if only:
        chosen = [specs.patch(i) for i in dict.fromkeys(only)]
        doc = [p.id for p in chosen if p.documented_only]
        if doc:
            raise PatchError(f"--only: {', '.join(doc)} are documented-only entries (source edits not "
                             "present in the wheel): there is nothing to apply")
        return chosen
    return [p for p in specs.patches
            if p.classification == "needed" and p.default_apply and not p.documented_only]


def _check_manifest_files(tree: SiteTree, manifest: dict) -> dict[str, str]:
    """``{rel: "new"|"original"}`` for each file the manifest lists; raise if any changed."""
    states, bad = {}, []
    for rel, entry in manifest.get("files", {}).items():
        path = _file(tree, rel)
        cur = sha256(path.read_bytes()) if path.is_file() else None
        if cur == entry["new_sha256"]:
            states[rel] = "new"
        elif cur == entry["original_sha256"]:
            states[rel] = "original"
        else:
            bad.append(f"  {rel}: sha256 {cur or 'file missing'}, expected {entry['new_sha256']} "
                       f"(patched) or {entry['original_sha256']} (original)")
    if bad:
        raise PatchError(
            "refusing: these files changed since sm120lab patched them:\n" + "\n".join(bad) +
            f"\nIf {tree.package} was reinstalled or upgraded, its files are original again: delete "
            f"{state_dir(tree)} and run the command again. Otherwise restore the package with "
            f"`pip install --force-reinstall --no-deps {tree.package}=={tree.version}` and delete "
            f"{state_dir(tree)}.")
    return states


def plan_apply(tree: SiteTree, specs: SpecSet, only: list[str] | None = None) -> tuple[list[FileChange], list[str]]:
    """The file contents apply would write, and the ids already applied. Raises on a bad anchor."""
    chosen = select(specs, only)
    manifest = read_manifest(tree)
    if manifest is not None:
        _check_manifest_files(tree, manifest)
    changes: dict[str, FileChange] = {}
    skipped, errors = [], []
    for p in chosen:
        path = _file(tree, p.file)
        if p.file not in changes:
            if not path.is_file():
                errors.append(f"  {p.id}: {p.file} does not exist under {tree.root}")
                continue
            data = path.read_bytes()
            changes[p.file] = FileChange(p.file, data, data)
        fc = changes[p.file]
        anchor, repl = p.anchor.encode(), p.replacement.encode()
        st = tm.classify(fc.new, anchor, repl)
        if st == tm.APPLIED:
            skipped.append(p.id)
        elif st == tm.APPLICABLE:
            fc.new = fc.new.replace(anchor, repl, 1)
            fc.patch_ids.append(p.id)
        else:
            n_anchor, n_repl = tm.counts(fc.new, anchor, repl)
            errors.append(f"  {p.id}: {st} in {p.file} (anchor found {n_anchor}x, replacement "
                          f"{n_repl}x; exactly one of them must occur once)")
    if errors:
        raise PatchError(
            f"refusing to patch {tree.package} {tree.version} at {tree.root}:\n" + "\n".join(errors) +
            "\nThe file differs from the one the spec was written against. Check the version "
            "(`sm120lab patch status`), reinstall the package if it was edited by hand, or update "
            "the spec's anchor after reading the file.")
    return [c for c in changes.values() if c.new != c.old], skipped


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def apply(tree: SiteTree, specs: SpecSet, only: list[str] | None = None, dry_run: bool = False) -> Outcome:
    """Apply the selected patches (see :func:`select`); idempotent."""
    changes, skipped = plan_apply(tree, specs, only)
    mpath = manifest_path(tree)
    out = Outcome("apply", changes, skipped, dry_run, mpath)
    if dry_run or not changes:
        return out
    manifest = read_manifest(tree) or {
        "tool": "sm120lab patch", "package": tree.package, "version": tree.version,
        "root": str(tree.root), "files": {},
    }
    files = manifest["files"]
    try:
        for c in changes:  # 1. backups of the bytes as they are now, verified
            entry = files.get(c.rel)
            if entry is None or sha256(c.old) == entry["original_sha256"]:
                backup = state_dir(tree) / "backup" / c.rel
                write_bytes_atomic(backup, c.old)
                if sha256(backup.read_bytes()) != sha256(c.old):
                    raise PatchError(f"backup {backup} does not read back identical; nothing was patched")
                files[c.rel] = {"original_sha256": sha256(c.old), "backup": f"backup/{c.rel}", "patches": []}
            files[c.rel]["new_sha256"] = sha256(c.new)
            files[c.rel]["patches"] = list(dict.fromkeys(files[c.rel]["patches"] + c.patch_ids))
        manifest["updated_utc"] = _now()
        manifest["complete"] = False
        write_json_atomic(mpath, manifest)  # 2. manifest knows old and new hashes
        for c in changes:  # 3. each file replaced atomically
            sweep_temps(_file(tree, c.rel))
            write_bytes_atomic(_file(tree, c.rel), c.new)
        manifest["complete"] = True
        write_json_atomic(mpath, manifest)
    except PermissionError as exc:
        raise PatchError(f"no write permission under {tree.root} ({exc}); run as the user that "
                         "installed the package, or patch a virtualenv you own") from exc
    return out


def plan_revert(tree: SiteTree) -> tuple[list[FileChange], list[str], dict | None]:
    manifest = read_manifest(tree)
    if manifest is None:
        return [], [], None
    states = _check_manifest_files(tree, manifest)
    changes, skipped = [], []
    for rel, entry in manifest["files"].items():
        if states[rel] == "original":
            skipped.append(rel)
            continue
        backup = state_dir(tree) / entry["backup"]
        if not backup.is_file() or sha256(backup.read_bytes()) != entry["original_sha256"]:
            raise PatchError(f"refusing to revert: backup {backup} is missing or does not match the "
                             f"recorded original hash. Restore the package with `pip install "
                             f"--force-reinstall --no-deps {tree.package}=={tree.version}` and delete "
                             f"{state_dir(tree)}.")
        changes.append(FileChange(rel, _file(tree, rel).read_bytes(), backup.read_bytes(),
                                  list(entry.get("patches", []))))
    return changes, skipped, manifest


def revert(tree: SiteTree, specs: SpecSet | None = None, dry_run: bool = False) -> Outcome:
    """Restore every file sm120lab patched, byte for byte, then forget the backups.

    Without a manifest there is nothing sm120lab applied. Patches whose replacement text is
    present anyway (a hand edit such as the seed report's, another tool, or upstream shipping
    the same text) are listed in ``notes`` with the reinstall command; nothing is written.
    """
    changes, skipped, manifest = plan_revert(tree)
    out = Outcome("revert", changes, skipped, dry_run, manifest_path(tree))
    if manifest is None:
        if specs is not None:
            present = [s.patch.id for s in status(tree, specs) if s.status == tm.APPLIED]
            if present:
                out.notes.append(
                    f"no record of sm120lab patching this tree (no {manifest_path(tree)}), but the "
                    f"replacement text of {', '.join(present)} is present: edited by hand, by another "
                    f"tool, or shipped that way by {tree.package} {tree.version}. To get the wheel's "
                    f"original files: pip install --force-reinstall --no-deps {tree.package}=={tree.version}")
        return out
    if dry_run:
        return out
    try:
        for c in changes:
            write_bytes_atomic(_file(tree, c.rel), c.new)
        for rel in manifest["files"]:
            sweep_temps(_file(tree, rel))
        shutil.rmtree(state_dir(tree))
        parent = tree.root / STATE_DIR
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
    except PermissionError as exc:
        raise PatchError(f"no write permission under {tree.root} ({exc})") from exc
    return out


# --- FlashInfer JIT cache -------------------------------------------------------------------

def flashinfer_cache_dir() -> Path:
    """``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` (default base: home), as in
    flashinfer/jit/env.py:51-55 of the 0.6.5 wheel."""
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or str(Path.home())
    return Path(base) / ".cache" / "flashinfer"


def clear_flashinfer_jit_cache(cache: Path | None = None) -> list[Path]:
    """Delete the JIT build directories (``<cache>/<version>/...``); keep downloaded ``cubins``."""
    cache = cache or flashinfer_cache_dir()
    removed = []
    if cache.is_dir():
        for child in sorted(cache.iterdir()):
            if child.name == "cubins":
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
            removed.append(child)
    return removed
