"""One CUDA toolkit as sm120lab uses it: a front end that turns CUDA C++ into PTX (``nvcc -ptx``
or NVRTC), that version's ``ptxas`` for PTX -> cubin, and its include folders."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from packaging.version import Version


def toolkit_name(version: str) -> str:
    """``"12.9.86"`` -> ``"12.9"``: the key a toolkit is stored under."""
    major, minor = Version(version).release[:2]
    return f"{major}.{minor}"


def version_key(name: str) -> Version:
    """Sort key for toolkit names and versions (``"12.9"`` < ``"13.0"`` < ``"13.10"``)."""
    return Version(name)


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
        major, minor = Version(self.version).release[:2]
        return major, minor

    def to_dict(self) -> dict:
        return asdict(self)
