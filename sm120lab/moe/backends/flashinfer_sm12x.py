"""FlashInfer 0.7 SM12x MoE runners (CuTe-DSL): ``flashinfer-sm12x-w4a4`` and ``flashinfer-sm12x-w4a16``.

Unverified on SM120 hardware: real code behind the check (SM120/SM121, CUDA >= 13, FlashInfer
>= 0.7 with its CuTe DSL package), written against the flashinfer-python 0.7.4 wheel:

- ``SM12xNvfp4Config.prepare_weights(w1_fp4, w1_block_scale, w1_global_scale, w2_fp4, w2_block_scale,
  w2_global_scale, num_local_experts=, hidden_size=, intermediate_size=, source_format="modelopt")``
  (``fused_moe/api.py``; it calls ``prepare.py::prepare_cutile_nvfp4_weights``, which expects w1 in
  [up; gate] order, LINEAR E4M3 block scales [E, 2I, H/16], and ModelOpt decode-side global scales
  ``weight_scale_2 = 1/gs`` of shape [E]);
- the W4A4 runner quantizes bf16 hidden states itself with the view keys ``w1_input_global_scale``
  / ``w2_input_global_scale`` (the quantization multipliers 1/input_scale, i.e. our a1/a2 gscale);
- ``MoELayer(MoEConfig(routing=RoutingConfig(E, k), quant=QuantConfig(weight=NVFP4, activation=...),
  experts=ExpertConfig(intermediate_size=I, local_num_experts=E), activation=SwiGLU(),
  backend=BackendOptions(candidates=(cfg,))), device)(MoEActivationPack(x, None, ids_int32, w), pack)``.
"""

from __future__ import annotations

from importlib import metadata

import torch

from .base import Backend, Needs, _version_tuple


class FlashInferSM12x(Backend):
    needs = Needs(device="cuda", capabilities=(12,), packages=("flashinfer", "cutlass"), min_cuda="13.0")
    out_dtype = torch.bfloat16
    verified = False
    w4a4 = True

    def skip_reason(self, device):
        reason = super().skip_reason(device)
        if reason:
            return reason
        try:
            version = metadata.version("flashinfer-python")
        except metadata.PackageNotFoundError:
            return "flashinfer-python is not installed"
        if _version_tuple(version) < (0, 7):
            return f"needs FlashInfer >= 0.7 (SM12x runners); installed {version}"
        return None

    def run(self, problem, out):
        from flashinfer.fused_moe import (BackendOptions, ExpertConfig, MoEActivationPack, MoEConfig, MoELayer,
                                          MoEWeightPack, QuantConfig, QuantFormat, RoutingConfig,
                                          SM12xNvfp4Bf16Config, SM12xNvfp4Config, SwiGLU)

        from ._packing import per_expert, w31

        cfg = problem.config
        w1, w1_scale = w31(problem.w13)
        cls = SM12xNvfp4Config if self.w4a4 else SM12xNvfp4Bf16Config
        view = cls.prepare_weights(
            w1, w1_scale, 1.0 / per_expert(problem.w13.global_scale, cfg.E),
            problem.w2.data.contiguous(), problem.w2.linear_scale().contiguous(),
            1.0 / per_expert(problem.w2.global_scale, cfg.E),
            num_local_experts=cfg.E, hidden_size=cfg.H, intermediate_size=cfg.I, source_format="modelopt",
            device=problem.device)
        if self.w4a4:
            view["w1_input_global_scale"] = problem.a1_gscale.float().reshape(()).to(problem.device)
            view["w2_input_global_scale"] = problem.a2_gscale.float().reshape(()).to(problem.device)
        pack = MoEWeightPack()
        pack.prepare_for("sm12x_nvfp4" if self.w4a4 else "sm12x_nvfp4_bf16", view)
        act = MoEActivationPack(problem.hidden.to(torch.bfloat16).contiguous(), None,
                                problem.topk_ids.to(torch.int32).contiguous(), problem.topk_weights.float())
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
        return {"flashinfer": metadata.version("flashinfer-python"), "runner": cls.__name__}


class FlashInferSM12xW4A4(FlashInferSM12x):
    name = "flashinfer-sm12x-w4a4"
    summary = "FlashInfer 0.7 SM12xNvfp4 runner (CuTe DSL, W4A4; unverified on SM120 hardware)"
    numerics = "w4a4"
    w4a4 = True


class FlashInferSM12xW4A16(FlashInferSM12x):
    name = "flashinfer-sm12x-w4a16"
    summary = "FlashInfer 0.7 SM12xNvfp4Bf16 runner (CuTe DSL, W4A16; unverified on SM120 hardware)"
    numerics = "w4a16"
    w4a4 = False


BACKENDS = [FlashInferSM12xW4A4(), FlashInferSM12xW4A16()]
