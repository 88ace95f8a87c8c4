"""FP8 E4M3 (``float8_e4m3fn``) block scales: 1 sign, 4 exponent (bias 7), 3 mantissa bits,
max finite 448, no Inf, one NaN pattern per sign. Source: OCP 8-bit Floating Point
Specification (OFP8) rev 1.0; PTX ISA ``.e4m3``.

Block scales are non-negative; conversion is round-to-nearest-even with saturation to 448
(``cvt.rn.satfinite.e4m3x2.f32``), which torch's cast gives after a clamp.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def e4m3_round_satfinite(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, RNE, |x| > 448 saturating to +-448 (NaN stays NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
