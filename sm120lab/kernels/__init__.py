"""Portable Triton kernels for NVFP4 MoE: the production kernels, their launchers, plan and prepack.

``prepare_moe_weights`` (one-time weight preparation, :mod:`.prepack`), ``fused_moe_packed`` (the
MoE layer on prepared weights: decode kernel or MMA kernel), ``fused_moe_nvfp4`` (the layer on
canonical NVFP4 tensors, W4A16 and W4A4) are imported lazily so that importing this package needs
no Triton. The CUDA compile probes, the MMA emulation and the AOT table live in the compile lab
(:mod:`sm120lab.archflags`).
"""

from __future__ import annotations

_LAZY = {"fused_moe_nvfp4": "moe_layer", "fused_moe_packed": "moe_layer", "native_fp4_supported": "moe_layer",
         "prepare_moe_weights": "prepack", "unpack_moe_weights": "prepack"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
