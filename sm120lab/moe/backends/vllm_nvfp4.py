"""vLLM NVFP4 MoE paths: ``vllm-cutlass-fp4`` (CUTLASS grouped W4A4) and ``vllm-marlin`` (W4A16).

Unverified on SM120 hardware: real code behind the check (vLLM >= 0.17 importable, a CUDA GPU;
CUTLASS FP4 needs SM100/SM12x). Every call is bound against the signatures recorded from the vLLM
0.17.0, 0.26.0 and 0.34.0 wheels (``data/api/vllm-*.json``, ``tests/test_backend_api.py``). The functions
kept their names and the arguments used here, but moved: 0.34.0 has them in ``fused_moe/experts/``
(``cutlass_moe.py``, ``marlin_moe.py``), 0.17.0 in ``fused_moe/`` (``cutlass_moe.py``,
``fused_marlin_moe.py``); the adapter imports the newer path first.

- ``run_cutlass_moe_fp4(output, a, a1_gscale, w1_fp4, w1_blockscale,
  w1_alphas, a2_gscale, w2_fp4, w2_blockscale, w2_alphas, topk_weights, topk_ids, activation,
  workspace13, workspace2, m, n, k, e, device)``: uint8 packed weights, 128x4-swizzled E4M3 block
  scales, per-expert fp32 [E] ``a*_gscale`` (encode-side, 1/input_scale) and alphas
  1/(a_gs * w_gs); workspaces (m*topk, max(2n, k)) and (m*topk, n) in the activation dtype;
  ``activation=MoEActivation.SILU``;
- ``marlin_utils_fp4.py::prepare_nvfp4_moe_layer_for_marlin(layer, w13, w13_scale, w13_scale_2, w2,
  w2_scale, w2_scale_2, is_act_and_mul)`` (reads ``layer.num_experts``, ``hidden_size``,
  ``intermediate_size_per_partition``, ``params_dtype``; LINEAR block scales; ModelOpt
  ``weight_scale_2`` = 1/gs) then ``fused_marlin_moe(...,
  quant_type_id=scalar_types.float4_e2m1f.id, global_scale1=, global_scale2=)``.

Conventions (vLLM ModelOpt NVFP4 MoE): w13 = [w1 (gate); w3 (up)] as ours (only vLLM's FlashInfer
backends reorder it).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ._packing import UNVERIFIED, AdapterBackend
from .api_claim import ApiClaim
from .base import BackendInfo, Needs, Numerics

_VM = "vllm.model_executor.layers"
_CUTLASS_MODULES = (f"{_VM}.fused_moe.experts.cutlass_moe", f"{_VM}.fused_moe.cutlass_moe")
_MARLIN_MODULES = (f"{_VM}.fused_moe.experts.marlin_moe", f"{_VM}.fused_moe.fused_marlin_moe")


def first_importable(modules: tuple[str, ...], name: str):
    """``name`` from the first of ``modules`` that imports and has it (vLLM moved its MoE kernels)."""
    import importlib

    errors = []
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}: {type(exc).__name__}: {exc}")
    raise ImportError(f"{name} not found in this vLLM; tried " + "; ".join(errors))


def _claim(calls: tuple, facts: tuple[str, ...]) -> ApiClaim:
    """A vLLM adapter's claim: ``calls`` and ``facts`` checked against the 0.17.0, 0.26.0 and 0.34.0 wheels
    (0.26.0: the release whose compiled Marlin ran on the H200, data/correctness/marlin_h200_2026-12-04)."""
    return ApiClaim(dist="vllm", checked=("0.17.0", "0.26.0", "0.34.0"), minimum="0.17.0", calls=calls, facts=facts)


class VllmCutlassFp4(AdapterBackend):
    info = BackendInfo("vllm-cutlass-fp4", f"vLLM run_cutlass_moe_fp4 (CUTLASS grouped NVFP4 W4A4; {UNVERIFIED})",
                       Numerics.W4A4, Needs(device="cuda", capabilities=(10, 12), packages=("vllm",)), verified=False)
    api = _claim((tuple(f"{m}:run_cutlass_moe_fp4" for m in _CUTLASS_MODULES), f"{_VM}.fused_moe.activation:MoEActivation"),
                 ("vllm.cutlass.uint8_weights", "vllm.cutlass.a_gscale_per_expert", "vllm.cutlass.input_dtype",
                  "vllm.cutlass.workspace_shapes", "vllm.cutlass.scales_swizzled", "vllm.cutlass.w13_gate_up",
                  "vllm.cutlass.alphas"))

    def run(self, problem, out):
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation

        from ._packing import activation_gscale, per_expert, swizzled

        run_cutlass_moe_fp4 = first_importable(_CUTLASS_MODULES, "run_cutlass_moe_fp4")

        cfg = problem.config
        m, n, k, e, topk = problem.tokens, cfg.I, cfg.H, cfg.E, cfg.k
        dev = problem.device
        a1 = activation_gscale(problem.a1_gscale, e).to(dev)
        a2 = activation_gscale(problem.a2_gscale, e).to(dev)
        hidden = problem.hidden.to(torch.bfloat16).contiguous()
        run_cutlass_moe_fp4(
            output=out, a=hidden, a1_gscale=a1, w1_fp4=problem.w13.data.contiguous(),
            w1_blockscale=swizzled(problem.w13.linear_scale()),
            w1_alphas=1.0 / (a1 * per_expert(problem.w13.global_scale, e)),
            a2_gscale=a2, w2_fp4=problem.w2.data.contiguous(), w2_blockscale=swizzled(problem.w2.linear_scale()),
            w2_alphas=1.0 / (a2 * per_expert(problem.w2.global_scale, e)),
            topk_weights=problem.topk_weights.float().contiguous(),
            topk_ids=problem.topk_ids.to(torch.int32).contiguous(), activation=MoEActivation.SILU,
            workspace13=torch.empty((m * topk, max(2 * n, k)), dtype=hidden.dtype, device=dev),
            workspace2=torch.empty((m * topk, n), dtype=hidden.dtype, device=dev),
            m=m, n=n, k=k, e=e, device=dev)
        return self.api_notes()


def marlin_layer(problem) -> SimpleNamespace:
    """The attributes ``prepare_nvfp4_moe_layer_for_marlin`` reads from its ``layer`` argument."""
    cfg = problem.config
    return SimpleNamespace(num_experts=cfg.E, hidden_size=cfg.H, intermediate_size_per_partition=cfg.I,
                           params_dtype=torch.bfloat16)


class VllmMarlin(AdapterBackend):
    """vLLM's Marlin NVFP4 MoE (W4A16), the kernel SM120 owners serve with (``--moe-backend marlin``).

    Runs from the installed vLLM, or, where ``import vllm`` fails, from a vLLM wheel cache
    (:mod:`sm120lab.moe.vllm_wheel`: the wheel's own Python and compiled ops, unchanged).
    vLLM's defaults throughout: ``fused_marlin_moe`` picks its block size, zeroes a new workspace
    per call and reduces in fp32.
    """

    info = BackendInfo("vllm-marlin", f"vLLM fused_marlin_moe, NVFP4 weights x bf16 activations ({UNVERIFIED})",
                       Numerics.W4A16, Needs(device="cuda", min_capability=(8, 0)), verified=False)
    api = _claim((f"{_VM}.quantization.utils.marlin_utils_fp4:prepare_nvfp4_moe_layer_for_marlin",
                  tuple(f"{m}:fused_marlin_moe" for m in _MARLIN_MODULES), f"{_VM}.fused_moe.activation:MoEActivation",
                  "vllm.scalar_type:scalar_types", "vllm.scalar_type:ScalarType.id"),
                 ("vllm.marlin.layer_attrs", "vllm.marlin.global_scale_is_weight_scale_2",
                  "vllm.marlin.experts_global_scale1", "vllm.marlin.topk_weights_fp32"))

    def skip_reason(self, device) -> str | None:
        from sm120lab.moe.vllm_wheel import available

        reason = self.needs.skip_reason(device) or available()
        return None if reason is None else f"{reason} (adapter {UNVERIFIED})"

    def runtime(self):
        from sm120lab.moe.vllm_wheel import marlin_runtime

        return marlin_runtime()

    def prepare(self, problem) -> dict:
        """vLLM's own repack of ``problem``'s weights for Marlin: the arguments ``fused_marlin_moe`` takes."""
        return self.prepare_weights(problem.w13, problem.w2)

    def prepare_weights(self, w13, w2) -> dict:
        """:meth:`prepare` on two :class:`~sm120lab.nvfp4.NVFP4Tensor` s (w13 [E, 2I, H], w2 [E, H, I])."""
        from ._packing import modelopt_scale

        rt = self.runtime()
        e, two_i, h = w13.shape
        layer = SimpleNamespace(num_experts=e, hidden_size=h, intermediate_size_per_partition=two_i // 2,
                                params_dtype=torch.bfloat16)
        pw13, s13, g13, pw2, s2, g2 = rt.prepare_nvfp4_moe_layer_for_marlin(
            layer, w13=w13.data.contiguous(), w13_scale=w13.linear_scale().contiguous(),
            w13_scale_2=modelopt_scale(w13.global_scale, e), w2=w2.data.contiguous(),
            w2_scale=w2.linear_scale().contiguous(), w2_scale_2=modelopt_scale(w2.global_scale, e),
            is_act_and_mul=True)
        return dict(w1=pw13, w2=pw2, bias1=None, bias2=None, w1_scale=s13, w2_scale=s2,
                    quant_type_id=rt.float4_e2m1f_id, global_num_experts=e, activation=rt.silu,
                    global_scale1=g13, global_scale2=g2)

    def call(self, prepared: dict, hidden, topk_weights, topk_ids, output=None):
        """One ``fused_marlin_moe`` call on prepared weights with vLLM's defaults (the bench times this)."""
        return self.runtime().fused_marlin_moe(hidden_states=hidden, topk_weights=topk_weights, topk_ids=topk_ids,
                                               output=output, **prepared)

    def run(self, problem, out):
        # The harness calls run once per top-k slot on the same weights: repack once. The source
        # tensors are held (compared by identity, never by id()), so a new problem always repacks.
        src = (problem.w13.data, problem.w13.scale, problem.w13.global_scale, problem.w2.data,
               problem.w2.scale, problem.w2.global_scale)
        held = getattr(self, "_prepared_src", None)
        if held is None or any(a is not b for a, b in zip(held, src)):
            self._prepared, self._prepared_src = self.prepare(problem), src
        y = self.call(self._prepared, problem.hidden.to(torch.bfloat16).contiguous(),
                      problem.topk_weights.float().contiguous(), problem.topk_ids.to(torch.int32).contiguous(),
                      output=out)
        if y is not out:  # vLLM writes into ``output`` and returns it; a version that allocates its own
            out.copy_(y)
        return {**self.runtime().notes(), **self.api_notes()}

    def installed(self) -> str | None:
        from sm120lab.moe.vllm_wheel import _RUNTIME

        return _RUNTIME.version if _RUNTIME is not None else super().installed()


BACKENDS = [VllmCutlassFp4(), VllmMarlin()]
