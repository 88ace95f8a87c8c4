"""``sm120lab patch status|apply|revert``: audit and safely apply SM120 patches to FlashInfer / vLLM."""

from __future__ import annotations

import argparse
import sys

_EPILOG = """examples:
  sm120lab patch status                         # installed flashinfer (else a cached or fetched wheel): every seed patch, classified
  sm120lab patch status --package vllm --evidence
  sm120lab patch status --site ~/.cache/sm120lab/wheels/flashinfer-python-0.6.5
  sm120lab patch status --wheel wheelhouse/flashinfer_python-0.7.4-py3-none-any.whl   # no install needed
  sm120lab patch apply --dry-run                # unified diffs of the `needed` patches
  sm120lab patch apply --clear-jit-cache
  sm120lab patch revert
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "patch", help="audit / apply / revert SM120 patches for FlashInfer and vLLM",
        description="Check which of the SM120 patches people pass around matter for your installed "
                    "FlashInfer / vLLM, apply the needed ones atomically with a backup, revert byte for byte.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["status", "apply", "revert"])
    p.add_argument("--package", default="flashinfer", metavar="NAME",
                   help="flashinfer | vllm | a distribution name with a spec (default: flashinfer)")
    p.add_argument("--site", metavar="PATH", help="an unpacked wheel / site-packages root to use instead of the installed package")
    p.add_argument("--wheel", metavar="FILE.whl",
                   help="status: audit this wheel file (only the files the specs touch are extracted, into the cache)")
    p.add_argument("--dry-run", action="store_true", help="apply/revert: show unified diffs, write nothing")
    p.add_argument("--only", nargs="+", metavar="ID", help="apply: these patch ids instead of the default `needed` set")
    p.add_argument("--clear-jit-cache", action="store_true",
                   help="after apply/revert, delete FlashInfer's JIT build cache (~/.cache/flashinfer, keeps cubins)")
    p.add_argument("--evidence", action="store_true", help="status: print each patch's evidence lines")
    p.add_argument("--json", metavar="FILE", help="status: also write the audit rows as JSON (atomically)")
    p.set_defaults(func=run)


def run(args) -> int:
    import importlib.util

    from rich.console import Console
    from rich.markup import escape

    from ..patches import audit, engine
    from ..patches.site import SiteError, locate
    from ..patches.spec import (
        Classification,
        SpecError,
        import_name_of,
        load_specs,
        normalize_package,
        supported_ranges,
    )

    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 150)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    package = normalize_package(args.package)
    try:
        ranges = supported_ranges(package)
    except SpecError as exc:
        err.print(f"error: {exc}", markup=False)
        return 2
    if not ranges:
        err.print(f"--package: no patch specs for {args.package!r}; expected flashinfer or vllm")
        return 2
    if args.only and args.action != "apply":
        err.print("--only: only `apply` takes patch ids; `revert` restores every file it patched, byte for byte")
        return 2
    if args.wheel:
        if args.action != "status" or args.site:
            err.print("--wheel: only `status` audits a wheel file, and not together with --site", markup=False)
            return 2
        package, site = _wheel_site(args.wheel, err)
        if site is None:
            return 2
        args.site = site
    import_name = import_name_of(package)
    origin = "--site" if args.site else ""
    if args.site is None and args.action == "status" and importlib.util.find_spec(import_name) is None:
        args.site, origin = _fallback_site(package, err)
        if args.site is None:
            return 2
    try:
        tree = locate(package, import_name, args.site)
        specs = load_specs(package, tree.version)
    except (SiteError, SpecError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    where = f"{tree.root}" + (f" ({origin})" if origin else "")
    console.print(f"[bold]{package} {tree.version}[/bold] at {where}; specs: {', '.join(specs.sources)}")

    if args.action == "status":
        return _status(console, tree, specs, args, audit)
    if args.action == "apply" and args.only:
        for pid in args.only:
            p = next((p for p in specs.patches if p.id == pid), None)
            if p is not None and p.classification != Classification.NEEDED:
                console.print(f"[yellow]warning:[/yellow] {pid} is classified {p.classification.value}"
                              + (": it unlocks a path with no SM120 kernels" if p.classification == Classification.HARMFUL else
                                 ": it is not needed for this version"))
    try:
        if args.action == "apply":
            out = engine.apply(tree, specs, args.only, dry_run=args.dry_run)
        else:
            out = engine.revert(tree, specs, dry_run=args.dry_run)
    except (engine.PatchError, KeyError) as exc:
        err.print(f"[red]refused:[/red] {escape(str(exc.args[0] if exc.args else exc))}")
        # an unknown or documented-only --only id is a bad argument (2); a refused site a failed action (1)
        return 2 if isinstance(exc, (KeyError, engine.PatchArgumentError)) else 1
    for note in out.notes:
        console.print(f"note: {note}", markup=False)
    for pid in out.skipped:
        console.print(f"  already {'applied' if out.action == 'apply' else 'original'}: {pid}")
    if not out.changed:
        console.print(f"nothing to {out.action}" + (" (no patch is both `needed` and default_apply for this version; "
                                                      "use --only ID, see `sm120lab patch status`)"
                                                      if out.action == "apply" and not args.only and not out.skipped else ""))
        return 0
    for c in out.changes:
        if args.dry_run:
            sys.stdout.write(c.diff())
        else:
            console.print(f"  {'patched' if out.action == 'apply' else 'restored'} {c.rel}"
                          f" ({', '.join(c.patch_ids)})")
    if args.dry_run:
        console.print(f"dry run: {len(out.changes)} file(s) would change; nothing written")
        return 0
    console.print(f"manifest: {out.manifest}" if out.action == "apply" else "backups and manifest removed")
    if package == "flashinfer-python":
        cache = engine.flashinfer_cache_dir()
        if args.clear_jit_cache:
            removed = engine.clear_flashinfer_jit_cache(cache)
            console.print(f"cleared FlashInfer JIT cache: {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} under {cache}")
        else:
            console.print(f"[yellow]FlashInfer reuses JIT-built modules from {cache}: clear it (rm -rf "
                          f"{cache}/{tree.version}, or rerun with --clear-jit-cache) so the changed "
                          f"sources are compiled[/yellow]")
    return 0


def _wheel_site(wheel: str, err):
    """``(distribution, extracted root)`` for a wheel file, or ``(None, None)`` after a one-line error."""
    import zipfile
    from pathlib import Path

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    from ..patches.spec import SpecError
    from ..patches.wheels import fetch_for_audit

    path = Path(wheel).expanduser()
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        err.print(f"--wheel: {wheel} is not a wheel file name (expected NAME-VERSION-TAGS.whl)", markup=False)
        return None, None
    if not path.is_file():
        err.print(f"--wheel: {wheel} does not exist", markup=False)
        return None, None
    try:
        return str(name), fetch_for_audit(str(name), str(version), wheelhouse=path.parent.resolve())
    except (SpecError, OSError, ValueError, RuntimeError, zipfile.BadZipFile) as exc:
        err.print(f"--wheel: {wheel}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
                  markup=False)
        return None, None


def _fallback_site(package: str, err):
    """``(root, origin)`` of a wheel of ``package`` to audit when it is not installed, or ``(None, "")``
    after a one-line error that names every way to point the audit at one."""
    import zipfile

    from ..patches.spec import SpecError
    from ..patches.wheels import fallback_version, fetch_for_audit
    from ..toolchains.pypi_wheels import WHEELHOUSE_ENV

    ways = (f"--site DIR (an unpacked wheel or site-packages), --wheel FILE.whl, ${WHEELHOUSE_ENV}=DIR "
            f"(a folder of .whl files), or pip install {package}")
    try:
        version, held = fallback_version(package)
        err.print(f"note: {package} is not installed here; auditing its {'cached' if held else 'PyPI'} {version} "
                  f"wheel. To audit another: {ways}.", markup=False)
        return str(fetch_for_audit(package, version, quiet=False)), f"{version} wheel, not installed"
    except (SpecError, OSError, ValueError, RuntimeError, zipfile.BadZipFile) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        err.print(f"error: {package} is not installed here and no wheel of it could be read ({why}); "
                  f"point the audit at one: {ways}", markup=False)
        return None, ""


def _short(path: str) -> str:
    """``.../tcgen05/copy.py`` for long paths (the full path is in --evidence and --json)."""
    parts = path.split("/")
    return path if len(path) <= 44 else ".../" + "/".join(parts[-2:])


def _guide_settings(tree, settings: list[dict]) -> list[dict]:
    """The spec settings with FLASHINFER_CUDA_ARCH_LIST set to the decision guide's value for this
    FlashInfer release (``sm120lab.recommend.arch_list_for``: the release's own arch-list logic on an
    RTX PRO 6000 with CUDA 13.0), so `patch status` and `recommend` never disagree."""
    from ..recommend import arch_list_for

    out = []
    for s in settings:
        env = dict(s["env"])
        if "FLASHINFER_CUDA_ARCH_LIST" in env and tree.package.startswith("flashinfer"):
            value = arch_list_for(tree.version)
            if value:
                env["FLASHINFER_CUDA_ARCH_LIST"] = value
                s = {**s, "purpose": f"{s['purpose']} (value from sm120lab recommend for FlashInfer {tree.version}: "
                                     "what its own arch-list logic picks on SM 12.0 with CUDA 13.0)"}
        out.append({**s, "env": env})
    return out


def _status(console, tree, specs, args, audit) -> int:
    from rich.table import Table

    rows = audit.rows(tree, specs)
    table = Table(title=f"patches for {tree.package} {tree.version}", show_lines=False)
    for col in ("id", "file:line", "class", "state", "advice"):
        table.add_column(col, overflow="fold", no_wrap=col in ("id", "state"))
    for r in rows:
        loc = _short(r["file"]) + (f":{r['line']}" if r["line"] else "") if r["file"] else "(not in the wheel)"
        cls = r["classification"] + (f" {r['upstreamed_in']}" if r["upstreamed_in"] else "")
        table.add_row(r["id"], loc, cls, r["status"], r["advice"])
    console.print(table)
    if args.evidence:
        for r in rows:
            console.print(f"\n[bold]{r['id']}[/bold] ({r['classification']}): {r['purpose']}")
            console.print(r["evidence"], markup=False)
    settings = _guide_settings(tree, audit.settings_rows(specs))
    for s in settings:
        env = " ".join(f"{k}={v}" for k, v in s["env"].items())
        rep = f" (replaces {', '.join(s['replaces'])})" if s["replaces"] else ""
        console.print(f"setting {s['id']}: {env}{rep}: {s['purpose']}", markup=False)
    counts = audit.summary(rows)
    console.print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())), markup=False)
    if args.json:
        from ..atomic_io import write_json_atomic
        from ..cmdline import command_line
        from ..envinfo import collect

        try:
            write_json_atomic(args.json, {"package": tree.package, "version": tree.version, "root": str(tree.root),
                                          "rows": rows, "settings": settings,
                                          "command": command_line("sm120lab", getattr(args, "argv", None)), "env": collect()})
        except OSError as exc:
            print(f"--json: cannot write {args.json} ({exc.strerror or exc}); expected a writable file path",
                  file=sys.stderr)
            return 2
        console.print(f"wrote {args.json}")
    return 0
