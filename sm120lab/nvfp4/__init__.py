"""The NVFP4 and MXFP4 number formats, bit-exact, in vectorized torch (CPU and CUDA).

Modules: :mod:`.e2m1` (4-bit elements, packing), :mod:`.swizzle` (the 128x4 scale layout),
:mod:`.quantize` (NVFP4 with its FP8 E4M3 block scales; the ScaleLayout and Numerics Enums), :mod:`.mxfp4`,
:mod:`.modelopt` (checkpoint scale conventions).
"""

from .e2m1 import E2M1_MAX, E2M1_VALUES, e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from .modelopt import (
                       gemm_alpha_from_modelopt_scales,
                       global_scale_from_modelopt_scale,
                       modelopt_scale_from_global_scale,
)
from .mxfp4 import MXFP4_BLOCK, MXFP4Tensor, dequantize_mxfp4, e8m0_to_float, quantize_mxfp4
from .quantize import (
                       E4M3_MAX,
                       NVFP4_BLOCK,
                       Numerics,
                       NVFP4Tensor,
                       ScaleLayout,
                       default_global_scale,
                       dequantize_nvfp4,
                       e4m3_round_satfinite,
                       quantize_nvfp4,
)
from .swizzle import swizzle_scales_128x4, unswizzle_scales_128x4

__all__ = [
    "E2M1_MAX", "E2M1_VALUES", "E4M3_MAX", "MXFP4_BLOCK", "NVFP4_BLOCK", "MXFP4Tensor", "NVFP4Tensor", "Numerics", "ScaleLayout",
    "default_global_scale", "dequantize_mxfp4", "dequantize_nvfp4", "e2m1_decode", "e2m1_encode",
    "e4m3_round_satfinite", "e8m0_to_float", "gemm_alpha_from_modelopt_scales",
    "global_scale_from_modelopt_scale", "modelopt_scale_from_global_scale", "pack_e2m1",
    "quantize_mxfp4", "quantize_nvfp4", "swizzle_scales_128x4", "unpack_e2m1", "unswizzle_scales_128x4",
]
