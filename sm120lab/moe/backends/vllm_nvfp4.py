"""vLLM NVFP4 MoE paths: ``vllm-cutlass-fp4`` (CUTLASS grouped W4A4) and ``vllm-marlin`` (W4A16).

Unverified on SM120 hardware: real code behind the check (vLLM importable, a CUDA GPU; CUTLASS FP4
needs SM100/SM12x), written against vLLM's ``fused_moe/cutlass_moe.py`` (``cutlass_moe_fp4(a,
w1_fp4, w2_fp4, topk_weights, topk_ids, quant_config, m, n, k, e)`` with ``config.py::
nvfp4_moe_quant_config(g1_alphas, g2_alphas, a1_gscale, a2_gscale, w1_scale, w2_scale)``) and
``quantization/utils/marlin_utils_fp4.py::prepare_moe_fp4_layer_for_marlin(layer)`` +
``fused_moe/fused_marlin_moe.py::fused_marlin_moe``. vLLM's signatures move between releases, so
arguments are bound by name against the installed signature and a mismatch raises, naming it.

Conventions (vLLM ModelOpt NVFP4 MoE): w13 = [w1 (gate); w3 (up)] as ours; block scales 128x4-
swizzled for CUTLASS, linear for the Marlin repack; ``a*_gscale`` are encode-side (1/input_scale)
per expert [E]; ``g*_alphas`` = 1/(a_gs * w_gs) [E]; Marlin takes ``w*_weight_scale_2`` = 1/w_gs.
"""

from __future__ import annotations

import inspect

import torch

from .base import Backend, Needs


def _call(fn, **kwargs):
    """Call ``fn`` with the keyword arguments its signature has; raise naming any missing required one."""
    sig = inspect.signature(fn)
    params = sig.parameters
    bound = {k: v for k, v in kwargs.items() if k in params}
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in bound
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise TypeError(f"{fn.__module__}.{fn.__name__}{sig}: this adapter does not know argument(s) {missing}")
    return fn(**bound)


class VllmCutlassFp4(Backend):
    name = "vllm-cutlass-fp4"
    summary = "vLLM cutlass_moe_fp4 (CUTLASS grouped NVFP4 W4A4; unverified on SM120 hardware)"
    needs = Needs(device="cuda", capabilities=(10, 12), packages=("vllm",))
    out_dtype = torch.bfloat16
    numerics = "w4a4"
    verified = False

    def run(self, problem, out):
        from vllm.model_executor.layers.fused_moe.config import nvfp4_moe_quant_config
        from vllm.model_executor.layers.fused_moe.cutlass_moe import cutlass_moe_fp4

        from ._packing import per_expert, swizzled

        cfg = problem.config
        a1 = problem.a1_gscale.float().reshape(1).expand(cfg.E).contiguous()
        a2 = problem.a2_gscale.float().reshape(1).expand(cfg.E).contiguous()
        g13 = per_expert(problem.w13.global_scale, cfg.E)
        g2 = per_expert(problem.w2.global_scale, cfg.E)
        qc = _call(nvfp4_moe_quant_config, g1_alphas=1.0 / (a1 * g13), g2_alphas=1.0 / (a2 * g2),
                   a1_gscale=a1, a2_gscale=a2, w1_scale=swizzled(problem.w13.linear_scale()),
                   w2_scale=swizzled(problem.w2.linear_scale()))
        y = _call(cutlass_moe_fp4, a=problem.hidden.to(torch.bfloat16).contiguous(),
                  w1_fp4=problem.w13.data.contiguous(), w2_fp4=problem.w2.data.contiguous(),
                  topk_weights=problem.topk_weights.float(), topk_ids=problem.topk_ids.to(torch.int32),
                  quant_config=qc, m=problem.tokens, n=cfg.I, k=cfg.H, e=cfg.E)
        out.copy_(y)
        return {}


class _MarlinLayer(torch.nn.Module):
    """The attributes prepare_moe_fp4_layer_for_marlin reads (old and new vLLM spellings)."""

    def __init__(self, problem):
        super().__init__()
        from types import SimpleNamespace

        from ._packing import per_expert

        cfg = problem.config
        p = lambda t: torch.nn.Parameter(t, requires_grad=False)  # noqa: E731
        self.num_experts, self.hidden_size, self.intermediate_size_per_partition = cfg.E, cfg.H, cfg.I
        self.moe_config = SimpleNamespace(num_experts=cfg.E, hidden_dim=cfg.H, intermediate_size_per_partition=cfg.I,
                                          is_act_and_mul=True)
        self.params_dtype = torch.bfloat16
        self.w13_weight = p(problem.w13.data.contiguous())
        self.w2_weight = p(problem.w2.data.contiguous())
        self.w13_weight_scale = p(problem.w13.linear_scale().contiguous())
        self.w2_weight_scale = p(problem.w2.linear_scale().contiguous())
        self.w13_weight_scale_2 = p(1.0 / per_expert(problem.w13.global_scale, cfg.E))
        self.w2_weight_scale_2 = p(1.0 / per_expert(problem.w2.global_scale, cfg.E))


class VllmMarlin(Backend):
    name = "vllm-marlin"
    summary = "vLLM fused_marlin_moe, NVFP4 weights x bf16 activations (unverified on SM120 hardware)"
    needs = Needs(device="cuda", min_capability=(8, 0), packages=("vllm",))
    out_dtype = torch.bfloat16
    numerics = "w4a16"
    verified = False

    def run(self, problem, out):
        from vllm.model_executor.layers.fused_moe.fused_marlin_moe import fused_marlin_moe
        from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import prepare_moe_fp4_layer_for_marlin
        from vllm.scalar_type import scalar_types

        layer = _MarlinLayer(problem)
        prepare_moe_fp4_layer_for_marlin(layer)
        y = _call(fused_marlin_moe, hidden_states=problem.hidden.to(torch.bfloat16).contiguous(),
                  w1=layer.w13_weight, w2=layer.w2_weight, bias1=None, bias2=None,
                  w1_scale=layer.w13_weight_scale, w2_scale=layer.w2_weight_scale, gating_output=None,
                  topk_weights=problem.topk_weights.float(), topk_ids=problem.topk_ids.to(torch.int32),
                  quant_type_id=scalar_types.float4_e2m1f.id, global_scale1=layer.w13_weight_scale_2,
                  global_scale2=layer.w2_weight_scale_2, workspace=layer.workspace,
                  global_num_experts=problem.config.E)
        out.copy_(y)
        return {}


BACKENDS = [VllmCutlassFp4(), VllmMarlin()]
