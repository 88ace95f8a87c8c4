"""``sm120lab toolchains``: list CUDA toolkits found here, or install pinned ones from PyPI.

`sm120lab toolchains install 12.8 12.9 13.0` installs pinned PyPI wheels into $SM120LAB_TOOLCHAINS (default
~/.cache/sm120lab/toolchains/<ver>), one pip call per version, skipping versions already there.
`sm120lab toolchains --list` (or no arguments) lists every toolkit found on this machine and in that cache."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("toolchains", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              help="find CUDA toolkits, or install 12.8/12.9/13.0 from PyPI wheels")
    p.add_argument("action", nargs="?", choices=("install", "list"), default="list")
    p.add_argument("versions", nargs="*", help="versions to install: 12.8 12.9 13.0 sass-tools")
    p.add_argument("--list", action="store_true", help="list toolkits (after installing, if asked)")
    p.add_argument("--force", action="store_true", help="reinstall even if present")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from ..cmdline import EXIT_TOOL, EXIT_USAGE
    from ..toolchains import discover, discover_all, find_sass_tool, install_many, known_versions, toolchains_root

    if args.action == "install":
        if not args.versions:
            print(f"toolchains install: give versions, e.g. {' '.join(known_versions())}", file=sys.stderr)
            return 2
        try:
            install_many(args.versions, force=args.force, log=lambda s: print(s, flush=True))
        except ValueError as exc:  # an unknown version: a bad argument
            print(f"versions: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except RuntimeError as exc:  # pip failed: no answer, not a failed check
            print(f"toolchains install: {exc}", file=sys.stderr)
            return EXIT_TOOL
        if not args.list:
            return 0
    elif args.versions:
        print("toolchains: versions are only taken by `install`", file=sys.stderr)
        return 2
    tks = discover(refresh=True)
    print(f"cache: {toolchains_root()}")
    if not tks:
        print("no CUDA toolkit found")
    for tk in tks:
        print(f"{tk.name:6} {tk.version:10} {tk.frontend:6} {tk.origin}")
    for tk in discover_all():
        if tk not in tks:
            print(f"{tk.name:6} {tk.version:10} {tk.frontend:6} {tk.origin}  (shadowed by the {tk.name} above)")
    print(f"SASS tool: {find_sass_tool() or 'none (sm120lab toolchains install sass-tools)'}")
    return 0
