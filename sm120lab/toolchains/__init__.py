"""CUDA toolkits for the compile lab: find the ones on this machine, install pinned ones from
PyPI (``sm120lab toolchains install 12.8 12.9 13.0``), and compile through any of them
(front end -> PTX, ptxas -> cubin, cuobjdump -> SASS).

Modules: :mod:`.pins` (pinned wheels), :mod:`.cache` (where installs go), :mod:`.install`,
:mod:`.discover`, :mod:`.toolkit` (the ``Toolkit`` record), :mod:`.nvrtc`, :mod:`.compile`.
"""

from .cache import toolchains_root, version_dir
from .discover import discover, discover_all, find_sass_tool, get_toolkit
from .install import install, install_many, is_installed
from .pins import SASS_TOOLS, known_versions, wheels_for
from .toolkit import Toolkit

__all__ = ["Toolkit", "discover", "discover_all", "find_sass_tool", "get_toolkit", "install", "install_many",
           "is_installed", "known_versions", "toolchains_root", "version_dir", "wheels_for", "SASS_TOOLS"]
