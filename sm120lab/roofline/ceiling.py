"""Ceiling tok/s of a GPU configuration: tensor parallel TP x pipeline parallel PP.

Per GPU (TP shards every weight matrix, the KV heads and the linear-attention heads; the router
is replicated; PP gives each stage L/PP layers, the last stage also the lm_head):

    bytes_gpu(stage)  = (layer bytes) / (TP * PP) [+ lm_head / TP on the last stage]
    t_stage           = max(bytes_gpu / BW, flops_gpu / rate)  +  t_allreduce  +  t_send

    t_allreduce = (L/PP) * 2 collectives * 2 (TP-1)/TP * b*H*2 bytes / link   (ring, bf16 hidden)
    t_send      = b*H*2 bytes / link                                          (one stage hop)

KV heads: when TP exceeds n_kv_heads each GPU keeps one head (replication), so KV bytes per GPU
are n_kv_heads_per_gpu / n_kv_heads of the total, n_kv_heads_per_gpu = max(n_kv/TP, 1).

Pipeline schedule: the B sequences go through in m = min(B, PP) micro-batches of b = B/m.
A step is autoregressive, so each micro-batch needs the whole chain sum_i t_i before its next
token, and every stage must serve m micro-batches per period:

    period = max(m * max_i t_i, sum_i t_i)
    per-user tok/s = 1 / period,  aggregate tok/s = B / period,
    bubble = 1 - m * mean_i t_i / period    (fraction of stage time left idle)

B=1 on PP stages: period = sum_i t_i (no speed-up from PP, bubble (PP-1)/PP).
The ceiling is the larger of the memory-time and compute-time floors per stage, plus the
link time (collectives sit on the decode critical path). ``collective_latency_us`` adds a
fixed cost per collective/hop (default 0: the physical floor only).

Does it fit? Resident bytes per GPU, all B sequences at ``context`` past tokens:

    weights      all weights at their formats / (TP * PP)
    kv_cache     B * KV bytes * kv_share / PP           (kv_share as above)
    linear_state B * n_lin * (state + conv state) / (TP * PP)
    activations  B * (2*H*2 + k*2I*2/TP + V*4/TP)       (residual + normed hidden in bf16, the
                                                         gate/up output of the k experts, fp32 logits)
    fits  <=>  weights + kv_cache + linear_state + activations <= memory of the GPU

A lower bound on what a server needs: framework buffers, CUDA graphs, the allocator's slack and
the prefill working set come on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from .decode import WEIGHT_COMPONENTS, Precision, StepCost, step_cost
from .formats import compute_rate_key
from .hardware import GPUSpec
from .models import ModelConfig

GB = 1e9


@dataclass(frozen=True)
class Ceiling:
    gpu: str
    tp: int
    pp: int
    batch: float
    context: int
    micro_batches: int
    stage_times_s: tuple[float, ...]
    mem_time_s: float          # bottleneck stage, memory floor
    compute_time_s: float      # bottleneck stage, compute floor
    link_time_s: float         # bottleneck stage, collectives + hop
    period_s: float
    per_user_tok_s: float
    aggregate_tok_s: float
    bubble: float
    bound: str                 # 'memory' | 'compute'
    bytes_per_gpu: float       # bottleneck stage, per micro-batch step
    weights_per_gpu_GB: float  # resident weights (all experts)
    fits: bool                 # memory_per_gpu_GB <= the GPU's memory
    distinct_experts: float
    bandwidth_GBps: float = 0.0           # the memory bandwidth used
    bandwidth_source: str = "datasheet"   # 'datasheet' | 'measured' | 'datasheet (no measurement)'
    kv_cache_per_gpu_GB: float = 0.0      # all B sequences' KV cache on one GPU
    linear_state_per_gpu_GB: float = 0.0  # all B sequences' linear-attention state on one GPU
    activations_per_gpu_GB: float = 0.0   # decode working set (see module docstring)
    memory_per_gpu_GB: float = 0.0        # weights + KV cache + linear state + activations


def _check_parallel(tp: int, pp: int, model: ModelConfig) -> None:
    for name, v in (("tp", tp), ("pp", pp)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if pp > model.n_layers:
        raise ValueError(f"pp={pp} exceeds the model's {model.n_layers} layers")
    # vLLM shards attention heads across TP ranks and requires the head counts to divide evenly
    # (query heads; linear-attention heads likewise); KV heads replicate past n_kv_heads.
    for what, heads in (("attention heads", model.attention.q_heads),
                        ("linear-attention value heads", model.linear.v_heads),
                        ("linear-attention key heads", model.linear.qk_heads)):
        if heads and (tp > heads or heads % tp):
            raise ValueError(f"tp={tp} does not divide the model's {heads} {what} (tensor parallelism shards "
                             f"heads evenly; use a divisor of {heads})")


def resident_weight_bytes(model: ModelConfig, precision: Precision) -> float:
    """All weights at their formats (every expert, embeddings + lm_head)."""
    from .formats import bytes_per_param as bp

    L = model.n_layers
    return (L * model.n_experts * model.expert_params * bp(precision.experts)
            + L * model.shared_params_per_layer * bp(precision.shared)
            + L * model.router_params_per_layer * bp(precision.router)
            + model.n_attn_weight_layers * model.full_attn_params_per_layer * bp(precision.attention)
            + model.n_linear_attn_layers * model.linear_attn_params_per_layer * bp(precision.linear_attention)
            + 2 * model.lm_head_params * bp(precision.lm_head))


def _kv_share(model: ModelConfig, tp: int) -> float:
    """Fraction of the KV heads one TP rank holds: max(n_kv/TP, 1) / n_kv (heads replicate past n_kv)."""
    kv = model.attention.kv_heads
    return max(kv / tp, 1.0) / kv if kv else 0.0


def resident_bytes_per_gpu(model: ModelConfig, precision: Precision, *, tp: int = 1, pp: int = 1,
                           batch: float = 1, context: int = 2048) -> dict[str, float]:
    """Bytes one GPU holds for ``batch`` sequences: weights, KV cache, linear state, activations.

    Formulas in the module docstring. The KV cache and the linear-attention state are what one
    decode step reads (:func:`~sm120lab.roofline.decode.step_cost`), the state counted once
    (a step reads and writes it, so the step cost counts it twice).
    """
    _check_parallel(tp, pp, model)
    full = step_cost(model, precision, batch, context, distinct=0.0)
    B = float(batch)
    activations = B * (2 * model.hidden * 2.0 + model.top_k * 2 * model.moe_intermediate * 2.0 / tp
                       + model.vocab * 4.0 / tp)
    return {"weights": resident_weight_bytes(model, precision) / (tp * pp),
            "kv_cache": full.bytes["kv_cache"] * _kv_share(model, tp) / pp,
            "linear_state": full.bytes["linear_state"] / 2.0 / (tp * pp),
            "activations": activations}


def _per_gpu_layer_bytes(cost: StepCost, model: ModelConfig, tp: int) -> float:
    """Bytes of all decoder layers (no lm_head/embedding) on one TP rank."""
    b = cost.bytes
    kv_share = _kv_share(model, tp)
    sharded = (b["routed_experts"] + b["shared_expert"] + b["attention"] + b["linear_attention"]
               + b["linear_state"]) / tp
    return sharded + b["router"] + b["kv_cache"] * kv_share


def _per_gpu_layer_compute_s(cost: StepCost, model: ModelConfig, tp: int, gpu: GPUSpec,
                             precision: Precision, which: str) -> float:
    f = cost.flops
    kv_share = _kv_share(model, tp)
    expert_rate = gpu.rate_TFLOPs(compute_rate_key(precision.activation), which) * 1e12
    bf16_rate = gpu.rate_TFLOPs("bf16", which) * 1e12
    other = (f["attention"] + f["linear_attention"] + f["linear_state"]) / tp + f["router"] \
        + f["kv_cache"] * kv_share
    return cost.expert_flops / tp / expert_rate + other / bf16_rate


def ceiling(model: ModelConfig, gpu: GPUSpec, precision: Precision, *, tp: int = 1, pp: int = 1,
            batch: float = 1, context: int = 2048, routing: str = "uniform", zipf_s: float = 1.0,
            bandwidth: str = "datasheet", interconnect: str = "auto",
            collective_latency_us: float = 0.0) -> Ceiling:
    """Ceiling tok/s for ``batch`` concurrent sequences on TP x PP copies of ``gpu``.

    Args:
        bandwidth: 'datasheet', or 'measured' (our copy measurement; a GPU without one uses its
            datasheet value and the result says so in ``bandwidth_source``).

    Returns:
        :class:`Ceiling`; ``fits`` compares weights + KV cache + linear state + activations per
        GPU (``memory_per_gpu_GB``) with the GPU's memory.
    """
    _check_parallel(tp, pp, model)
    if batch <= 0:
        raise ValueError(f"batch must be > 0, got {batch}")
    m_micro = int(min(batch, pp)) if batch >= 1 else 1
    b = batch / m_micro
    cost = step_cost(model, precision, b, context, routing=routing, zipf_s=zipf_s)
    bw_GBps, bw_source = gpu.bandwidth_with_source(bandwidth)
    bw = bw_GBps * 1e9
    n_gpus = tp * pp
    link = gpu.link_GBps(interconnect) if n_gpus > 1 else None
    if n_gpus > 1 and not link:
        raise ValueError(f"{gpu.gpu}: no GPU-GPU link bandwidth in data/hardware.csv for TP/PP")
    lat = collective_latency_us * 1e-6

    layer_bytes = _per_gpu_layer_bytes(cost, model, tp) / pp
    layer_compute = _per_gpu_layer_compute_s(cost, model, tp, gpu, precision, bandwidth) / pp
    lm_bytes = (cost.bytes["lm_head"]) / tp
    lm_compute = cost.flops["lm_head"] / tp / (gpu.rate_TFLOPs("bf16", bandwidth) * 1e12)
    emb_bytes = cost.bytes["embedding"]
    hidden_bytes = b * model.hidden * 2.0
    layers_per_stage = model.n_layers / pp
    t_ar = 0.0
    if tp > 1:
        t_ar = layers_per_stage * 2 * (2 * (tp - 1) / tp * hidden_bytes / (link * 1e9) + lat)
    t_hop = (hidden_bytes / (link * 1e9) + lat) if pp > 1 else 0.0

    stages = []
    parts = []
    for i in range(pp):
        by = layer_bytes + (lm_bytes if i == pp - 1 else 0.0) + (emb_bytes if i == 0 else 0.0)
        co = layer_compute + (lm_compute if i == pp - 1 else 0.0)
        t_mem, t_cmp = by / bw, co
        link_t = t_ar + (t_hop if i < pp - 1 else 0.0)
        stages.append(max(t_mem, t_cmp) + link_t)
        parts.append((by, t_mem, t_cmp, link_t))
    period = max(m_micro * max(stages), sum(stages))
    worst = max(range(pp), key=lambda i: stages[i])
    by, t_mem, t_cmp, link_t = parts[worst]
    resident = resident_bytes_per_gpu(model, precision, tp=tp, pp=pp, batch=batch, context=context)
    memory = sum(resident.values())
    return Ceiling(
        gpu=gpu.gpu, tp=tp, pp=pp, batch=batch, context=context, micro_batches=m_micro,
        stage_times_s=tuple(stages), mem_time_s=t_mem, compute_time_s=t_cmp, link_time_s=link_t,
        period_s=period, per_user_tok_s=1.0 / period, aggregate_tok_s=batch / period,
        bubble=1.0 - m_micro * (sum(stages) / pp) / period,
        bound="memory" if t_mem >= t_cmp else "compute", bytes_per_gpu=by,
        weights_per_gpu_GB=resident["weights"] / GB, fits=memory <= gpu.mem_GB * GB,
        distinct_experts=cost.distinct_experts, bandwidth_GBps=bw_GBps, bandwidth_source=bw_source,
        kv_cache_per_gpu_GB=resident["kv_cache"] / GB, linear_state_per_gpu_GB=resident["linear_state"] / GB,
        activations_per_gpu_GB=resident["activations"] / GB, memory_per_gpu_GB=memory / GB)


def moe_layer_floor_us(model: ModelConfig, tokens: float, bandwidth_GBps: float, *,
                       weight_format: str = "nvfp4", routing: str = "uniform",
                       zipf_s: float = 1.0) -> float:
    """Memory floor (µs) of ONE routed-MoE layer for ``tokens`` tokens: distinct experts'
    weights once, at ``bandwidth_GBps`` (activations, sort and scales of activations ignored)."""
    from .formats import bytes_per_param
    from .routing import expected_distinct

    D = expected_distinct(model.n_experts, model.top_k, tokens, routing=routing, zipf_s=zipf_s)
    return D * model.expert_params * bytes_per_param(weight_format) / (bandwidth_GBps * 1e9) * 1e6


def tok_s_from_moe_layer_us(us_per_layer: float, tokens: float, n_layers: int) -> tuple[float, float]:
    """(per-user, aggregate) tok/s that a MoE layer time alone allows: every decode step runs
    ``n_layers`` such layers for ``tokens`` concurrent sequences. MoE-layer-only: attention,
    lm_head, collectives and launches are not counted."""
    if us_per_layer <= 0 or tokens <= 0 or n_layers <= 0:
        raise ValueError("us_per_layer, tokens and n_layers must be > 0")
    step_s = n_layers * us_per_layer * 1e-6
    return 1.0 / step_s, tokens / step_s


__all__ = ["Ceiling", "ceiling", "resident_bytes_per_gpu", "resident_weight_bytes", "moe_layer_floor_us",
           "tok_s_from_moe_layer_us", "WEIGHT_COMPONENTS"]
