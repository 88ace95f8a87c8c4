"""Where sm120lab keeps toolkits it installed: ``$SM120LAB_TOOLCHAINS`` or
``~/.cache/sm120lab/toolchains``, one folder per version, each with a marker file written last."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SM120LAB_TOOLCHAINS"
MARKER = "sm120lab-toolchain.json"


def toolchains_root() -> Path:
    value = os.environ.get(ENV_VAR)
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "sm120lab" / "toolchains"


def version_dir(version: str) -> Path:
    return toolchains_root() / version
