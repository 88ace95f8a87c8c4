"""``triton-w4a4``: :func:`sm120lab.kernels.fused_moe_nvfp4` with ``mode="w4a4"``.

Activations quantized per token row to NVFP4 by a Triton kernel with the problem's static
``a1_gscale``/``a2_gscale`` (bit-exact with ``sm120lab.nvfp4.quantize_nvfp4``), then the grouped
GEMM: ``tl.dot_scaled`` (block-scaled FP4 MMA) where ``native_fp4_supported`` (SM100, or SM120/121
with Triton >= 3.9) -- unverified on SM120 hardware, checked only by ahead-of-time compilation --
and exact in-kernel dequantization elsewhere (verified on an H200 against ``emulated-w4a4``).
"""

from __future__ import annotations

from .base import Backend, BackendInfo, Numerics
from .triton_w4a16 import TRITON_NEEDS


class TritonW4A4(Backend):
    info = BackendInfo("triton-w4a4", "sm120lab.kernels.fused_moe_nvfp4 mode=w4a4 (dot_scaled NVFP4 on SM100/SM120: "
                       "unverified on SM120 hardware; exact dequant elsewhere)",
                       Numerics.W4A4, TRITON_NEEDS, verified=False)  # native dot_scaled never run on SM120

    def run(self, problem, out):
        from sm120lab.kernels import fused_moe_nvfp4, native_fp4_supported

        native = native_fp4_supported(problem.hidden.device)
        fused_moe_nvfp4(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2,
                        mode="w4a4", a1_gscale=problem.a1_gscale, a2_gscale=problem.a2_gscale, out=out)
        return {"path": "tl.dot_scaled NVFP4 (unverified on SM120 hardware)" if native else "triton dequant",
                "a1_gscale": float(problem.a1_gscale), "a2_gscale": float(problem.a2_gscale)}


BACKEND = TritonW4A4()
