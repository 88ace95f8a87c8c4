"""Model shapes that decide the bytes and FLOPs of one decoded token.

One :class:`ModelConfig` per preset name of ``sm120lab.moe.problem``. The MoE block's shape
(E, k, H, I) is taken from that module's ``PRESETS`` (the single source for it); the attention /
linear-attention / layer / vocabulary fields are not in the MoE presets, so they live here
(``_ARCH``), each preset with the public pages it was read from (``sources``).

Layer kinds:

- full attention (GQA): q/k/v/o projections; with ``attn_output_gate`` the q projection also
  produces a per-head gate (Qwen3-Next / Qwen3.5 "Gated Attention": q_proj out = 2 * nq * hd);
  reads ``2 * n_kv_heads * head_dim`` cache values per past token.
- sliding-window attention (gpt-oss): same weights, reads at most ``sliding_window`` past tokens.
- Gated DeltaNet linear attention (Qwen3-Next / Qwen3.5): projections
  in_proj_qkvz (H -> 2*nk*dk + 2*nv*dv), in_proj_ba (H -> 2*nv), a depthwise conv1d
  (kernel ``linear_conv_kernel`` over 2*nk*dk + nv*dv channels), out_proj (nv*dv -> H); a
  recurrent state of nv * dk * dv values per sequence that each decoded token reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int                      # H
    moe_intermediate: int            # I (per routed expert)
    n_experts: int                   # E
    top_k: int                       # k
    n_layers: int                    # decoder layers, each with one MoE block
    vocab: int
    n_shared_experts: int = 0
    shared_intermediate: int = 0
    # full (softmax) attention
    n_full_attn_layers: int = 0
    n_sliding_attn_layers: int = 0
    sliding_window: int = 0
    n_q_heads: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    attn_output_gate: bool = False
    # Gated DeltaNet linear attention
    n_linear_attn_layers: int = 0
    linear_qk_heads: int = 0
    linear_v_heads: int = 0
    linear_qk_head_dim: int = 0
    linear_v_head_dim: int = 0
    linear_conv_kernel: int = 0
    sources: tuple[str, ...] = field(default=(), compare=False)
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("hidden", "moe_intermediate", "n_experts", "top_k", "n_layers", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must be in [1, n_experts={self.n_experts}], got {self.top_k}")
        kinds = self.n_full_attn_layers + self.n_sliding_attn_layers + self.n_linear_attn_layers
        if kinds != self.n_layers:
            raise ValueError(
                f"{self.name}: full ({self.n_full_attn_layers}) + sliding ({self.n_sliding_attn_layers})"
                f" + linear ({self.n_linear_attn_layers}) attention layers must equal n_layers={self.n_layers}")

    # ---- parameter counts (weights only, no norms/biases: < 0.1% of any preset) ----
    @property
    def expert_params(self) -> int:
        """One routed expert: w13 [2I, H] + w2 [H, I] = 3*H*I."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def shared_params_per_layer(self) -> int:
        return self.n_shared_experts * 3 * self.hidden * self.shared_intermediate

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden * self.n_experts

    @property
    def full_attn_params_per_layer(self) -> int:
        q_out = self.n_q_heads * self.head_dim * (2 if self.attn_output_gate else 1)
        kv_out = 2 * self.n_kv_heads * self.head_dim
        o_in = self.n_q_heads * self.head_dim
        return self.hidden * (q_out + kv_out) + o_in * self.hidden

    @property
    def linear_attn_params_per_layer(self) -> int:
        if self.n_linear_attn_layers == 0:
            return 0
        qk = self.linear_qk_heads * self.linear_qk_head_dim
        v = self.linear_v_heads * self.linear_v_head_dim
        in_proj = self.hidden * (2 * qk + 2 * v + 2 * self.linear_v_heads)
        conv = (2 * qk + v) * self.linear_conv_kernel
        out_proj = v * self.hidden
        return in_proj + conv + out_proj

    @property
    def linear_state_values(self) -> int:
        """Recurrent state values per sequence per linear-attention layer: nv * dk * dv."""
        return self.linear_v_heads * self.linear_qk_head_dim * self.linear_v_head_dim

    @property
    def n_attn_weight_layers(self) -> int:
        return self.n_full_attn_layers + self.n_sliding_attn_layers

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def active_params(self) -> int:
        """Parameters a single token multiplies with (lm_head included, embedding lookup not)."""
        L = self.n_layers
        return (L * (self.top_k * self.expert_params + self.shared_params_per_layer
                     + self.router_params_per_layer)
                + self.n_attn_weight_layers * self.full_attn_params_per_layer
                + self.n_linear_attn_layers * self.linear_attn_params_per_layer
                + self.lm_head_params)

    def total_params(self) -> int:
        """All weights incl. every expert and an untied embedding table."""
        L = self.n_layers
        return (L * (self.n_experts * self.expert_params + self.shared_params_per_layer
                     + self.router_params_per_layer)
                + self.n_attn_weight_layers * self.full_attn_params_per_layer
                + self.n_linear_attn_layers * self.linear_attn_params_per_layer
                + 2 * self.lm_head_params)

    @property
    def moe_shape(self) -> dict[str, int]:
        return {"E": self.n_experts, "k": self.top_k, "H": self.hidden, "I": self.moe_intermediate}


