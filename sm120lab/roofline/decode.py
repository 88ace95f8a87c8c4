"""Bytes read and FLOPs done by one decode step: B sequences each produce one token.

Per component (whole model, one device, no parallelism), with D(B) the expected number of
distinct routed experts (:mod:`sm120lab.roofline.routing`), P_x the parameter counts of
:class:`~sm120lab.roofline.models.ModelConfig` and b(fmt) bytes per parameter:

    routed_experts   bytes L * D(B) * 3HI * b(experts)        flops 2 * B * k * 3HI * L
    shared_expert    bytes L * P_shared * b(shared)           flops 2 * B * P_shared * L
    router           bytes L * H * E * b(router)              flops 2 * B * H * E * L
    attention        bytes n_attn * P_attn * b(attention)     flops 2 * B * n_attn * P_attn
    linear_attention bytes n_lin * P_lin * b(linear)          flops 2 * B * n_lin * P_lin
    lm_head          bytes V * H * b(lm_head)                 flops 2 * B * V * H
    embedding        bytes B * H * 2 (one bf16 row each)      flops 0
    kv_cache         bytes B * sum_layers 2 * n_kv * hd * C_l * b(kv)
                     flops B * sum_layers 4 * n_q * hd * C_l  (QK^T and PV), C_l = C or min(C, window)
    linear_state     bytes B * n_lin * (2 * nv*dk*dv * state_bytes + 2 * conv_state * 2)
                     flops B * n_lin * 7 * nv*dk*dv           (delta-rule update + readout, approx.)

Weights are read once per step whatever B is (the batch shares them); caches and states are
per sequence. Hidden-state traffic between kernels (a few B*H vectors per layer) is left out:
below 0.1% of any step here. ``expert_flops`` run at the activation format's tensor rate, all
other FLOPs at the bf16 rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .formats import bytes_per_param, check_format
from .models import ModelConfig
from .routing import expected_distinct


@dataclass(frozen=True)
class Precision:
    """Storage format of each weight group, the KV cache and the expert GEMM activations."""

    experts: str = "nvfp4"
    shared: str = "nvfp4"
    attention: str = "nvfp4"
    linear_attention: str = "bf16"
    router: str = "bf16"
    lm_head: str = "bf16"
    kv_cache: str = "fp8"
    linear_state_bytes: int = 4
    activation: str = "nvfp4"

    def __post_init__(self) -> None:
        for name in ("experts", "shared", "attention", "linear_attention", "router", "lm_head",
                     "kv_cache", "activation"):
            check_format(getattr(self, name), arg=f"Precision.{name}")
        if self.linear_state_bytes not in (2, 4):
            raise ValueError(f"linear_state_bytes must be 2 (bf16) or 4 (fp32), got {self.linear_state_bytes}")


PRECISION_PLANS: dict[str, str] = {
    "linear-quantized": (
        "routed experts, shared expert and softmax-attention projections in the expert format; "
        "Gated DeltaNet, router, lm_head, embeddings bf16 (the coverage RedHat's Qwen3.5-family "
        "NVFP4 cards state: https://huggingface.co/RedHatAI/Ornith-1.0-35B-NVFP4)"),
    "experts-only": (
        "only the routed experts in the expert format, everything else bf16 (weight-only expert "
        "checkpoints, e.g. https://huggingface.co/MESHIVEAI/Qwen3.8-Flash-Next-NVFP4-W4A16)"),
}


def precision_plan(plan: str = "linear-quantized", weight_format: str = "nvfp4", *,
                   activation: str | None = None, kv_cache: str = "fp8",
                   linear_state_bytes: int = 4) -> Precision:
    """A named :class:`Precision`. ``activation`` defaults to the weight format (W4A4);
    pass 'bf16' for W4A16 kernels such as Marlin."""
    fmt = check_format(weight_format, arg="weight_format")
    act = fmt if activation is None else activation
    if plan == "linear-quantized":
        return Precision(experts=fmt, shared=fmt, attention=fmt, activation=act, kv_cache=kv_cache,
                         linear_state_bytes=linear_state_bytes)
    if plan == "experts-only":
        return Precision(experts=fmt, shared="bf16", attention="bf16", activation=act,
                         kv_cache=kv_cache, linear_state_bytes=linear_state_bytes)
    raise ValueError(f"plan must be one of {sorted(PRECISION_PLANS)}, got {plan!r}")


COMPONENTS = ("routed_experts", "shared_expert", "router", "attention", "linear_attention",
              "lm_head", "embedding", "kv_cache", "linear_state")
# components whose size does not depend on B (read once per step)
WEIGHT_COMPONENTS = ("routed_experts", "shared_expert", "router", "attention", "linear_attention",
                     "lm_head")


@dataclass(frozen=True)
class StepCost:
    """Bytes and FLOPs of one decode step, by component (whole model)."""

    batch: float
    context: int
    distinct_experts: float
    bytes: dict[str, float] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return float(sum(self.bytes.values()))

    @property
    def total_flops(self) -> float:
        return float(sum(self.flops.values()))

    @property
    def expert_flops(self) -> float:
        return self.flops["routed_experts"] + self.flops["shared_expert"]


def _kv_tokens(model: ModelConfig, context: int) -> float:
    """sum over softmax-attention layers of the past tokens each reads."""
    window = min(context, model.sliding_window) if model.n_sliding_attn_layers else 0
    return model.n_full_attn_layers * context + model.n_sliding_attn_layers * window


def step_cost(model: ModelConfig, precision: Precision, batch: float, context: int, *,
              routing: str = "uniform", zipf_s: float = 1.0, distinct: float | None = None) -> StepCost:
    """:class:`StepCost` for ``batch`` sequences at ``context`` past tokens each.

    ``distinct`` overrides the expected number of distinct experts (e.g. a measured count).
    """
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    if not isinstance(context, (int,)) or context < 0:
        raise ValueError(f"context must be an int >= 0 (past tokens per sequence), got {context!r}")
    m, p, B, C = model, precision, float(batch), int(context)
    L, H = m.n_layers, m.hidden
    D = float(distinct) if distinct is not None else (
        expected_distinct(m.n_experts, m.top_k, B, routing=routing, zipf_s=zipf_s) if B > 0 else 0.0)
    if not 0 <= D <= m.n_experts + 1e-9:
        raise ValueError(f"distinct experts must be in [0, E={m.n_experts}], got {D}")
    bp = bytes_per_param
    kv_vals = m.attention.kv_values_per_token * _kv_tokens(m, C)
    by = {
        "routed_experts": L * D * m.expert_params * bp(p.experts),
        "shared_expert": L * m.shared_params_per_layer * bp(p.shared),
        "router": L * m.router_params_per_layer * bp(p.router),
        "attention": m.n_attn_weight_layers * m.full_attn_params_per_layer * bp(p.attention),
        "linear_attention": m.n_linear_attn_layers * m.linear_attn_params_per_layer * bp(p.linear_attention),
        "lm_head": m.lm_head_params * bp(p.lm_head),
        "embedding": B * H * 2.0,
        "kv_cache": B * kv_vals * bp(p.kv_cache),
        "linear_state": B * m.n_linear_attn_layers * (2.0 * m.linear.state_values * p.linear_state_bytes
                                                      + 2.0 * m.linear.conv_state_values * 2),
    }
    fl = {
        "routed_experts": 2.0 * B * m.top_k * m.expert_params * L,
        "shared_expert": 2.0 * B * m.shared_params_per_layer * L,
        "router": 2.0 * B * m.router_params_per_layer * L,
        "attention": 2.0 * B * m.n_attn_weight_layers * m.full_attn_params_per_layer,
        "linear_attention": 2.0 * B * m.n_linear_attn_layers * m.linear_attn_params_per_layer,
        "lm_head": 2.0 * B * m.lm_head_params,
        "embedding": 0.0,
        "kv_cache": B * 4.0 * m.attention.q_heads * m.attention.head_dim * _kv_tokens(m, C),
        "linear_state": B * m.n_linear_attn_layers * 7.0 * m.linear.state_values,
    }
    return StepCost(batch=B, context=C, distinct_experts=D, bytes=by, flops=fl)
