"""What a MoE backend is: a :class:`BackendInfo` record and ``run(problem, out)`` (see the package docstring)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields, replace

import torch
from packaging.version import InvalidVersion, Version

from sm120lab.nvfp4 import Numerics


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


@dataclass(frozen=True)
class BackendInfo:
    """Everything the registry, the harness and the reports read about a backend besides ``run``.

    Args:
        name: registry key, e.g. ``"triton-w4a16"`` (unique among registered backends).
        summary: one line: what the backend calls and how far it has been checked.
        numerics: which error envelope applies (a :class:`sm120lab.nvfp4.Numerics` or its value).
        needs: what it needs to run (:class:`Needs`); the default runs anywhere.
        out_dtype: dtype of the output buffer the harness hands to ``run``.
        verified: False for real code not yet run on the hardware it targets (SM100/SM120).
    """

    name: str = ""
    summary: str = ""
    numerics: Numerics = Numerics.W4A16
    needs: Needs = Needs()
    out_dtype: torch.dtype = torch.bfloat16
    verified: bool = True

    def __post_init__(self) -> None:
        if self.numerics not in tuple(Numerics):
            raise ValueError(f"BackendInfo.numerics must be one of {[str(n) for n in Numerics]}, got {self.numerics!r}")
        object.__setattr__(self, "numerics", Numerics(self.numerics))
        if not isinstance(self.needs, Needs):
            raise TypeError(f"BackendInfo.needs must be a Needs, got {type(self.needs).__name__}")
        if not isinstance(self.out_dtype, torch.dtype):
            raise TypeError(f"BackendInfo.out_dtype must be a torch.dtype, got {self.out_dtype!r}")


#: the attributes of a backend that are fields of its :class:`BackendInfo`
INFO_FIELDS = tuple(f.name for f in fields(BackendInfo))


class _InfoField:
    """A :class:`Backend` attribute that reads (and, assigned, replaces) one field of its ``info``."""

    def __set_name__(self, owner, name: str) -> None:
        self.field = name

    def __get__(self, backend, owner=None):
        return getattr((owner if backend is None else backend).info, self.field)

    def __set__(self, backend, value) -> None:
        backend.info = replace(backend.info, **{self.field: value})


class Backend:
    """Base class. Subclasses declare ``info = BackendInfo(...)`` and implement :meth:`run`.

    ``name``, ``summary``, ``numerics``, ``needs``, ``out_dtype`` and ``verified`` read the fields of
    ``info``. A subclass may also set any of them as a class attribute (``name = "fault-x"``), and an
    instance may assign them: either way the field is replaced in ``info``, which stays the one record.
    """

    info: BackendInfo = BackendInfo()
    name = _InfoField()
    summary = _InfoField()
    numerics = _InfoField()
    needs = _InfoField()
    out_dtype = _InfoField()
    verified = _InfoField()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        declared = {f: cls.__dict__[f] for f in INFO_FIELDS if f in cls.__dict__}
        if declared:
            cls.info = replace(cls.info, **declared)
            for f in declared:
                delattr(cls, f)

    def skip_reason(self, device) -> str | None:
        return self.needs.skip_reason(device)

    def output_dtype(self, device) -> torch.dtype:
        """dtype of the output buffer the harness allocates on ``device``."""
        return self.out_dtype

    def run(self, problem, out: torch.Tensor) -> dict | None:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
