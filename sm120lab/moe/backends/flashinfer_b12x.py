"""FlashInfer 0.7 b12x MoE runners (CuTe DSL, SM120/SM121): ``flashinfer-b12x-w4a4`` and ``flashinfer-b12x-w4a16``.

Unverified on SM120 hardware: real code behind the check (SM120/SM121, CUDA >= 13, FlashInfer >= 0.7.4
with its CuTe DSL package ``cutlass``). Both runners drive FlashInfer's ``B12xMoEWrapper``, the kernel wrapper
vLLM 0.34's ``--moe-backend flashinfer_b12x`` calls directly (``FlashInferB12xExperts``, with the checkpoint's
NVFP4 weights); here it is reached through FlashInfer's ``MoELayer`` API and its own weight preparation.
Every call below is bound against the signatures recorded from the real flashinfer-python 0.7.4 wheel (``data/api/flashinfer-python-0.7.4.json``, ``tests/test_backend_api.py``). The layer call is the
SM12x runners' one (:class:`~sm120lab.moe.backends.flashinfer_sm12x.FlashInferSM12x.launch`); only the
weight preparation and the weight-pack key differ:

- W4A4, ``B12xNvfp4Config.prepare_weights(w1_bf16, w2_bf16, *, num_local_experts, hidden_size,
  intermediate_size, device)``: FlashInfer takes **bf16** weights (w1 [E, 2I, H] in [up; gate] order, w2
  [E, H, I]) and quantizes them itself with a global scale of 1 (its view's alphas and
  ``fc2_input_scale`` are ones). We hand it our NVFP4 weights dequantized to bf16, so the kernel runs a
  requantized copy: E4M3 block scales without our per-expert global scale. Registered under
  ``"b12x_nvfp4"``.
- W4A16, ``B12xW4A16Config.prepare_weights(w1_fp4, w1_blockscale, w1_global_scale, w2_fp4, w2_blockscale,
  w2_global_scale, *, source_format="modelopt")``: packed uint8 weights (w1 in [up; gate] order, the
  default ``w13`` layout, alias ``up_gate``), E4M3 block scales in **128x4-swizzled** storage, ModelOpt
  decode-side global scales ``weight_scale_2 = 1/gs`` fp32 [E]. Registered under ``"b12x_w4a16"``.

Shape limits read from the wheel: hidden_size and intermediate_size multiples of 16 (b12x NVFP4).
"""

from __future__ import annotations

import torch

from ._packing import UNVERIFIED
from .api_claim import ApiClaim
from .base import BackendInfo, Numerics
from .flashinfer_sm12x import _COMMON_CALLS, SM12X_NEEDS, FlashInferSM12x


def check_shape(cfg) -> None:
    """Raise naming the limit when the problem's H or I is outside what the b12x runners take."""
    if cfg.H % 16 or cfg.I % 16:
        raise ValueError(f"FlashInfer b12x NVFP4 runners need hidden_size and intermediate_size multiples of 16; "
                         f"this problem has H={cfg.H}, I={cfg.I} (choose another preset)")


class FlashInferB12x(FlashInferSM12x):
    """The SM12x runners' layer call with b12x weight preparation (see the module docstring)."""

    def prepare(self, problem):
        from ._packing import modelopt_scale, swizzled, up_gate_order, w31

        cfg = problem.config
        check_shape(cfg)
        if self.w4a4:
            from flashinfer.fused_moe import B12xNvfp4Config

            from sm120lab.nvfp4 import dequantize_nvfp4

            w1 = up_gate_order(dequantize_nvfp4(problem.w13).to(torch.bfloat16))
            w2 = dequantize_nvfp4(problem.w2).to(torch.bfloat16).contiguous()
            view = B12xNvfp4Config.prepare_weights(w1, w2, num_local_experts=cfg.E, hidden_size=cfg.H,
                                                   intermediate_size=cfg.I, device=problem.device)
            return B12xNvfp4Config, "b12x_nvfp4", view
        from flashinfer.fused_moe import B12xW4A16Config

        w1, w1_scale = w31(problem.w13)
        view = B12xW4A16Config.prepare_weights(
            w1, swizzled(w1_scale), modelopt_scale(problem.w13.global_scale, cfg.E),
            problem.w2.data.contiguous(), swizzled(problem.w2.linear_scale()),
            modelopt_scale(problem.w2.global_scale, cfg.E), source_format="modelopt")
        return B12xW4A16Config, "b12x_w4a16", view


def _claim(config: str, facts: tuple[str, ...]) -> ApiClaim:
    return ApiClaim(
        dist="flashinfer-python", checked=("0.7.4",), minimum="0.7.4",
        calls=(f"flashinfer.fused_moe:{config}", f"flashinfer.fused_moe:{config}.prepare_weights", *_COMMON_CALLS),
        facts=("fi.moe.w1_up_gate", "fi.b12x.cuda13_sm12x", *facts))


class FlashInferB12xW4A4(FlashInferB12x):
    info = BackendInfo("flashinfer-b12x-w4a4",
                       f"FlashInfer 0.7 b12x NVFP4 runner (CuTe DSL, W4A4, weights requantized from bf16; {UNVERIFIED})",
                       Numerics.W4A4, SM12X_NEEDS, verified=False)
    api = _claim("B12xNvfp4Config", ("fi.b12x.backend_key", "fi.b12x.bf16_weights", "fi.b12x.requantized_global_one",
                                     "fi.b12x.dims_16"))


class FlashInferB12xW4A16(FlashInferB12x):
    info = BackendInfo("flashinfer-b12x-w4a16", f"FlashInfer 0.7 b12x W4A16 runner (CuTe DSL; {UNVERIFIED})",
                       Numerics.W4A16, SM12X_NEEDS, verified=False)
    api = _claim("B12xW4A16Config", ("fi.b12x.backend_key_w4a16", "fi.b12x.w4a16_swizzled_scales",
                                     "fi.b12x.w4a16_modelopt_global", "fi.b12x.w4a16_w13_is_up_gate"))


BACKENDS = [FlashInferB12xW4A4(), FlashInferB12xW4A16()]
