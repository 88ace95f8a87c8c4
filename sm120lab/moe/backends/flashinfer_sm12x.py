"""FlashInfer 0.7 SM12x MoE runners (CuTe DSL): ``flashinfer-sm12x-w4a4`` and ``flashinfer-sm12x-w4a16``.

Unverified on SM120 hardware: real code behind the check (SM120/SM121, CUDA >= 13, FlashInfer
>= 0.7.4 with its CuTe DSL package ``cutlass``). Every call below is bound against the signatures
recorded from the real flashinfer-python 0.7.4 wheel (``data/api/flashinfer-python-0.7.4.json``,
``tests/test_backend_api.py``); 0.6.x has none of these names.

- ``SM12xNvfp4Config.prepare_weights(w1_fp4, w1_block_scale, w1_global_scale, w2_fp4, w2_block_scale,
  w2_global_scale, *, num_local_experts, hidden_size, intermediate_size, source_format="modelopt",
  device)`` (a staticmethod; it calls ``prepare.py::prepare_cutile_nvfp4_weights``): w1 in
  [up; gate] order, packed uint8, LINEAR float8_e4m3fn block scales [E, 2I, H/16], ModelOpt
  decode-side global scales ``weight_scale_2 = 1/gs`` fp32 [E];
- the W4A4 runner quantizes bf16 hidden states itself with the view keys ``w1_input_global_scale``
  / ``w2_input_global_scale`` (one-element fp32 on the device: our a1/a2 gscale, 1/input_scale);
- ``MoEWeightPack().prepare_for("sm12x_nvfp4" | "sm12x_nvfp4_bf16", view)``;
- ``MoELayer(MoEConfig(routing=RoutingConfig(num_experts=E, top_k=k), quant=QuantConfig(weight=NVFP4,
  activation=NVFP4 | BF16), experts=ExpertConfig(intermediate_size=I, local_num_experts=E),
  activation=SwiGLU(), backend=BackendOptions(candidates=(cfg,))), device=...)(act_pack, weight_pack)``
  with ``MoEActivationPack(hidden bf16 [T, H], None, topk_ids int32, topk_weights fp32)`` (contiguous).

Shape limits read from the runners: hidden_size % 128 == 0 and intermediate_size % 64 == 0.
"""

from __future__ import annotations

import torch

from ._packing import UNVERIFIED, AdapterBackend
from .api_claim import ApiClaim
from .base import BackendInfo, Needs, Numerics

_COMMON_CALLS = tuple(f"flashinfer.fused_moe:{n}" for n in (
    "MoEWeightPack", "MoEWeightPack.prepare_for", "MoEActivationPack", "MoEConfig", "RoutingConfig", "QuantConfig",
    "QuantFormat", "ExpertConfig", "SwiGLU", "BackendOptions", "MoELayer", "MoELayer.__call__"))


def check_shape(cfg) -> None:
    """Raise naming the limit when the problem's H or I is outside what the SM12x runners take."""
    if cfg.H % 128 or cfg.I % 64:
        raise ValueError(f"FlashInfer SM12x NVFP4 runners need hidden_size % 128 == 0 and intermediate_size % 64 "
                         f"== 0; this problem has H={cfg.H}, I={cfg.I} (choose another preset)")


#: what FlashInfer's SM12x and b12x runners need: SM120/SM121, CUDA >= 13, FlashInfer with its CuTe DSL
SM12X_NEEDS = Needs(device="cuda", capabilities=(12,), packages=("flashinfer", "cutlass"), min_cuda="13.0")


