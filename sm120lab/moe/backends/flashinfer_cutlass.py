"""``flashinfer-cutlass``: ``flashinfer.fused_moe.cutlass_fused_moe`` in NVFP4 (W4A4) mode, 0.6.x and 0.7.x.

Unverified on SM120 hardware: real code behind the capability check (SM100/SM110/SM12x, CUDA >= 12.8,
FlashInfer >= 0.6); no recorded SM120 run of this adapter yet. Its call is bound against the
signatures recorded from the real 0.6.5 and 0.7.4 wheels (``data/api/flashinfer-python-*.json``,
``tests/test_backend_api.py``).

Argument packing (facts recorded with file:line in those JSON files):

- ``input``: bf16 hidden [T, H] (the op quantizes it with ``quant_scales[0]``);
- ``token_selected_experts``: int32 [T, k]; ``token_final_scales``: fp32 [T, k];
- ``fc1_expert_weights``: packed w31 = [up; gate] uint8 [E, 2I, H/2] viewed as int64 (int64 weights
  select the binding's NVFP4 path); ``fc2_expert_weights``: packed w2 uint8 [E, H, I/2] as int64;
- ``quant_scales`` = [a1_gs (encode-side, 1/input_scale; a 0-d fp32 tensor: the binding takes a
  scalar or [E], a [1] tensor fails its check for E > 1), w31 block scales 128x4-swizzled viewed as
  int32, 1/(a1_gs * w13_gs_e) [E], a2_gs (0-d), w2 block scales swizzled as int32,
  1/(a2_gs * w2_gs_e) [E]] (the GEMM alphas);
- ``output``: the harness's poisoned bf16 [T, H] buffer (written in place; shape/dtype checked by
  FlashInfer).

API differences handled here: 0.7.x adds the keyword-only ``nvfp4_4over6``; omitted, it reads the
``FLASHINFER_NVFP4_4OVER6*`` environment variables, so the adapter passes ``None`` (the standard
NVFP4 recipe the reference uses). 0.6.x has no such parameter and always uses the standard recipe.
"""

from __future__ import annotations

import torch

from ._packing import UNVERIFIED, AdapterBackend
from .api_claim import ApiClaim
from .base import BackendInfo, Needs, Numerics, _version_tuple


def pack_cutlass_fused_moe_nvfp4(problem) -> dict:
    """Every tensor ``cutlass_fused_moe`` takes, as keyword arguments (no FlashInfer import)."""
    from ._packing import activation_gscale, per_expert, swizzled, w31

    e = problem.config.E
    w31_data, w31_scale = w31(problem.w13)
    a1 = activation_gscale(problem.a1_gscale).to(problem.device)
    a2 = activation_gscale(problem.a2_gscale).to(problem.device)
    g13 = per_expert(problem.w13.global_scale, e)
    g2 = per_expert(problem.w2.global_scale, e)
    quant_scales = [
        a1,  # 0-d: the binding takes a scalar or [E], not [1] (fact fi.cutlass.act_global_scalar_or_E)
        swizzled(w31_scale).view(torch.int32),
        1.0 / (a1 * g13),
        a2,
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


def version_kwargs(version: str | None) -> dict:
    """Keyword arguments that exist only in some FlashInfer versions (see the module docstring)."""
    if _version_tuple(version) >= (0, 7):
        return {"nvfp4_4over6": None}
    return {}


class FlashInferCutlass(AdapterBackend):
    info = BackendInfo("flashinfer-cutlass",
                       f"flashinfer.fused_moe.cutlass_fused_moe, NVFP4 W4A4, FlashInfer 0.6.x/0.7.x ({UNVERIFIED})",
                       Numerics.W4A4, Needs(device="cuda", capabilities=(10, 11, 12), packages=("flashinfer",),
                                            min_cuda="12.8"), verified=False)
    api = ApiClaim(
        dist="flashinfer-python", checked=("0.6.5", "0.7.4"), minimum="0.6.0",
        calls=("flashinfer.fused_moe:cutlass_fused_moe",),
        facts=("fi.cutlass.nvfp4_is_int64_weights", "fi.cutlass.quant_scales_6", "fi.cutlass.quant_scales_order",
               "fi.cutlass.block_scales_int32", "fi.cutlass.fc1_block_shape", "fi.cutlass.fc1_global_per_expert",
               "fi.cutlass.output_checked", "fi.cutlass.act_global_encode_side", "fi.cutlass.act_global_scalar_or_E",
               "fi.cutlass.inner_dim_16", "fi.cutlass.fc1_twice_fc2", "fi.cutlass.unified_scale_rows",
               "fi.cutlass.nvfp4_4over6_kwarg"),
        optional_facts=("fi.cutlass.nvfp4_4over6_kwarg", "fi.cutlass.unified_scale_rows"),
    )

    def run(self, problem, out):
        from flashinfer.fused_moe import cutlass_fused_moe

        kwargs = pack_cutlass_fused_moe_nvfp4(problem)
        cutlass_fused_moe(output=out, **kwargs, **version_kwargs(self.installed()))
        return self.api_notes()


BACKEND = FlashInferCutlass()
