"""``triton-w4a16``: :func:`sm120lab.kernels.moe_layer.fused_moe_packed` on weights prepared by
:func:`sm120lab.kernels.prepack.prepare_moe_weights`.

The decode kernel (CUDA-core FMAs on exact ``e2m1*2**-6*SF`` weights, fp32 accumulation) where the
routed rows per active expert are <= 1, else the MMA kernel (NVFP4 dequantized inside a Triton
grouped GEMM); bf16 activations, fused SiLU*up, routing weights in the w2 epilogue. Checked on an
H200 (SM90, Triton 3.6: data/bench/moe_h200_2026-12-03.json "checks") and under Triton's CPU
interpreter; unverified on SM120 hardware (compiled ahead of time for sm_120/121 only:
data/triton_aot/).
"""

from __future__ import annotations

from .base import Backend, BackendInfo, Needs, Numerics

#: what sm120lab's own Triton MoE kernels need (both ``triton-*`` backends)
TRITON_NEEDS = Needs(device="cuda", packages=("triton",), min_capability=(8, 0))


class TritonW4A16(Backend):
    info = BackendInfo("triton-w4a16", "sm120lab.kernels.fused_moe_packed (prepared NVFP4 weights; Triton decode "
                       "kernel or grouped GEMM, bf16 activations; checked on H200, unverified on SM120 hardware)",
                       Numerics.W4A16, TRITON_NEEDS, verified=False)  # run on SM90 (H200) only

    def run(self, problem, out):
        from sm120lab.kernels.moe_layer import fused_moe_packed
        from sm120lab.kernels.prepack import prepare_moe_weights

        packed = prepare_moe_weights(problem.w13, problem.w2)
        fused_moe_packed(problem.hidden, problem.topk_ids, problem.topk_weights, packed, out=out)
        return {"path": "triton w4a16 on prepared weights (decode kernel or MMA kernel)"}


BACKEND = TritonW4A16()
