"""Portable Triton kernels for NVFP4 MoE (and, in :mod:`.probes`, CUDA compile probes).

``fused_moe_nvfp4`` (the full MoE layer, W4A16 and W4A4) is imported lazily so that importing
this package needs no Triton (the probes do not).
"""

from __future__ import annotations

__all__ = ["fused_moe_nvfp4", "native_fp4_supported"]


def __getattr__(name):
    if name in __all__:
        from . import moe_layer as _mod

        return getattr(_mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