_QWEN35_CARD = "https://huggingface.co/Qwen/Qwen3.5-397B-A17B (model card; read via the pages below)"
_QWEN3NEXT_CARD = "https://lmstudio.ai/models/qwen3-next (reproduces the Qwen/Qwen3-Next-80B-A3B-Instruct card)"

_ARCH: dict[str, dict] = {
    "qwen3.5-397b-a17b": dict(
        n_layers=60, vocab=248320, n_shared_experts=1, shared_intermediate=1024,
        n_full_attn_layers=15, n_q_heads=32, n_kv_heads=2, head_dim=256, attn_output_gate=True,
        n_linear_attn_layers=45, linear_qk_heads=16, linear_v_heads=64, linear_qk_head_dim=128,
        linear_v_head_dim=128, linear_conv_kernel=4,
        sources=(
            _QWEN35_CARD,
            "https://apxml.com/models/qwen35-397b-a17b (H=4096, 60 layers, 32 Q / 2 KV heads, head_dim 256, vocab 248320, 512 experts)",
            "https://roboaidigest.com/posts/2026-02-17-qwen3-5-397b-moe (Gated DeltaNet 64 V / 16 QK heads; 15 x (3 GDN + 1 attention); 10 routed + 1 shared)",
            "https://docs.modular.com/max/api/python/pipelines.architectures.qwen3_5/ (linear head dims 128, conv kernel 4, attn_output_gate)",
            "moe_intermediate 1024 and one shared expert of 1024: not stated on the pages above; the values "
            "for which the parameter count matches the card's 397B total (396.3B here, "
            "tests/test_roofline_decode.py)",
        )),
    "qwen3-next-80b-a3b": dict(
        n_layers=48, vocab=151936, n_shared_experts=1, shared_intermediate=512,
        n_full_attn_layers=12, n_q_heads=16, n_kv_heads=2, head_dim=256, attn_output_gate=True,
        n_linear_attn_layers=36, linear_qk_heads=16, linear_v_heads=32, linear_qk_head_dim=128,
        linear_v_head_dim=128, linear_conv_kernel=4,
        sources=(
            _QWEN3NEXT_CARD + " (H=2048, 48 layers = 12 x (3 GDN + 1 attention), 16 Q / 2 KV x 256, GDN 32 V / 16 QK x 128, 512 experts top-10 + 1 shared, expert I=512)",
            "https://apxml.com/models/qwen3-next-80b-a3b (vocab 151936)",
        ),
        notes="shared expert intermediate assumed = 512 (the card gives the count, not the size)"),
    "qwen3-235b-a22b": dict(
        n_layers=94, vocab=151936, n_full_attn_layers=94, n_q_heads=64, n_kv_heads=4, head_dim=128,
        sources=(
            "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/qwen3_235b_a22b.yaml (94 layers, H 4096, 64 heads / 4 groups, kv_channels 128, 128 experts top-8, moe_ffn 1536, vocab 151936, untied)",
            "https://www.pythonalchemist.com/llm-architectures/qwen-3-235b-a22b (no shared expert)",
        )),
    "gpt-oss-120b": dict(
        n_layers=36, vocab=201088, n_full_attn_layers=18, n_sliding_attn_layers=18,
        sliding_window=128, n_q_heads=64, n_kv_heads=8, head_dim=64,
        sources=(
            "https://docs.nvidia.com/nemo/megatron-bridge/nightly/models/llm/gpt-oss.html (36 layers, 128 experts top-4, H 2880, FFN 2880, 64 Q heads, 8 KV groups, kv_channels 64, vocab 201088, window 128 alternating)",
        ),
        notes="MXFP4 experts, bf16 attention (OpenAI release); alternating layers assumed 18 full + 18 sliding"),
}


def _build(name: str) -> ModelConfig:
    from sm120lab.moe.problem import PRESETS as MOE_PRESETS

    moe = MOE_PRESETS[name]
    return ModelConfig(name=name, hidden=moe.H, moe_intermediate=moe.I, n_experts=moe.E,
                       top_k=moe.k, **_ARCH[name])


PRESETS: dict[str, ModelConfig] = {name: _build(name) for name in _ARCH}


def get_model(name: str) -> ModelConfig:
    """The preset called ``name`` (case-insensitive)."""
    if not isinstance(name, str):
        raise TypeError(f"model must be a preset name (str), got {type(name).__name__}")
    key = name.lower()
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[key]
