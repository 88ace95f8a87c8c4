"""The user's serving setup: GPU, model preset, TP x PP, users, context, and whether it fits.

One default per GPU, read from ``data/recommendations.yaml`` (``setup`` + ``per_gpu_setup``) and
shared by ``sm120lab recommend`` and ``sm120lab roofline``. A default must fit its GPU:

    held per GPU = weights + KV cache (users x max_model_len tokens) + linear-attention state
                   + activations                                 (sm120lab.roofline.resident_bytes_per_gpu)
    fits        <=> held per GPU <= gpu_memory_utilization x the GPU's memory

``gpu_memory_utilization`` = 0.9 is vLLM's default share of GPU memory (``--gpu-memory-utilization``).
The estimate is a lower bound on what a server holds (CUDA graphs, the allocator's slack and the
prefill working set come on top).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

GPU_MEMORY_UTILIZATION = 0.9


class GPU(str, Enum):
    RTX_PRO_6000 = "rtx-pro-6000"
    RTX_5090 = "rtx-5090"
    DGX_SPARK = "dgx-spark"


@dataclass(frozen=True)
class Setup:
    """The user's configuration: model preset (sm120lab.roofline.PRESETS), TP x PP GPUs, users.

    ``context`` is the past tokens per sequence at which the decode ceiling is computed;
    ``max_model_len`` is what the server reserves KV cache for (the fit check and ``vllm serve``).
    """

    model: str = "qwen3.5-397b-a17b"
    tp: int = 2
    pp: int = 2
    users: int = 1
    context: int = 2048
    max_model_len: int = 32768
    kv_cache_dtype: str = "fp8"

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp

    def to_dict(self) -> dict:
        return {**asdict(self), "n_gpus": self.n_gpus}


@dataclass(frozen=True)
class Fit:
    """Memory held per GPU by a setup, against what vLLM may use."""

    weights_GB: float
    kv_cache_GB: float
    linear_state_GB: float
    activations_GB: float
    held_GB: float
    usable_GB: float
    gpu_GB: float

    @property
    def fits(self) -> bool:
        return self.held_GB <= self.usable_GB

    def describe(self) -> str:
        verdict = "fits" if self.fits else "does NOT fit"
        return (f"{verdict}: {self.held_GB:.1f} GB per GPU held (weights {self.weights_GB:.1f}, KV cache "
                f"{self.kv_cache_GB:.1f}, linear state {self.linear_state_GB:.1f}, activations "
                f"{self.activations_GB:.2f}) of {self.usable_GB:.1f} GB usable "
                f"({GPU_MEMORY_UTILIZATION:g} x {self.gpu_GB:g} GB)")


_FIELDS = ("model", "tp", "pp", "users", "context", "max_model_len", "kv_cache_dtype")


def resolve_setup(gpu: str | GPU, rules: dict | None = None, *, model: str | None = None, tp: int | None = None,
                  pp: int | None = None, users: int | None = None, context: int | None = None,
                  max_model_len: int | None = None) -> Setup:
    """The setup for ``gpu``: the rules' ``setup``, the GPU's ``per_gpu_setup`` on top, then the
    given arguments, checked against the model (:func:`check_parallel`).

    Raises:
        ValueError: an unknown GPU or model, a TP/PP/users that is not a positive integer, a TP
            that does not divide the model's heads or a PP beyond its layers (the message names
            the argument).
    """
    from .core import load_rules

    g = parse_gpu(gpu)
    rules = rules if rules is not None else load_rules()
    s = dict(rules.get("setup") or {})
    s.update((rules.get("per_gpu_setup") or {}).get(g.value, {}))
    given = {"model": model, "tp": tp, "pp": pp, "users": users, "context": context, "max_model_len": max_model_len}
    s.update({k: v for k, v in given.items() if v is not None})
    for name in ("tp", "pp", "users", "max_model_len"):
        v = s.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if not isinstance(s.get("context"), int) or s["context"] < 0:
        raise ValueError(f"context: expected a non-negative integer, got {s.get('context')!r}")
    setup = Setup(**{k: s[k] for k in _FIELDS if k in s})
    check_parallel(setup)
    return setup


def parse_gpu(gpu: str | GPU) -> GPU:
    try:
        return GPU(gpu)
    except ValueError:
        raise ValueError(f"gpu: expected one of {', '.join(x.value for x in GPU)}, got {gpu!r}") from None


def check_parallel(setup: Setup) -> None:
    """Refuse a TP that does not divide the model's attention heads, or a PP beyond its layers.

    Raises:
        ValueError: ``model: ...``, ``tp: ...`` or ``pp: ...`` (one line).
    """
    from ..roofline import get_model
    from ..roofline.ceiling import _check_parallel

    try:
        m = get_model(setup.model)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"model: {exc}") from None
    try:
        _check_parallel(setup.tp, setup.pp, m)
    except ValueError as exc:
        name = "pp" if str(exc).startswith("pp") else "tp"
        raise ValueError(f"{name}: {exc}") from None


def fit(gpu: str | GPU, setup: Setup, precision=None) -> Fit:
    """Memory one GPU holds for ``setup`` at ``max_model_len`` tokens per user (module docstring), its
    weights counted on the ceiling's basis (the checkpoint's own formats,
    :func:`~sm120lab.recommend.facts.guide_basis`) unless ``precision`` is given."""
    from ..roofline import get_gpu, get_model
    from ..roofline.ceiling import resident_bytes_per_gpu
    from .facts import guide_basis

    g = get_gpu(parse_gpu(gpu).value)
    m = get_model(setup.model)
    prec = precision or guide_basis(_kv_format(setup.kv_cache_dtype)).precision_for(m)
    r = resident_bytes_per_gpu(m, prec, tp=setup.tp, pp=setup.pp, batch=setup.users, context=setup.max_model_len)
    GB = 1e9
    held = sum(r.values()) / GB
    return Fit(weights_GB=r["weights"] / GB, kv_cache_GB=r["kv_cache"] / GB, linear_state_GB=r["linear_state"] / GB,
               activations_GB=r["activations"] / GB, held_GB=held, usable_GB=GPU_MEMORY_UTILIZATION * g.mem_GB,
               gpu_GB=g.mem_GB)


def _kv_format(kv_cache_dtype: str) -> str:
    """vLLM's ``--kv-cache-dtype`` value as a roofline format (fp8 variants -> fp8, auto -> bf16)."""
    return "fp8" if kv_cache_dtype.startswith("fp8") else "bf16"

