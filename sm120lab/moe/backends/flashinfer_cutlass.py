"""``flashinfer-cutlass``: ``flashinfer.fused_moe.cutlass_fused_moe`` in NVFP4 (W4A4) mode.

Unverified on SM120 hardware: real code behind the capability check (SM100/SM110/SM12x, the
skipif of FlashInfer's own ``test_moe_nvfp4``); no recorded SM120 run of this adapter yet.

Argument packing, read from FlashInfer 0.6.5 (``fused_moe/core.py`` ``cutlass_fused_moe``
docstring, and ``tests/moe/test_trtllm_cutlass_fused_moe.py::test_moe_nvfp4``):

- ``input``: bf16 hidden [T, H] (the op quantizes it with ``quant_scales[0]``);
- ``token_selected_experts``: int32 [T, k]; ``token_final_scales``: fp32 [T, k];
- ``fc1_expert_weights``: packed w31 = [up; gate] uint8 [E, 2I, H/2] viewed as int64;
  ``fc2_expert_weights``: packed w2 uint8 [E, H, I/2] viewed as int64;
- ``quant_scales`` = [a1_gs (encode-side = 1/input_scale), w31 block scales 128x4-swizzled viewed
  as int32, 1/(a1_gs * w13_gs_e) [E], a2_gs, w2 block scales swizzled as int32,
  1/(a2_gs * w2_gs_e) [E]] (the GEMM alphas);
- ``output``: the harness's poisoned bf16 buffer (written in place).
"""

from __future__ import annotations

import torch

from .base import Backend, Needs


def pack_cutlass_fused_moe_nvfp4(problem) -> dict:
    """Every tensor ``cutlass_fused_moe`` takes, as keyword arguments (no FlashInfer import)."""
    from ._packing import per_expert, swizzled, w31

    e = problem.config.E
    w31_data, w31_scale = w31(problem.w13)
    a1 = problem.a1_gscale.float().reshape(()).to(problem.device)
    a2 = problem.a2_gscale.float().reshape(()).to(problem.device)
    g13 = per_expert(problem.w13.global_scale, e)
    g2 = per_expert(problem.w2.global_scale, e)
    quant_scales = [
        a1.reshape(1),
        swizzled(w31_scale).view(torch.int32),
        1.0 / (a1 * g13),
        a2.reshape(1),
        swizzled(problem.w2.linear_scale()).view(torch.int32),
        1.0 / (a2 * g2),
    ]
    return dict(
        input=problem.hidden.to(torch.bfloat16).contiguous(),
        token_selected_experts=problem.topk_ids.to(torch.int32).contiguous(),
        token_final_scales=problem.topk_weights.float().contiguous(),
        fc1_expert_weights=w31_data.view(torch.int64),
        fc2_expert_weights=problem.w2.data.contiguous().view(torch.int64),
        output_dtype=torch.bfloat16,
        quant_scales=quant_scales,
    )


class FlashInferCutlass(Backend):
    name = "flashinfer-cutlass"
    summary = "flashinfer.fused_moe.cutlass_fused_moe, NVFP4 W4A4 (unverified on SM120 hardware)"
    needs = Needs(device="cuda", capabilities=(10, 11, 12), packages=("flashinfer",), min_cuda="12.8")
    out_dtype = torch.bfloat16
    numerics = "w4a4"
    verified = False

    def run(self, problem, out):
        from flashinfer.fused_moe import cutlass_fused_moe

        kwargs = pack_cutlass_fused_moe_nvfp4(problem)
        cutlass_fused_moe(output=out, **kwargs)
        return {"flashinfer": _version()}


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return None


BACKEND = FlashInferCutlass()
