"""``triton-w4a16``: :func:`sm120lab.kernels.fused_moe_nvfp4` with ``mode="w4a16"``.

NVFP4 weights dequantized inside a Triton grouped GEMM (exact ``e2m1*SF`` in bf16, fp32
accumulation), bf16 activations, fused SiLU*up, routing weights in the w2 epilogue. Checked on an
H200 (SM90, Triton 3.6: data/bench/aux/*_check.json) and under Triton's CPU interpreter;
unverified on SM120 hardware (compiled ahead of time for sm_120/121 only: data/triton_aot/).
"""

from __future__ import annotations

import torch

from .base import Backend, Needs


class TritonW4A16(Backend):
    name = "triton-w4a16"
    summary = ("sm120lab.kernels.fused_moe_nvfp4 (Triton grouped GEMM, in-kernel NVFP4 dequant, bf16 activations; "
               "checked on H200, unverified on SM120 hardware)")
    needs = Needs(device="cuda", packages=("triton",), min_capability=(8, 0))
    out_dtype = torch.bfloat16
    numerics = "w4a16"
    verified = False  # run on SM90 (H200) only; unverified on SM120 hardware

    def run(self, problem, out):
        from sm120lab.kernels import fused_moe_nvfp4

        fused_moe_nvfp4(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2,
                        mode="w4a16", out=out)
        return {"path": "triton dequant (w4a16)"}


BACKEND = TritonW4A16()
