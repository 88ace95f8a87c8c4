"""MoE layer problems: shapes from real models, routing distributions, NVFP4 weights.

``make_moe_problem(preset, tokens, routing, seed, device)`` draws one MoE layer:

- weights (the "checkpoint"): ``W ~ N(0, sigma_e^2)`` per expert with ``sigma_e = 0.02 * exp(0.5 z_e)``
  (so per-expert global scales differ) and 1% outlier input channels scaled x8; quantized to
  NVFP4 with per-expert global scales ``gs_e = 448*6/amax(W_e)`` ([E, 1]), ModelOpt-like:
  ``w13`` [E, 2I, H] with rows [0:I] = gate (w1), [I:2I] = up (w3); ``w2`` [E, H, I]. Both scale
  layouts are kept (``w13`` / ``w13_swizzled``...). The unquantized weights are kept in bf16
  (``w13_bf16``/``w2_bf16``) for the weight-only quantization error.
- hidden states: bf16 ``N(0, 1)`` with 0.5% outlier channels x10 (massive activations).
- routing: logits ``N(0,1) + bias``, top-k, weights = softmax over the k chosen logits.
  ``uniform`` (bias 0), ``zipf`` (bias = -1.2 log rank, random expert order), ``hot`` (one expert
  gets +10: in every token's top-k), ``sparse`` (only max(k+1, E/4) experts can be chosen: many
  empty experts), ``single`` (uniform with one token: the T=1 decode case).
- static activation global scales (W4A4 contract): ``a1_gscale = 448*6/amax(hidden)``,
  ``a2_gscale = 448*6/amax(bf16(SiLU(gate)*up))`` over the routed slots of the reference.

Presets: ``tiny``/``small`` (CPU tests) and the MoE layers of real models (sources per model in
:mod:`sm120lab.roofline.models`, e.g. https://huggingface.co/Qwen/Qwen3.5-397B-A17B).
Random draws use a generator on ``device``: the same seed gives the same problem on one device
type, not across CPU and CUDA.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass, replace

import torch

from sm120lab.cmdline import SEED_MAX
from sm120lab.nvfp4 import E2M1_MAX, E4M3_MAX, NVFP4Tensor, quantize_nvfp4

from .grouping import grouped_moe_forward
from .reference import check_routing, dequantize_expert

__all__ = ["MoEConfig", "MoEProblem", "MemoryEstimate", "PRESETS", "ROUTINGS", "abs_quantile", "available_memory",
           "calibrate_activation_scales", "memory_estimate", "memory_error", "one_thread_for_small",
           "intermediate_amax", "intermediate_quantile", "make_moe_problem", "make_routing", "problem_from_weights"]


@dataclass(frozen=True)
class MoEConfig:
    """One MoE layer's shape: E experts, top-k, hidden H, expert intermediate I."""

    name: str
    E: int
    k: int
    H: int
    I: int  # noqa: E741  (the name the model configs use)
    default_tokens: int = 64

    def __post_init__(self):
        """Refuse a shape no layer has (one line naming the field): E, k, H, I and default_tokens must be
        positive integers (a float such as 8.0 is refused, not truncated), and k at most E."""
        if not isinstance(self.name, str):
            raise ValueError(f"MoEConfig.name: expected a str, got {type(self.name).__name__}")
        for field in ("E", "k", "H", "I", "default_tokens"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"MoEConfig.{field}: expected a positive integer, got {v!r}")
            object.__setattr__(self, field, int(v))  # numpy integers become ints
        if self.k > self.E:
            raise ValueError(f"MoEConfig.k: expected top-k <= E={self.E} experts, got {self.k}")

    def as_dict(self) -> dict:
        return {"preset": self.name, "E": self.E, "k": self.k, "H": self.H, "I": self.I}


