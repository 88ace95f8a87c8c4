"""Compile targets: a virtual architecture for the front end (``compute_120f``) and a real one
for ptxas (``sm_121a``). ``sm_120a`` is shorthand for ``compute_120a -> sm_120a``; a cross
target is written ``compute_120f->sm_121a`` (what ``-gencode arch=compute_120f,code=sm_121a`` does).

Suffixes (CUDA 12.8 / 12.9 programming guide, "feature availability"): none = portable across
later architectures; ``a`` = architecture-specific, this exact chip only (defines
``__CUDA_ARCH_SPECIFIC__`` from 12.9 and ``__CUDA_ARCH_FEAT_SMxxx_ALL``); ``f`` = family-specific,
runs on later chips of the same family (defines ``__CUDA_ARCH_FAMILY_SPECIFIC__``), from 12.9.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ARCH = re.compile(r"^(?:sm|compute)_(\d{2,3})([af]?)$")
_CROSS = re.compile(r"^compute_(\d{2,3}[af]?)\s*->\s*sm_(\d{2,3}[af]?)$")

DEFAULT_TARGETS = (
    "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f",
    "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f",
    "compute_120f->sm_121a", "compute_120f->sm_121f", "compute_120f->sm_121",
    "compute_120a->sm_121a", "compute_120->sm_121",
)


@dataclass(frozen=True, order=True)
class Target:
    arch: str   # virtual, e.g. "compute_120f"
    code: str   # real, e.g. "sm_121a"

    @property
    def label(self) -> str:
        if self.arch.replace("compute_", "sm_") == self.code:
            return self.code
        return f"{self.arch}->{self.code}"

    @property
    def is_cross(self) -> bool:
        return self.arch.replace("compute_", "sm_") != self.code

    @property
    def cc(self) -> int:
        """Compute capability number of the real target (121 for sm_121a)."""
        return int(re.match(r"sm_(\d+)", self.code).group(1))

    @property
    def suffix(self) -> str:
        return _ARCH.match(self.arch).group(2)


def parse_target(text: str) -> Target:
    """``sm_120a`` / ``compute_120f->sm_121a`` -> Target; ValueError naming the argument otherwise."""
    t = text.strip()
    m = _CROSS.match(t)
    if m:
        return Target(f"compute_{m.group(1)}", f"sm_{m.group(2)}")
    m = _ARCH.match(t)
    if m:
        num, suf = m.groups()
        return Target(f"compute_{num}{suf}", f"sm_{num}{suf}")
    raise ValueError(f"--target {text!r}: expected sm_<NN>[a|f] (e.g. sm_120a) or "
                     f"compute_<NN>[a|f]->sm_<NN>[a|f] (e.g. compute_120f->sm_121a)")


def default_targets() -> list[Target]:
    return [parse_target(t) for t in DEFAULT_TARGETS]
