"""``reference``: :func:`sm120lab.moe.moe_reference` itself (fp64 on CPU, fp32 on a GPU).

Diffing it against itself must give exactly zero error: the harness's own sanity check.
"""

from __future__ import annotations

import torch

from .base import Backend, BackendInfo, Numerics


class ReferenceBackend(Backend):
    info = BackendInfo("reference", "dequantized weights, fp64 (CPU) / fp32 (GPU), per-expert loop", Numerics.EXACT,
                       out_dtype=torch.float64)

    def output_dtype(self, device) -> torch.dtype:
        return torch.float64 if torch.device(device).type == "cpu" else torch.float32

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference

        out.copy_(moe_reference(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2,
                                dtype=out.dtype))
        return {"dtype": str(out.dtype).replace("torch.", "")}


BACKEND = ReferenceBackend()
