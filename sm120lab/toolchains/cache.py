"""Where sm120lab keeps toolkits it installed: ``$SM120LAB_TOOLCHAINS`` or
``<sm120lab cache>/toolchains`` (``$SM120LAB_CACHE`` or ``~/.cache/sm120lab``), one folder per version, each with a marker file written last."""

from __future__ import annotations

import os
from pathlib import Path

from ..paths import cache_root

ENV_VAR = "SM120LAB_TOOLCHAINS"
MARKER = "sm120lab-toolchain.json"


def toolchains_root() -> Path:
    value = os.environ.get(ENV_VAR)
    if value:
        return Path(value).expanduser()
    return cache_root() / "toolchains"


def version_dir(version: str) -> Path:
    return toolchains_root() / version
