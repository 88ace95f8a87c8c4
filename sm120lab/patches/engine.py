"""Check, apply and revert patch specs on a site-packages tree, safely.

* ``status``: per patch, applicable / applied / anchor-missing / anchor-ambiguous /
  file-missing / documented-only (see :mod:`.textmatch`).
* ``apply``: every selected anchor must match exactly once (or the patch be applied already:
  a second apply is a no-op). Order of writes: byte-exact backups, then the manifest
  (``<root>/.sm120lab-patches/<dist>/manifest.json``: original and new SHA-256 per file), then
  each file by temp file + ``os.replace`` (:func:`sm120lab.atomic_io.write_bytes_atomic`). A
  crash at any point leaves every file either original or fully patched, and the manifest
  knows both hashes, so ``revert`` still works.
  If any file cannot be written, every file already written is restored from its backup and
  the manifest returns to what it was: all or nothing across files.
* ``revert``: restores every file from its backup, byte for byte, after checking that each file
  still has the hash apply wrote (or the original one); then deletes the backups, but only after
  checking that every target is byte-identical to its backup (a backup is never deleted while a
  target differs from it).
* The manifest is validated before it is used: a mapping with the known keys, every path
  relative and inside the site, every hash 64 hex digits, every backup at ``backup/<path>``.
Refusals raise :class:`PatchError` with what to do.

Testing hook: ``SM120LAB_PATCH_KILL_AT=N`` sends SIGKILL to this process before its N-th write
step (backups, manifest, files, backup removal), to prove a kill at any step leaves every file
old or new and that a later ``revert`` restores all of them.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import hashlib
import json
import os
import re
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic_io import write_bytes_atomic, write_json_atomic
from . import textmatch as tm
from .site import SiteTree
from .spec import Patch, SpecSet

STATE_DIR = ".sm120lab-patches"
KILL_ENV = "SM120LAB_PATCH_KILL_AT"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_KEYS = {"tool", "package", "version", "root", "files", "updated_utc", "complete"}
_ENTRY_KEYS = {"original_sha256", "new_sha256", "backup", "patches"}
_steps = [0]


def _step() -> None:
    """One write step; the testing hook ``$SM120LAB_PATCH_KILL_AT`` kills the process at step N."""
    _steps[0] += 1
    at = os.environ.get(KILL_ENV)
    if at and at.isdigit() and int(at) == _steps[0]:
        os.kill(os.getpid(), signal.SIGKILL)


class PatchError(RuntimeError):
    """A refusal: the message says why and what to do."""


class PatchArgumentError(PatchError):
    """A refusal of the arguments themselves (``--only`` naming something there is nothing to apply for)."""


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
    """The validated manifest of ``tree``, or None when sm120lab has not patched it."""
    path = manifest_path(tree)
    if not path.exists():
        return None
    fix = (f"Restore the package with `pip install --force-reinstall --no-deps {tree.package}=={tree.version}`, "
           f"then move {state_dir(tree)} away")
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PatchError(f"{path} is not a readable JSON manifest ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:120]}). {fix}") from None
    problem = manifest_problem(tree, raw)
    if problem:
        raise PatchError(f"{path} is not a valid sm120lab manifest: {problem}. {fix}")
    return raw


def safe_rel(tree: SiteTree, rel: object) -> bool:
    """True when ``rel`` is a relative path to a file inside the site and outside the state dir."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or p.parts[0] == STATE_DIR or rel != p.as_posix():
        return False
    root = tree.root.resolve()
    try:
        return (root / p).resolve().is_relative_to(root)
    except (OSError, RuntimeError, ValueError):
        return False