class FlashInferSM12x(AdapterBackend):
    """One ``MoELayer`` runner; W4A4 (NVFP4 activations) or W4A16 (bf16) as its ``numerics`` says."""

    @property
    def w4a4(self) -> bool:
        return self.numerics is Numerics.W4A4

    def run(self, problem, out):
        cls, key, view = self.prepare(problem)
        return self.launch(problem, out, cls, key, view)

    def prepare(self, problem):
        """``(config class, weight-pack backend key, weight view)`` for this runner."""
        from flashinfer.fused_moe import SM12xNvfp4Bf16Config, SM12xNvfp4Config

        from ._packing import activation_gscale, modelopt_scale, w31

        cfg = problem.config
        check_shape(cfg)
        dev = problem.device
        w1, w1_scale = w31(problem.w13)
        cls = SM12xNvfp4Config if self.w4a4 else SM12xNvfp4Bf16Config
        view = cls.prepare_weights(
            w1, w1_scale, modelopt_scale(problem.w13.global_scale, cfg.E),
            problem.w2.data.contiguous(), problem.w2.linear_scale().contiguous(),
            modelopt_scale(problem.w2.global_scale, cfg.E),
            num_local_experts=cfg.E, hidden_size=cfg.H, intermediate_size=cfg.I, source_format="modelopt",
            device=dev)
        if self.w4a4:
            view["w1_input_global_scale"] = activation_gscale(problem.a1_gscale).reshape(1).to(dev)
            view["w2_input_global_scale"] = activation_gscale(problem.a2_gscale).reshape(1).to(dev)
        return cls, "sm12x_nvfp4" if self.w4a4 else "sm12x_nvfp4_bf16", view

    def launch(self, problem, out, cls, key, view):
        """Register ``view`` under ``key`` and run one ``MoELayer`` whose only candidate is ``cls()``."""
        from flashinfer.fused_moe import (
            BackendOptions,
            ExpertConfig,
            MoEActivationPack,
            MoEConfig,
            MoELayer,
            MoEWeightPack,
            QuantConfig,
            QuantFormat,
            RoutingConfig,
            SwiGLU,
        )

        cfg = problem.config
        pack = MoEWeightPack()
        pack.prepare_for(key, view)
        act = MoEActivationPack(problem.hidden.to(torch.bfloat16).contiguous(), None,
                                problem.topk_ids.to(torch.int32).contiguous(),
                                problem.topk_weights.float().contiguous())
        config = MoEConfig(
            routing=RoutingConfig(num_experts=cfg.E, top_k=cfg.k),
            quant=QuantConfig(weight=QuantFormat.NVFP4,
                              activation=QuantFormat.NVFP4 if self.w4a4 else QuantFormat.BF16),
            experts=ExpertConfig(intermediate_size=cfg.I, local_num_experts=cfg.E),
            activation=SwiGLU(),
            backend=BackendOptions(candidates=(cls(),)),
        )
        result = MoELayer(config, device=problem.device)(act, pack)
        out.copy_(result[0] if isinstance(result, (list, tuple)) else result)
        return {**self.api_notes(), "runner": cls.__name__}


def _claim(config: str) -> ApiClaim:
    return ApiClaim(
        dist="flashinfer-python", checked=("0.7.4",), minimum="0.7.4",
        calls=(f"flashinfer.fused_moe:{config}", f"flashinfer.fused_moe:{config}.prepare_weights", *_COMMON_CALLS),
        facts=("fi.moe.w1_up_gate", "fi.cutile.swaps_to_gate_up", "fi.cutile.dtypes", "fi.cutile.w2_global_shape",
               "fi.cutile.modelopt_decode_side", "fi.sm12x.input_global_scale", "fi.sm12x.hidden_128",
               "fi.sm12x.inter_64", "fi.sm12x.backend_key", "fi.sm12x.backend_key_bf16", "fi.sm12x.cuda13"))


class FlashInferSM12xW4A4(FlashInferSM12x):
    info = BackendInfo("flashinfer-sm12x-w4a4", f"FlashInfer 0.7 SM12xNvfp4 runner (CuTe DSL, W4A4; {UNVERIFIED})",
                       Numerics.W4A4, SM12X_NEEDS, verified=False)
    api = _claim("SM12xNvfp4Config")


class FlashInferSM12xW4A16(FlashInferSM12x):
    info = BackendInfo("flashinfer-sm12x-w4a16",
                       f"FlashInfer 0.7 SM12xNvfp4Bf16 runner (CuTe DSL, W4A16; {UNVERIFIED})",
                       Numerics.W4A16, SM12X_NEEDS, verified=False)
    api = _claim("SM12xNvfp4Bf16Config")


BACKENDS = [FlashInferSM12xW4A4(), FlashInferSM12xW4A16()]
