"""Where the repository's folders are, for notebooks and commands run from anywhere."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The checkout holding ``notebooks/`` and ``data/`` (``SM120LAB_ROOT`` overrides)."""
    env = os.environ.get("SM120LAB_ROOT")
    if env:
        return Path(env).resolve()
    candidate = PACKAGE_DIR.parent
    if (candidate / "notebooks").is_dir():
        return candidate
    return Path.cwd()


def cache_root() -> Path:
    """Downloads and compile caches: ``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``."""
    return Path(os.environ.get("SM120LAB_CACHE") or Path.home() / ".cache" / "sm120lab").expanduser()


def data_dir() -> Path:
    return repo_root() / "data"


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"