def manifest_problem(tree: SiteTree, raw: object) -> str | None:
    """What is wrong with a manifest (one phrase), or None when it is valid for ``tree``."""
    if not isinstance(raw, dict):
        return f"expected a JSON object, got {type(raw).__name__}"
    unknown = set(raw) - _MANIFEST_KEYS
    if unknown:
        return f"unknown keys {sorted(map(str, unknown))}"
    for key in ("package", "version", "files"):
        if key not in raw:
            return f"missing key {key!r}"
    if raw["package"] != tree.package:
        return f"package {raw['package']!r} is not {tree.package!r}"
    if not isinstance(raw["files"], dict):
        return f"'files' must be an object, got {type(raw['files']).__name__}"
    for rel, entry in raw["files"].items():
        if not safe_rel(tree, rel):
            return f"file path {rel!r} is not a relative path inside {tree.root}"
        if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
            return f"entry for {rel!r} must have exactly the keys {sorted(_ENTRY_KEYS)}"
        if not all(isinstance(entry[k], str) and _HEX64.match(entry[k]) for k in ("original_sha256", "new_sha256")):
            return f"entry for {rel!r}: hashes must be 64 lower-case hex digits"
        if entry["backup"] != f"backup/{rel}":
            return f"entry for {rel!r}: backup must be 'backup/{rel}', got {entry['backup']!r}"
        if not isinstance(entry["patches"], list) or not all(isinstance(i, str) for i in entry["patches"]):
            return f"entry for {rel!r}: 'patches' must be a list of patch ids"
    return None


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
            raise PatchArgumentError(f"--only: {', '.join(doc)} are documented-only entries (source edits not "
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


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def apply(tree: SiteTree, specs: SpecSet, only: list[str] | None = None, dry_run: bool = False) -> Outcome:
    """Apply the selected patches (see :func:`select`); idempotent; all files or none.

    Raises:
        PatchError: a bad anchor, a tampered file, a bad manifest, or a file that cannot be
            written (then every file written so far is restored and the manifest is as before).
    """
    changes, skipped = plan_apply(tree, specs, only)
    mpath = manifest_path(tree)
    out = Outcome("apply", changes, skipped, dry_run, mpath)
    if dry_run or not changes:
        return out
    blocked = [c.rel for c in changes if not _writable(_file(tree, c.rel))]
    if blocked:
        raise PatchError(f"refusing: no write permission for {', '.join(blocked)} under {tree.root}; "
                         "nothing was written. Run as the user that installed the package, or patch a "
                         "virtualenv you own")
    previous = read_manifest(tree)
    for c in changes:  # a backup the manifest does not list (a killed apply) is overwritten only with equal bytes
        backup = state_dir(tree) / "backup" / c.rel
        listed = previous is not None and c.rel in previous["files"]
        if not listed and backup.exists() and (not backup.is_file() or backup.read_bytes() != c.old):
            raise PatchError(f"refusing: {backup} is not listed in the manifest and differs from {c.rel}; it may "
                             f"hold the only copy of the original file. Compare them, restore the file if needed, "
                             f"then delete the backup")
    manifest = copy.deepcopy(previous) if previous else {
        "tool": "sm120lab patch", "package": tree.package, "version": tree.version,
        "root": str(tree.root), "files": {},
    }
    files = manifest["files"]
    new_backups: list[Path] = []
    written: list[FileChange] = []
    try:
        for c in changes:  # 1. backups of the bytes as they are now, verified
            entry = files.get(c.rel)
            if entry is None or sha256(c.old) == entry["original_sha256"]:
                backup = state_dir(tree) / "backup" / c.rel
                _step()
                if not backup.exists():
                    new_backups.append(backup)
                write_bytes_atomic(backup, c.old)
                if sha256(backup.read_bytes()) != sha256(c.old):
                    raise PatchError(f"backup {backup} does not read back identical; nothing was patched")
                files[c.rel] = {"original_sha256": sha256(c.old), "backup": f"backup/{c.rel}", "patches": []}
            files[c.rel]["new_sha256"] = sha256(c.new)
            files[c.rel]["patches"] = list(dict.fromkeys(files[c.rel]["patches"] + c.patch_ids))
        manifest["updated_utc"] = _now()
        manifest["complete"] = False
        _step()
        write_json_atomic(mpath, manifest)  # 2. manifest knows old and new hashes
        for c in changes:  # 3. each file replaced atomically
            sweep_temps(_file(tree, c.rel))
            _step()
            written.append(c)
            write_bytes_atomic(_file(tree, c.rel), c.new)
        manifest["complete"] = True
        _step()
        write_json_atomic(mpath, manifest)
    except (OSError, PatchError) as exc:
        _roll_back(tree, written, previous, new_backups)
        raise PatchError(f"could not apply to {tree.root} ({type(exc).__name__}: {exc}); every file was "
                         "restored and nothing is patched. Run as the user that installed the package, "
                         "or patch a virtualenv you own") from exc
    return out


def _roll_back(tree: SiteTree, written: list[FileChange], previous: dict | None, new_backups: list[Path]) -> None:
    """Undo a failed apply: files back to their old bytes, the manifest back to ``previous``;
    backups created by the failed apply are deleted only once their target is byte-identical."""
    failed = []
    for c in reversed(written):
        path = _file(tree, c.rel)
        try:
            if not path.is_file() or path.read_bytes() != c.old:
                write_bytes_atomic(path, c.old)
            sweep_temps(path)
        except OSError as exc:
            failed.append(f"{c.rel} ({exc})")
    if failed:  # keep the manifest (it knows both hashes) so `patch revert` can finish the job
        raise PatchError(f"apply failed and these files could not be restored: {', '.join(failed)}; "
                         f"the manifest and backups under {state_dir(tree)} are kept: run `sm120lab patch "
                         "revert` once the files are writable")
    mpath = manifest_path(tree)
    if previous is not None:
        write_json_atomic(mpath, previous)
    elif mpath.exists():
        mpath.unlink()
    for backup in new_backups:
        rel = backup.relative_to(state_dir(tree) / "backup").as_posix()
        if backup.is_file() and _file(tree, rel).is_file() and _file(tree, rel).read_bytes() == backup.read_bytes():
            backup.unlink()
    _prune_empty(tree)


def _prune_empty(tree: SiteTree) -> None:
    """Remove empty folders under ``<root>/.sm120lab-patches`` and that folder itself if empty
    (never a file, never anything outside it)."""
    top = tree.root / STATE_DIR
    if not top.is_dir():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir() and not p.is_symlink()),
                    key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    if not any(top.iterdir()):
        top.rmdir()


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
        if state_dir(tree).exists() and not dry_run:  # backups of a killed apply, before its manifest
            _check_backups_match(tree)
            _step()
            shutil.rmtree(state_dir(tree))
            _prune_empty(tree)
            out.notes.append(f"removed backups left by an interrupted apply (every file equals its backup): {state_dir(tree)}")
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
    written: list[FileChange] = []
    try:
        for c in changes:
            _step()
            written.append(c)
            write_bytes_atomic(_file(tree, c.rel), c.new)
        for rel in manifest["files"]:
            sweep_temps(_file(tree, rel))
        _check_backups_match(tree)
    except (OSError, PatchError) as exc:
        stuck = []
        for c in reversed(written):  # all or nothing: put the patched bytes back
            path = _file(tree, c.rel)
            try:
                if not path.is_file() or path.read_bytes() != c.old:
                    write_bytes_atomic(path, c.old)
                sweep_temps(path)
            except OSError:
                stuck.append(c.rel)
        if isinstance(exc, PatchError) and not stuck:
            raise
        raise PatchError(f"could not revert {tree.root} ({type(exc).__name__}: {exc}); "
                         + (f"these files could not be put back and are original now: {', '.join(stuck)}; "
                            if stuck else "every file is as it was before this revert; ")
                         + f"the manifest and backups under {state_dir(tree)} are kept") from exc
    try:  # every file is original and equals its backup: the backups can go
        _step()
        shutil.rmtree(state_dir(tree))
        _prune_empty(tree)
    except OSError as exc:
        raise PatchError(f"every file is restored, but {state_dir(tree)} could not be deleted ({exc}); "
                         "delete it by hand") from exc
    return out


def _check_backups_match(tree: SiteTree) -> None:
    """Refuse to delete the backups while any target differs from its backup."""
    backups = state_dir(tree) / "backup"
    if not backups.is_dir():
        return
    differ = []
    for b in sorted(p for p in backups.rglob("*") if p.is_file() or p.is_symlink()):
        if b.name.startswith(".") and b.name.endswith(".tmp") and not b.is_symlink():
            b.unlink()  # the temp file of a backup write that was killed: never a complete backup
            continue
        rel = b.relative_to(backups).as_posix()
        target = _file(tree, rel)
        if b.is_symlink() or not safe_rel(tree, rel) or not target.is_file() or target.read_bytes() != b.read_bytes():
            differ.append(rel)
    if differ:
        raise PatchError(
            f"refusing to delete the backups: {', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''} "
            f"differ from their backup under {backups} and the manifest does not list them. Copy each "
            f"backup over its file (they hold the original bytes) or reinstall with `pip install "
            f"--force-reinstall --no-deps {tree.package}=={tree.version}`, then delete {state_dir(tree)}")


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
