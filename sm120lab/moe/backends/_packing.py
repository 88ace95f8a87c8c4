"""Weight/scale packing and plumbing shared by the FlashInfer and vLLM adapters (pure torch, testable on CPU).

Our w13 is [gate; up] (ModelOpt/vLLM order). FlashInfer's CUTLASS fused MoE and its cuTile/SM12x
preparation take "w31" = [up; gate] (FlashInfer 0.6.5 ``tests/moe/test_trtllm_cutlass_fused_moe.py``
``torch_moe_nvfp4``: ``w1_expert, w3_expert = weight[m//2:], weight[:m//2]``; 0.7.4
``fused_moe/prepare.py`` ``prepare_cutile_nvfp4_weights``: ``up, gate = w1_fp4.chunk(2, dim=1)``).
"""

from __future__ import annotations

import torch

from sm120lab.nvfp4 import NVFP4Tensor, swizzle_scales_128x4

from .base import Backend, _version_tuple


def up_gate_order(t: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] in [gate; up] order -> [up; gate] (an involution)."""
    i = t.shape[1] // 2
    return torch.cat((t[:, i:], t[:, :i]), dim=1).contiguous()


def w31(q: NVFP4Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 [E, 2I, H/2], linear E4M3 scales [E, 2I, H/16]) in [up; gate] order."""
    return up_gate_order(q.data), up_gate_order(q.linear_scale())


def swizzled(linear_scale: torch.Tensor) -> torch.Tensor:
    """[E, N, Kb] linear E4M3 scales -> [E, pad128(N), pad4(Kb)] 128x4-swizzled, contiguous."""
    return swizzle_scales_128x4(linear_scale).contiguous()


def per_expert(gs: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Global scale [E, 1] (or scalar) -> fp32 [E]."""
    g = gs.float().reshape(-1)
    return (g.expand(num_experts) if g.numel() == 1 else g).contiguous()


def modelopt_scale(gs: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Encode-side global scale -> ModelOpt decode-side ``weight_scale_2`` = 1/gs, fp32 [E]."""
    from sm120lab.nvfp4 import modelopt_scale_from_global_scale

    return modelopt_scale_from_global_scale(per_expert(gs, num_experts)).contiguous()


def activation_gscale(a_gs: torch.Tensor, num_experts: int | None = None) -> torch.Tensor:
    """Our static activation gscale (fp32 scalar, encode-side) as a 0-d tensor, or fp32 [E] if
    ``num_experts`` is given (vLLM's per-expert ``a*_gscale``)."""
    a = a_gs.float().reshape(())
    return a if num_experts is None else a.reshape(1).expand(num_experts).contiguous()


# ----------------------------------------------------------------------------- adapter plumbing

#: the label every adapter of a package we cannot run here carries, in docstrings and skip reasons
UNVERIFIED = "unverified on SM120 hardware"


def installed_version(dist: str, module: str | None = None) -> str | None:
    """Version of an installed distribution (``importlib.metadata``), or None.

    Args:
        dist: distribution name, e.g. ``"flashinfer-python"``.
        module: import name to ask for ``__version__`` when ``dist`` has no metadata (a source
            checkout on ``PYTHONPATH``); it is imported only in that case.
    """
    from importlib import import_module, metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        pass
    if module is None:
        return None
    try:
        version = getattr(import_module(module), "__version__", None)
    except Exception:  # noqa: BLE001 - an unimportable package has no usable version
        return None
    return str(version) if version else None


class AdapterBackend(Backend):
    """A backend that calls a third-party package's API, checked on CPU against recorded wheels.

    ``api`` (an :class:`~sm120lab.moe.backends.api_claim.ApiClaim`) names the package, the versions
    whose signatures ``tests/test_backend_api.py`` binds every call against, and the lowest version
    the adapter runs on. ``skip_reason`` adds the version check to ``needs`` and labels every
    reason "unverified on SM120 hardware". Each adapter's ``info`` says ``verified=False`` and its
    summary carries :data:`UNVERIFIED` (``tests/test_backend_api.py`` checks both).
    """

    api = None  # ApiClaim

    def skip_reason(self, device) -> str | None:
        reason = self.needs.skip_reason(device)
        if reason is None:
            reason = self.version_skip_reason(self.installed())
        return None if reason is None else f"{reason} (adapter {UNVERIFIED})"

    def installed(self) -> str | None:
        """Installed version of ``api.dist`` (its first ``needs.packages`` module as a fallback)."""
        return installed_version(self.api.dist, self.needs.packages[0] if self.needs.packages else None)

    def version_skip_reason(self, version: str | None) -> str | None:
        """None when ``version`` of ``api.dist`` is one this adapter runs on, else why not."""
        if version is None:
            return f"{self.api.dist} is not installed"
        if _version_tuple(version) < _version_tuple(self.api.minimum):
            return (f"{self.api.dist} {version} is older than {self.api.minimum}, the oldest API this adapter "
                    f"knows (calls checked against {', '.join(self.api.checked)})")
        return None

    def api_notes(self) -> dict:
        """Notes for ``run``'s result: installed version and whether its API was checked."""
        version = self.installed()
        return {self.api.dist: version, "api_checked_versions": list(self.api.checked),
                "api_checked": version in self.api.checked, "verified_on_sm120": False}
