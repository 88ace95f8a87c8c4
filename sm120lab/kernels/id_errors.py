"""The device-side count of expert ids outside ``[0, E)`` (issue 32: no host sync on the hot path).

The kernels that read ``topk_ids`` treat an id outside ``[0, E)`` as "no expert": the slot reads no
weights (or expert 0's under a zero factor) and adds exactly 0 to the output; a sorted path drops the
slot. They add the number of such slots to an int32 counter on the ids' device with ``tl.atomic_add``
(only where a chunk or slot has one, once per slot: in the sort's count kernel on sorted paths, in the
w13 launch on unsorted ones). Nothing is read back on the host unless a caller asks:

- ``fused_moe_packed(..., id_errors=t)`` / ``fused_moe_nvfp4(..., id_errors=t)``: ``t`` an int32 tensor
  of one element on the layer's device, to which the call's count is added;
- without ``id_errors``: the per-device counter of this module, :func:`id_error_counter` (what the custom
  op ``torch.ops.sm120lab.moe_nvfp4`` and the launchers use); :func:`id_error_count` reads it (a host sync,
  the caller's choice) and :func:`reset_id_errors` zeroes it;
- check mode, ``check_ids=True`` or ``SM120LAB_CHECK_IDS=1`` (:func:`check_ids_enabled`): the layer reads
  its call's count after the kernels and raises the one-line ValueError of
  :func:`sm120lab.kernels.moe_layer.check_expert_ids` (not while a CUDA graph is captured: there the count
  only goes to the counter).

The per-device counter is created (zeroed) at its first use. Create it before a CUDA-graph capture
(:func:`id_error_counter`, or :func:`sm120lab.kernels.moe_op.register_moe_weights`, which does): a
counter first made inside a capture is zeroed by every replay of that graph.
"""

from __future__ import annotations

import os

import torch

#: the environment variable that turns check mode on for every call (``1``; ``check_ids=`` overrides it)
CHECK_IDS_ENV = "SM120LAB_CHECK_IDS"

_COUNTERS: dict[torch.device, torch.Tensor] = {}


def _key(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def id_error_counter(device) -> torch.Tensor:
    """The per-device int32 [1] counter the kernels add out-of-range ids to when the caller gives none."""
    key = _key(device)
    c = _COUNTERS.get(key)
    if c is None:
        c = _COUNTERS[key] = torch.zeros(1, dtype=torch.int32, device=key)
    return c


def id_error_count(device) -> int:
    """The per-device counter's value: out-of-range expert ids seen since it was created or reset (a host
    sync on CUDA; 0 when the device has no counter yet)."""
    c = _COUNTERS.get(_key(device))
    return 0 if c is None else int(c.item())


def reset_id_errors(device) -> None:
    """Zero the per-device counter (one memset on the device, no sync)."""
    c = _COUNTERS.get(_key(device))
    if c is not None:
        c.zero_()


def check_ids_enabled(check_ids: bool | None = None) -> bool:
    """Check mode: ``check_ids`` when given, else ``SM120LAB_CHECK_IDS`` set to anything but ``""``/``0``."""
    if check_ids is not None:
        return bool(check_ids)
    return os.environ.get(CHECK_IDS_ENV, "").strip() not in ("", "0")


def counter_for(device, id_errors: torch.Tensor | None) -> torch.Tensor:
    """``id_errors`` checked (int32, one element, on ``device``), or the per-device counter when None."""
    if id_errors is None:
        return id_error_counter(device)
    if (not isinstance(id_errors, torch.Tensor) or id_errors.dtype != torch.int32 or id_errors.numel() != 1
            or id_errors.device != torch.device(device)):
        raise ValueError(f"id_errors must be an int32 tensor of one element on {device}, got "
                         f"{getattr(id_errors, 'dtype', type(id_errors).__name__)} "
                         f"{tuple(getattr(id_errors, 'shape', ()))} on {getattr(id_errors, 'device', None)}")
    return id_errors
