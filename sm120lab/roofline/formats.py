"""Storage cost of a weight format, in bits per parameter (data + scales).

- nvfp4: 4-bit E2M1 + one 8-bit E4M3 scale per 16 elements = 4 + 8/16 = 4.5 bits
  (the fp32 per-tensor scale is negligible).
- mxfp4: 4-bit E2M1 + one 8-bit E8M0 scale per 32 elements = 4 + 8/32 = 4.25 bits.
- fp8: 8 bits (per-channel / per-block scales < 0.1% and ignored).
- bf16: 16 bits.

``compute_rate_key`` names the tensor-core rate column of ``data/hardware.csv`` that a GEMM
with that *activation* format runs at (W4A16 kernels such as Marlin dequantize to bf16 and run
at the bf16 rate; W4A4 NVFP4/MXFP4 at the FP4 rate).
"""

from __future__ import annotations

BITS_PER_PARAM: dict[str, float] = {
    "nvfp4": 4.0 + 8.0 / 16.0,
    "mxfp4": 4.0 + 8.0 / 32.0,
    "fp8": 8.0,
    "bf16": 16.0,
}

RATE_KEY: dict[str, str] = {"nvfp4": "fp4", "mxfp4": "fp4", "fp8": "fp8", "bf16": "bf16"}


def check_format(fmt: str, *, arg: str = "format") -> str:
    if not isinstance(fmt, str) or fmt.lower() not in BITS_PER_PARAM:
        raise ValueError(f"{arg} must be one of {sorted(BITS_PER_PARAM)}, got {fmt!r}")
    return fmt.lower()


def bytes_per_param(fmt: str) -> float:
    """Bytes one parameter occupies in ``fmt`` (0.5625 for NVFP4)."""
    return BITS_PER_PARAM[check_format(fmt)] / 8.0


def compute_rate_key(activation_format: str) -> str:
    """'fp4' | 'fp8' | 'bf16': which tensor-core rate a GEMM with these activations uses."""
    return RATE_KEY[check_format(activation_format, arg="activation_format")]