#: (E, k, H, I) of each model's MoE layer; sources per model in :mod:`sm120lab.roofline.models`.
PRESETS: dict[str, MoEConfig] = {
    "tiny": MoEConfig("tiny", E=8, k=2, H=128, I=64, default_tokens=48),
    "small": MoEConfig("small", E=32, k=4, H=256, I=128, default_tokens=128),
    "qwen3.5-397b-a17b": MoEConfig("qwen3.5-397b-a17b", E=512, k=10, H=4096, I=1024),
    "qwen3-next-80b-a3b": MoEConfig("qwen3-next-80b-a3b", E=512, k=10, H=2048, I=512),
    "qwen3-235b-a22b": MoEConfig("qwen3-235b-a22b", E=128, k=8, H=4096, I=1536),
    "gpt-oss-120b": MoEConfig("gpt-oss-120b", E=128, k=4, H=2880, I=2880),
}

ROUTINGS = ("uniform", "zipf", "hot", "sparse", "single")


@dataclass(frozen=True)
class MoEProblem:
    """One MoE layer problem (see the module docstring for how each field is drawn)."""

    config: MoEConfig
    routing: str
    seed: int
    hidden: torch.Tensor          # bf16 [T, H]
    topk_ids: torch.Tensor        # int64 [T, k]
    topk_weights: torch.Tensor    # fp32 [T, k]
    w13: NVFP4Tensor              # [E, 2I, H], linear scales, gs [E, 1]
    w2: NVFP4Tensor               # [E, H, I], linear scales, gs [E, 1]
    w13_swizzled: NVFP4Tensor     # same bytes, 128x4-swizzled scales
    w2_swizzled: NVFP4Tensor
    a1_gscale: torch.Tensor       # fp32 scalar, encode-side gs of the hidden states
    a2_gscale: torch.Tensor       # fp32 scalar, encode-side gs of the SiLU*up intermediate
    w13_bf16: torch.Tensor | None = None   # unquantized weights (bf16), for the weight-only error
    w2_bf16: torch.Tensor | None = None
    hot_expert: int | None = None
    drawn_tokens: int | None = None   # tokens drawn before take_tokens (None: this problem's own draw)
    replayable: bool = True           # False: tensors given, not drawn by make_moe_problem
    #: fp32 [T, E]: the router logits plus the routing's bias, whose top k gave topk_ids (None: not drawn here)
    router_logits: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        return int(self.hidden.shape[0])

    @property
    def device(self) -> torch.device:
        return self.hidden.device

    def expert_counts(self) -> torch.Tensor:
        """Routed slots per expert: int64 [E]."""
        return torch.bincount(self.topk_ids.reshape(-1), minlength=self.config.E)

    def with_topk_weights(self, topk_weights: torch.Tensor) -> MoEProblem:
        """The same problem with other routing weights (used by the per-slot probes)."""
        if topk_weights.shape != self.topk_ids.shape:
            raise ValueError(f"topk_weights must have shape {tuple(self.topk_ids.shape)}, got {tuple(topk_weights.shape)}")
        return replace(self, topk_weights=topk_weights.to(torch.float32))

    def take_tokens(self, n: int) -> MoEProblem:
        """The first ``n`` tokens of this problem (same layer), with a1/a2 recalibrated on them."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.tokens:
            raise ValueError(f"n must be an int in [1, {self.tokens}], got {n!r}")
        hidden, ids = self.hidden[:n].contiguous(), self.topk_ids[:n].contiguous()
        a1, a2 = calibrate_activation_scales(hidden, ids, self.w13, self.w2)
        logits = None if self.router_logits is None else self.router_logits[:n].contiguous()
        return replace(self, hidden=hidden, topk_ids=ids, topk_weights=self.topk_weights[:n].contiguous(),
                       router_logits=logits,
                       a1_gscale=a1, a2_gscale=a2, drawn_tokens=self.drawn_tokens or self.tokens)

    def describe(self) -> dict:
        counts = self.expert_counts()
        out = {**self.config.as_dict(), "tokens": self.tokens, "routing": self.routing, "seed": self.seed,
               "empty_experts": int((counts == 0).sum()), "max_expert_load": int(counts.max()),
               "a1_gscale": float(self.a1_gscale), "a2_gscale": float(self.a2_gscale)}
        if self.drawn_tokens is not None:
            out["drawn_tokens"] = self.drawn_tokens
        if not self.replayable:
            out["replayable"] = False
        return out


def config_of(preset) -> MoEConfig:
    """A :class:`MoEConfig` as given, or the preset it names in any case (``TINY`` -> tiny, as the
    roofline's model lookup); ``ValueError`` naming the presets otherwise."""
    if isinstance(preset, MoEConfig):
        return preset
    if isinstance(preset, str) and preset.strip().lower() in PRESETS:
        return PRESETS[preset.strip().lower()]
    raise ValueError(f"preset must be one of {sorted(PRESETS)} or a MoEConfig, got {preset!r}")


def _check_args(preset, tokens, routing, seed, device) -> tuple[MoEConfig, int, torch.device]:
    cfg = config_of(preset)
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    if routing == "single":
        if tokens not in (None, 1):
            raise ValueError(f"routing='single' is the T=1 case; tokens must be 1 or None, got {tokens!r}")
        tokens = 1
    if tokens is None:
        tokens = cfg.default_tokens
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed must be an int in [0, 2**63-1] (what torch.Generator.manual_seed takes), got {seed!r}")
    if cfg.k > cfg.E:
        raise ValueError(f"config: top-k {cfg.k} exceeds the number of experts {cfg.E}")
    if cfg.H % 16 or cfg.I % 16:
        raise ValueError(f"config: H={cfg.H} and I={cfg.I} must be multiples of 16 (NVFP4 blocks)")
    return cfg, tokens, torch.device(device)


def draw_router_logits(cfg: MoEConfig, tokens: int, routing: str, gen: torch.Generator, device) -> tuple[torch.Tensor, int | None]:
    """(router logits plus the routing's bias, fp32 [T, E]; hot expert or None) for a routing kind."""
    e = cfg.E
    logits = torch.randn(tokens, e, generator=gen, device=device)
    bias = torch.zeros(e, device=device)
    hot = None
    if routing == "zipf":
        order = torch.randperm(e, generator=gen, device=device)
        rank = torch.empty(e, device=device)
        rank[order] = torch.arange(1, e + 1, dtype=torch.float32, device=device)
        bias = -1.2 * torch.log(rank)
    elif routing == "hot":
        hot = int(torch.randint(0, e, (1,), generator=gen, device=device))
        bias[hot] = 10.0
    elif routing == "sparse":
        active = torch.randperm(e, generator=gen, device=device)[: max(cfg.k + 1, e // 4)]
        bias = torch.full((e,), -math.inf, device=device)
        bias[active] = 0.0
    return logits + bias, hot


def _top_k(cfg: MoEConfig, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    vals, ids = torch.topk(logits, cfg.k, dim=-1)
    return ids.long(), torch.softmax(vals.float(), dim=-1)


def make_routing(cfg: MoEConfig, tokens: int, routing: str, gen: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor, int | None]:
    """(topk_ids int64 [T,k], topk_weights fp32 [T,k], hot expert or None) for a routing kind."""
    logits, hot = draw_router_logits(cfg, tokens, routing, gen, device)
    ids, weights = _top_k(cfg, logits)
    return ids, weights, hot


def _quantize_experts(w: torch.Tensor, chunk: int) -> NVFP4Tensor:
    """Per-expert global scales [E, 1]; quantized a chunk of experts at a time to bound memory."""
    amax = torch.cat([w[s:s + chunk].float().abs().amax(dim=(1, 2)) for s in range(0, w.shape[0], chunk)])
    gs = ((E4M3_MAX * E2M1_MAX) / amax.clamp_min(1e-30)).reshape(-1, 1)
    parts = [quantize_nvfp4(w[s:s + chunk], gs[s:s + chunk]) for s in range(0, w.shape[0], chunk)]
    return NVFP4Tensor(data=torch.cat([p.data for p in parts]), scale=torch.cat([p.scale for p in parts]),
                       global_scale=gs, shape=w.shape, scale_layout="linear")


def _draw_weights(gen, e: int, n: int, kdim: int, device, chunk: int) -> torch.Tensor:
    out = torch.empty(e, n, kdim, dtype=torch.bfloat16, device=device)
    sigma = 0.02 * torch.exp(0.5 * torch.randn(e, generator=gen, device=device))
    n_out = max(1, kdim // 100)
    for s in range(0, e, chunk):
        m = min(chunk, e - s)
        w = torch.randn(m, n, kdim, generator=gen, device=device) * sigma[s:s + m, None, None]
        cols = torch.randint(0, kdim, (m, n_out), generator=gen, device=device)
        boost = torch.ones(m, kdim, device=device).scatter_(1, cols, 8.0)
        out[s:s + m] = (w * boost[:, None, :]).to(torch.bfloat16)
    return out


def _observe_intermediate(hidden, topk_ids, w13, w2, dtype, observe) -> None:
    """Call ``observe(|bf16(SiLU(G h) * U h)|)`` (fp32 [n, I]) per expert group, via the reference loop."""

    def hook(act: torch.Tensor) -> torch.Tensor:
        observe(act.to(torch.bfloat16).float().abs())
        return act

    grouped_moe_forward(hidden.to(dtype), topk_ids, None, w13.shape[0], lambda e: dequantize_expert(w13, e, dtype),
                        lambda e: dequantize_expert(w2, e, dtype), act_quant=hook, per_slot=True)


def intermediate_amax(hidden: torch.Tensor, topk_ids: torch.Tensor, w13: NVFP4Tensor, w2: NVFP4Tensor,
                      dtype: torch.dtype) -> float:
    """``amax(bf16(SiLU(G h) * U h))`` over the routed slots, computed in ``dtype`` by the reference loop."""
    amax = 0.0

    def seen(a: torch.Tensor) -> None:
        nonlocal amax
        amax = max(amax, float(a.max()))

    _observe_intermediate(hidden, topk_ids, w13, w2, dtype, seen)
    return amax


def abs_quantile(x: torch.Tensor, q: float) -> float:
    """The ``q``-quantile of ``|x|`` (lower order statistic, ``torch.kthvalue``: no size limit)."""
    flat = x.float().abs().reshape(-1)
    if not 0.0 < q <= 1.0 or flat.numel() == 0:
        raise ValueError(f"q must be in (0, 1] and x non-empty, got q={q!r}, {flat.numel()} elements")
    k = min(flat.numel(), max(1, math.ceil(q * flat.numel())))
    return float(torch.kthvalue(flat.cpu(), k).values)


def intermediate_quantile(hidden: torch.Tensor, topk_ids: torch.Tensor, w13: NVFP4Tensor, w2: NVFP4Tensor,
                          dtype: torch.dtype, q: float) -> float:
    """The ``q``-quantile of ``|bf16(SiLU(G h) * U h)|`` over the routed slots (``q = 1``: the amax)."""
    parts: list[torch.Tensor] = []
    _observe_intermediate(hidden, topk_ids, w13, w2, dtype, parts.append)
    return abs_quantile(torch.cat([p.reshape(-1) for p in parts]), q)


def calibrate_activation_scales(hidden: torch.Tensor, topk_ids: torch.Tensor, w13: NVFP4Tensor,
                                w2: NVFP4Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Static activation global scales of the W4A4 contract, fp32 scalars on ``hidden``'s device.

    ``a1 = 448*6 / amax(hidden)``, ``a2 = 448*6 / amax(bf16(SiLU(gate)*up))`` over the routed slots
    (the intermediate in fp64 on CPU, fp32 on a GPU).
    """
    dev = hidden.device
    amax_dtype = torch.float64 if dev.type == "cpu" else torch.float32
    a1 = (E4M3_MAX * E2M1_MAX) / hidden.float().abs().max().clamp_min(1e-30)
    a2_amax = intermediate_amax(hidden, topk_ids, w13, w2, amax_dtype)
    a2 = torch.tensor((E4M3_MAX * E2M1_MAX) / max(a2_amax, 1e-30), dtype=torch.float32, device=dev)
    return a1.float(), a2


def problem_from_weights(config: MoEConfig, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                         w13: NVFP4Tensor, w2: NVFP4Tensor, *, seed: int, routing: str = "uniform") -> MoEProblem:
    """A problem on given tensors (e.g. a benchmark layer's weights), calibrated like :func:`make_moe_problem`.

    ``w13``/``w2`` must hold linear scales; no unquantized weights are kept (the envelope then
    has no weight-only error). ``seed`` is what drew the tensors, recorded for replay.
    """
    check_routing(hidden, topk_ids, topk_weights, config.E)
    if w13.scale_layout != "linear" or w2.scale_layout != "linear":
        raise ValueError("w13 and w2 must hold linear block scales")
    a1, a2 = calibrate_activation_scales(hidden, topk_ids, w13, w2)
    return MoEProblem(config=config, routing=routing, seed=seed, hidden=hidden, topk_ids=topk_ids.long(),
                      topk_weights=topk_weights.float(), w13=w13, w2=w2, w13_swizzled=w13.with_layout("swizzled"),
                      w2_swizzled=w2.with_layout("swizzled"), a1_gscale=a1, a2_gscale=a2, replayable=False)


#: CPU problems with at most this many weight elements run on one torch thread
SMALL_WEIGHTS = 1 << 24


@contextlib.contextmanager
def one_thread_for_small(device, weights: int = 0):
    """One torch thread for small CPU problems (``weights`` elements, 0: any size), restored after.

    Measured on a shared 2-core box: a tiny problem with 11 backends took 3.5 s on 2 threads and
    0.15 s on one (the threads spin-wait on each other); fp32 results differ in the last bits.
    """
    if torch.device(device).type != "cpu" or weights > SMALL_WEIGHTS:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a ``sm120lab check`` run needs: ``fixed + per_token * T`` (an upper estimate)."""

    fixed: int
    per_token: int

    def total(self, tokens: int) -> int:
        return self.fixed + self.per_token * tokens


#: per weight element: bf16 original (2) + NVFP4 codes (0.5) + linear and swizzled scales (2/16)
#: + the bf16 copy torch-bf16 dequantizes (2)
_BYTES_PER_WEIGHT = 2 + 0.5 + 2 / 16 + 2
#: per element of the largest chunk drawn/quantized at once: fp32 draw, boost and the quantizer's
#: fp32 temporaries and masks
_BYTES_PER_CHUNK_ELEMENT = 24
_CHUNK_ELEMENTS = 1 << 27


def memory_estimate(preset, tokens: int) -> MemoryEstimate:
    """Upper estimate of the memory to draw ``preset`` with ``tokens`` tokens and run the harness on it.

    fixed = 3 E I H x 4.625 B (bf16 originals, NVFP4 codes and both scale layouts, a bf16 copy for
    torch-bf16) + 24 B x min(2 E I H, 2^27) (drawing and quantizing one chunk);
    per token = 6 H (hidden, fp32 draw) + 8 E (router logits) + 12 x 8 k H (fp64 per-slot reference,
    unquantized and emulated twins, the grouped rows and outputs, one backend's main run and k
    probes, the diff temporaries) + 64 H (output rows).
    """
    cfg = config_of(preset)
    weights = 3 * cfg.E * cfg.I * cfg.H
    fixed = int(weights * _BYTES_PER_WEIGHT + _BYTES_PER_CHUNK_ELEMENT * min(2 * cfg.E * cfg.I * cfg.H, _CHUNK_ELEMENTS))
    per_token = 6 * cfg.H + 8 * cfg.E + 12 * 8 * cfg.k * cfg.H + 64 * cfg.H
    return MemoryEstimate(fixed=fixed, per_token=per_token)


def available_memory(device) -> int | None:
    """Bytes free for new tensors on ``device`` (CPU: MemAvailable; CUDA: ``mem_get_info``); None if unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AssertionError):
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:,.1f} GiB" if n < 2 ** 40 else f"{n / 2 ** 40:,.1f} TiB"


def memory_error(preset, tokens: int | None, device, available: int | None = None) -> str | None:
    """One line naming the argument that does not fit in memory (``--preset``/``--tokens``), or None.

    ``tokens`` None: the preset's default. ``available``: bytes (default :func:`available_memory`).
    """
    cfg = config_of(preset)
    tokens = cfg.default_tokens if tokens is None else tokens
    avail = available_memory(device) if available is None else available
    if avail is None:
        return None
    est = memory_estimate(cfg, tokens)
    dev = torch.device(device).type
    if est.fixed > avail:
        return (f"--preset: {cfg.name} on --device {dev} needs about {_gib(est.fixed)} before any token "
                f"({3 * cfg.E * cfg.I * cfg.H:,} weight elements: bf16 originals, NVFP4, a bf16 copy), "
                f"{_gib(avail)} available; use a GPU with enough memory (--device cuda) or a smaller preset "
                "(tiny, small)")
    if est.total(tokens) > avail:
        most = max(0, (avail - est.fixed) // est.per_token)
        return (f"--tokens: {tokens:,} tokens of {cfg.name} need about {_gib(est.total(tokens))} on {dev} "
                f"({est.per_token:,} B per token), {_gib(avail)} available; at most {most:,} tokens fit")
    return None


def make_moe_problem(preset="tiny", tokens: int | None = None, routing: str = "uniform", seed: int = 0,
                     device="cpu", *, keep_unquantized: bool = True) -> MoEProblem:
    """Draw one MoE layer problem (module docstring). ``tokens`` defaults to the preset's.

    ``device=None`` draws it where the harness runs by default: the GPU when torch sees one, else
    the CPU (:func:`sm120lab.moe.harness.default_device`).
    ``keep_unquantized=False`` drops the bf16 originals (saves 2 bytes/weight on big presets).
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, tokens, dev = _check_args(preset, tokens, routing, seed, device)
    with one_thread_for_small(dev, 3 * cfg.E * cfg.I * cfg.H):
        return _draw_problem(cfg, tokens, routing, seed, dev, keep_unquantized)


def _draw_problem(cfg: MoEConfig, tokens: int, routing: str, seed: int, dev: torch.device,
                  keep_unquantized: bool) -> MoEProblem:
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    chunk = max(1, (1 << 27) // (2 * cfg.I * cfg.H))  # ~128M elements per chunk
    w13_f = _draw_weights(gen, cfg.E, 2 * cfg.I, cfg.H, dev, chunk)
    w2_f = _draw_weights(gen, cfg.E, cfg.H, cfg.I, dev, chunk)
    w13 = _quantize_experts(w13_f, chunk)
    w2 = _quantize_experts(w2_f, chunk)

    hidden = torch.randn(tokens, cfg.H, generator=gen, device=dev)
    outl = torch.randint(0, cfg.H, (max(1, cfg.H // 200),), generator=gen, device=dev)
    hidden[:, outl] *= 10.0
    hidden = hidden.to(torch.bfloat16)
    logits, hot = draw_router_logits(cfg, tokens, routing, gen, dev)
    topk_ids, topk_weights = _top_k(cfg, logits)

    a1, a2 = calibrate_activation_scales(hidden, topk_ids, w13, w2)
    return MoEProblem(config=cfg, routing=routing, seed=seed, hidden=hidden, topk_ids=topk_ids,
                      topk_weights=topk_weights, w13=w13, w2=w2,
                      w13_swizzled=w13.with_layout("swizzled"), w2_swizzled=w2.with_layout("swizzled"),
                      a1_gscale=a1, a2_gscale=a2,
                      w13_bf16=w13_f if keep_unquantized else None, w2_bf16=w2_f if keep_unquantized else None,
                      hot_expert=hot, router_logits=logits)
