"""Where the roofline's input tables live: ``data/`` at the repository root.

Thin alias of :func:`sm120lab.paths.data_dir` (``SM120LAB_ROOT`` overrides the root).
"""

from __future__ import annotations

from sm120lab.paths import data_dir

__all__ = ["data_dir"]
