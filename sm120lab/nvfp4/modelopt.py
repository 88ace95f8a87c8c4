"""ModelOpt NVFP4 checkpoint convention: scales are stored decode-side.

A ModelOpt checkpoint stores ``weight_scale_2`` (per tensor / per expert) and ``input_scale``
(activations) as ``amax / (448 * 6)``, the reciprocal of the encode-side global scale
``gs = 448 * 6 / amax`` that quantizers take. FlashInfer and vLLM pass ``1 / input_scale`` to their
activation quantizer and ``alpha = input_scale * weight_scale_2`` to the GEMM. Every conversion
here says its direction in its name; nothing converts implicitly.
"""

from __future__ import annotations

import torch


def _positive(name: str, t) -> torch.Tensor:
    if isinstance(t, (int, float)):
        t = torch.tensor(float(t), dtype=torch.float32)
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(f"{name} must be a float or floating torch.Tensor, got {type(t).__name__}")
    if not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
        raise ValueError(f"{name} must be finite and > 0")
    return t.float()


def modelopt_scale_from_global_scale(global_scale) -> torch.Tensor:
    """Encode-side gs -> decode-side ModelOpt value (``weight_scale_2`` / ``input_scale``) = 1/gs."""
    return torch.reciprocal(_positive("global_scale", global_scale))


def global_scale_from_modelopt_scale(modelopt_scale) -> torch.Tensor:
    """Decode-side ModelOpt ``weight_scale_2`` / ``input_scale`` -> encode-side gs = 1/value."""
    return torch.reciprocal(_positive("modelopt_scale", modelopt_scale))


def gemm_alpha_from_modelopt_scales(input_scale, weight_scale_2) -> torch.Tensor:
    """GEMM output scale ``alpha = input_scale * weight_scale_2`` (= 1 / (gs_a * gs_b))."""
    return _positive("input_scale", input_scale) * _positive("weight_scale_2", weight_scale_2)
