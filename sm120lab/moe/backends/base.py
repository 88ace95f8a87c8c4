"""What a MoE backend is: a name, what it needs, and ``run(problem, out)`` (see the package docstring)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
from packaging.version import InvalidVersion, Version


def _version_tuple(text: str | None) -> tuple[int, ...]:
    """Release numbers of a version string (``packaging.version``), () when absent or unparsable."""
    if not text:
        return ()
    try:
        return Version(text).release
    except InvalidVersion:
        return ()


@dataclass(frozen=True)
class Needs:
    """What a backend needs to run.

    device:        "any", "cpu" or "cuda"
    capabilities:  allowed compute-capability majors on CUDA (e.g. (10, 12)); empty = any
    min_capability: lowest (major, minor) on CUDA, or None
    packages:      importable module names (checked with importlib.util.find_spec, nothing imported)
    min_cuda:      lowest CUDA runtime version torch was built with, e.g. "12.8", or None
    """

    device: str = "any"
    capabilities: tuple[int, ...] = ()
    min_capability: tuple[int, int] | None = None
    packages: tuple[str, ...] = ()
    min_cuda: str | None = None

    def describe(self) -> str:
        parts = [f"device={self.device}"]
        if self.capabilities:
            parts.append("SM" + "/".join(f"{c}x" for c in self.capabilities))
        if self.min_capability:
            parts.append(f"SM>={self.min_capability[0]}{self.min_capability[1]}")
        if self.packages:
            parts.append("+".join(self.packages))
        if self.min_cuda:
            parts.append(f"CUDA>={self.min_cuda}")
        return ", ".join(parts)

    def skip_reason(self, device) -> str | None:
        dev = torch.device(device)
        if self.device == "cuda" and dev.type != "cuda":
            return f"needs a CUDA GPU ({self.describe()}); running on {dev.type}"
        if self.device == "cpu" and dev.type != "cpu":
            return "runs on CPU only"
        for pkg in self.packages:
            try:
                found = importlib.util.find_spec(pkg) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return f"package {pkg!r} is not importable"
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                return "torch sees no CUDA device"
            cap = torch.cuda.get_device_capability(dev)
            if self.capabilities and cap[0] not in self.capabilities:
                allowed = "/".join(f"SM{c}x" for c in self.capabilities)
                return f"needs {allowed}; this GPU is SM{cap[0]}{cap[1]}"
            if self.min_capability and cap < self.min_capability:
                return f"needs SM>={self.min_capability[0]}{self.min_capability[1]}; this GPU is SM{cap[0]}{cap[1]}"
            if self.min_cuda and _version_tuple(torch.version.cuda) < _version_tuple(self.min_cuda):
                return f"needs CUDA >= {self.min_cuda}; torch was built with CUDA {torch.version.cuda}"
        return None


class Backend:
    """Base class. Subclasses set the class attributes and implement :meth:`run`."""

    name: str = ""
    summary: str = ""
    needs: Needs = Needs()
    out_dtype: torch.dtype = torch.bfloat16
    #: which error envelope applies: "exact" (the reference), "w4a16" (16-bit activations), "w4a4"
    numerics: str = "w4a16"
    #: False for real code that has not been run on the hardware it targets (SM100/SM120)
    verified: bool = True

    def skip_reason(self, device) -> str | None:
        return self.needs.skip_reason(device)

    def output_dtype(self, device) -> torch.dtype:
        """dtype of the output buffer the harness allocates on ``device``."""
        return self.out_dtype

    def run(self, problem, out: torch.Tensor) -> dict | None:  # pragma: no cover - interface
        raise NotImplementedError

    def info(self) -> dict:
        return {"name": self.name, "summary": self.summary, "needs": self.needs.describe(),
                "numerics": self.numerics, "verified": self.verified}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
