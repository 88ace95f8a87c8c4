"""One CUDA toolkit as sm120lab uses it: a front end that turns CUDA C++ into PTX (``nvcc -ptx``
or NVRTC), that version's ``ptxas`` for PTX -> cubin, and its include folders."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Toolkit:
    name: str                 # key used in results, e.g. "12.9" or "13.0"
    version: str              # full version, e.g. "12.9.86"
    frontend: str             # "nvcc" or "nvrtc"
    origin: str               # "system:/usr/local/cuda-13.0", "sm120lab-cache:/root/.cache/..."
    ptxas: str
    nvcc: str | None = None
    nvrtc_lib: str | None = None
    include_dirs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    def to_dict(self) -> dict:
        return asdict(self)
