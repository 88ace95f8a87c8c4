"""The MoE backend registry: every implementation the correctness lab diffs against the reference.

Adding a backend is adding ONE file in this folder. The module must import cheaply (import
torch only; import FlashInfer/vLLM/Triton kernels inside ``run``) and define either
``BACKEND = <Backend instance>`` or ``BACKENDS = [<Backend>, ...]``. Each backend class declares
its metadata once, as one :class:`~sm120lab.moe.backends.base.BackendInfo` record; ``backend.name``,
``.summary``, ``.numerics``, ``.needs``, ``.out_dtype`` and ``.verified`` read its fields. Example::

    # sm120lab/moe/backends/triton_w4a16.py
    from sm120lab.moe.backends.base import Backend, BackendInfo, Needs, Numerics

    class TritonW4A16(Backend):
        info = BackendInfo(
            name="triton-w4a16",                            # the registry key
            summary="sm120lab.kernels.fused_moe_nvfp4, mode='w4a16'",
            numerics=Numerics.W4A16,                        # EXACT | W4A16 | W4A4: which envelope applies
            needs=Needs(device="cuda", packages=("triton",)),  # default: runs anywhere
            out_dtype=torch.bfloat16,                       # the buffer the harness hands to run() (default)
            verified=True)                                  # False: real code not yet run on SM120 hardware

        def run(self, problem, out):        # problem: sm120lab.moe.MoEProblem; out: [T, H] poisoned
            from sm120lab.kernels import fused_moe_nvfp4
            out.copy_(fused_moe_nvfp4(problem.hidden, problem.topk_ids, problem.topk_weights,
                                      problem.w13, problem.w2, mode="w4a16"))

    BACKEND = TritonW4A16()

Contract of ``Backend.run(problem, out)``:
- ``problem`` is an :class:`sm120lab.moe.MoEProblem` on the device the harness chose; use its
  ``hidden`` (bf16 [T,H]), ``topk_ids`` (int64 [T,k]), ``topk_weights`` (fp32 [T,k]), ``w13``/``w2``
  (linear scales) or ``w13_swizzled``/``w2_swizzled``, ``a1_gscale``/``a2_gscale`` (W4A4).
- ``out`` is a [T, H] tensor of ``out_dtype`` filled with a sentinel (``-2**127``); write every
  element. Elements still equal to the sentinel afterwards are reported as "untouched".
- ``run`` may return a dict of notes (e.g. ``{"path": "torch._grouped_mm"}``) that the report keeps.
- The harness calls ``run`` several times per problem (once with the real routing weights, then once
  per top-k slot with one-hot weights to attribute errors to (token, expert) cells), so ``run`` must
  be a pure function of ``problem``.
- ``skip_reason(device)`` returns None when the backend can run, else ONE line saying why not; the
  default checks ``needs`` (device type, compute capability majors, importable packages, CUDA version).

Registry functions: :func:`all_backends` (name -> Backend, discovered once), :func:`get_backend`,
:func:`backend_names`, :func:`register` (for backends defined outside this folder, e.g. the planted
faults of :mod:`sm120lab.moe.faults` in tests and the notebook).
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import Backend, BackendInfo, Needs, Numerics

__all__ = ["Backend", "BackendInfo", "Needs", "Numerics", "all_backends", "backend_names", "get_backend", "register"]

_REGISTRY: dict[str, Backend] = {}
_DISCOVERED = False


def register(backend: Backend, *, replace: bool = False) -> Backend:
    """Add ``backend`` under ``backend.name``; a duplicate name is an error unless ``replace``."""
    if not isinstance(backend, Backend):
        raise TypeError(f"backend must be a sm120lab.moe.backends.Backend, got {type(backend).__name__}")
    if not replace and backend.name in _REGISTRY and _REGISTRY[backend.name] is not backend:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend
    return backend


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found = list(getattr(module, "BACKENDS", []))
        if getattr(module, "BACKEND", None) is not None:
            found.append(module.BACKEND)
        for backend in found:
            register(backend, replace=True)


#: listed first, in this order; the rest follow alphabetically
PREFERRED_ORDER = ("reference", "emulated-w4a4", "torch-bf16")


def all_backends() -> dict[str, Backend]:
    """Every registered backend, name -> instance (modules in this folder are imported once)."""
    _discover()
    rank = {n: i for i, n in enumerate(PREFERRED_ORDER)}
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def backend_names() -> list[str]:
    return list(all_backends())


def get_backend(name: str) -> Backend:
    backends = all_backends()
    if name not in backends:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(backends)}")
    return backends[name]
