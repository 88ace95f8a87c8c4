#!/usr/bin/env python3
"""Install a folder of carried wheels on an offline GPU machine without disturbing its own stack.

    python3 scripts/install_wheelhouse.py WHEEL_DIR TARGET_DIR

Pure-Python wheels are always installed into TARGET_DIR (put it first on PYTHONPATH), so the
notebook toolchain (papermill, nbconvert, jupytext, ...) is exactly the pinned one. A compiled wheel
(platform tag other than ``any``) is skipped when the machine already has that distribution, so the
image's own numpy/pandas/matplotlib builds, which its torch was built against, stay in charge.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: install_wheelhouse.py WHEEL_DIR TARGET_DIR", file=sys.stderr)
        return 2
    wheel_dir, target = Path(argv[0]), Path(argv[1])
    chosen, kept = [], []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        name, version, _, tags = parse_wheel_filename(wheel.name)
        compiled = any(t.platform != "any" for t in tags)
        have = installed(canonicalize_name(name))
        if compiled and have is not None:
            kept.append(f"{name} {have} (machine's own; carried {version})")
        else:
            chosen.append(str(wheel))
    print(f"installing {len(chosen)} wheels into {target}; keeping {len(kept)} of the machine's own builds")
    for line in kept:
        print("  kept", line)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", str(target), *chosen]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
