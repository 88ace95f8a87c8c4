"""``torch.ops.sm120lab.moe_nvfp4``: the NVFP4 MoE layer as a ``torch.library`` custom op.

Contract (what a serving engine passes per forward):

    out = torch.ops.sm120lab.moe_nvfp4(hidden, topk_ids, topk_weights, weights)

- ``hidden``: bf16 [T, H], the layer's input activations;
- ``topk_ids``: integer [T, k] (int64, int32, int16, int8 or uint8; not bool), the router's top-k
  expert ids in [0, E) (already selected: routing, grouping and renormalization are the caller's).
  An id outside [0, E) (:func:`sm120lab.kernels.moe_layer.check_expert_ids`, issue 32): CPU ids are
  refused on the host with a one-line ValueError before any kernel runs; CUDA ids are not read on
  the host (no sync, CUDA-graph capture works): the kernels treat the slot as "no expert" (it adds
  exactly 0 to its token's output) and add the number of such slots to this module's per-device
  int32 counter (the op takes no counter argument: it keeps the engine-facing signature), which
  :func:`id_error_count` reads (a host sync, the caller's choice) and :func:`reset_id_errors` zeroes.
  ``SM120LAB_CHECK_IDS=1`` turns on check mode: each eager call reads its count after the kernels and
  raises the same ValueError (not during capture). Dtype, shape and device checks read no data and
  always run;
- ``topk_weights``: float [T, k], the router weights, applied after w2 (``apply_router_weight_on_input``
  False in vLLM's terms);
- ``weights``: the name under which :func:`register_moe_weights` stored the layer's prepared NVFP4
  weights (:func:`sm120lab.kernels.prepack.prepare_moe_weights`). A string, not tensors: the op is
  traced as one opaque call with a constant layer name, the way vLLM's ``moe_forward`` op takes a
  layer name;
- returns a new bf16 [T, H] tensor ``sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)``
  (SiLU-gated, w13 rows [0:I] gate and [I:2I] up); it writes no input.

The fake (meta) implementation returns ``empty_like(hidden)``, so ``torch.compile(fullgraph=True)``
traces through it. The kernels run their :class:`~sm120lab.kernels.plan.MoEPlan` (built from the
shape, T and device on the host, no GPU sync), so the op can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from .id_errors import id_error_count, id_error_counter, reset_id_errors  # noqa: F401  (the op's counter)
from .prepack import PackedMoEWeights

_WEIGHTS: dict[str, PackedMoEWeights] = {}


def register_moe_weights(name: str, packed: PackedMoEWeights) -> str:
    """Store ``packed`` under ``name`` for :func:`moe_nvfp4` (replaces an earlier one); returns ``name``.

    Also creates the out-of-range id counter of the weights' device (:func:`id_error_counter`), so that a
    later CUDA-graph capture finds it made (one made inside a capture would be zeroed by every replay)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(packed, PackedMoEWeights):
        raise TypeError(f"packed must be a PackedMoEWeights (prepare_moe_weights), got {type(packed).__name__}")
    _WEIGHTS[name] = packed
    id_error_counter(packed.w13.words.device)
    return name


def unregister_moe_weights(name: str) -> None:
    """Forget the weights stored under ``name`` (no error when absent)."""
    _WEIGHTS.pop(name, None)


def _weights(name: str) -> PackedMoEWeights:
    if name not in _WEIGHTS:
        raise ValueError(f"weights: no MoE weights registered as {name!r} (register_moe_weights); "
                         f"registered: {sorted(_WEIGHTS) or 'none'}")
    return _WEIGHTS[name]


@torch.library.custom_op("sm120lab::moe_nvfp4", mutates_args=())
def moe_nvfp4(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, weights: str) -> torch.Tensor:
    """The MoE layer on the registered weights ``weights`` -> new bf16 [T, H] (module docstring)."""
    packed = _weights(weights)
    from .moe_layer import fused_moe_packed

    return fused_moe_packed(hidden, topk_ids, topk_weights, packed)


@moe_nvfp4.register_fake
def _moe_nvfp4_fake(hidden, topk_ids, topk_weights, weights):
    torch._check(hidden.dim() == 2, lambda: f"hidden must be [T, H], got {hidden.dim()} dims")
    torch._check(topk_ids.shape == topk_weights.shape, lambda: "topk_ids and topk_weights must have one shape")
    torch._check(not topk_ids.dtype.is_floating_point and topk_ids.dtype not in (torch.bool, torch.complex64,
                                                                                  torch.complex128),
                 lambda: f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    return torch.empty_like(hidden, dtype=torch.bfloat16)
