"""Model shapes that decide the bytes and FLOPs of one decoded token.

One :class:`ModelConfig` per preset name of ``sm120lab.moe.problem``. The MoE block's shape
(E, k, H, I) is taken from that module's ``PRESETS`` (the single source for it); the attention /
linear-attention / layer / vocabulary fields are not in the MoE presets, so they live here
(``_ARCH``), each preset with the public pages it was read from (``sources``).

Layer kinds: the model counts its layers of each kind; one record per kind holds the layer's shape
and the formulas that follow from it.

- full attention (GQA), :class:`Attention`: q/k/v/o projections; with ``output_gate`` the q
  projection also produces a per-head gate (Qwen3-Next / Qwen3.5 "Gated Attention": q_proj out =
  2 * nq * hd); reads ``2 * kv_heads * head_dim`` cache values per past token.
- sliding-window attention (gpt-oss): the same :class:`Attention` shape, reads at most
  ``sliding_window`` past tokens.
- Gated DeltaNet linear attention (Qwen3-Next / Qwen3.5), :class:`GatedDeltaNet`: projections
  in_proj_qkvz (H -> 2*nk*dk + 2*nv*dv), in_proj_ba (H -> 2*nv), a depthwise conv1d
  (kernel ``conv_kernel`` over 2*nk*dk + nv*dv channels), out_proj (nv*dv -> H); a
  recurrent state of nv * dk * dv values per sequence that each decoded token reads and writes.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field


@dataclass(frozen=True)
class Attention:
    """The shape of one softmax-attention (GQA) layer, full or sliding-window; all zeros: none.

    Args:
        q_heads: query heads nq.
        kv_heads: key/value heads nkv.
        head_dim: hd, of queries, keys and values alike.
        output_gate: the q projection also produces a per-head gate (q_proj out = 2 * nq * hd).
    """

    q_heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    output_gate: bool = False

    def params(self, hidden: int) -> int:
        """Weights of q/k/v/o: ``H * (nq*hd*(1 + gate) + 2*nkv*hd) + nq*hd * H``."""
        q_out = self.q_heads * self.head_dim * (2 if self.output_gate else 1)
        kv_out = 2 * self.kv_heads * self.head_dim
        o_in = self.q_heads * self.head_dim
        return hidden * (q_out + kv_out) + o_in * hidden

    @property
    def kv_values_per_token(self) -> int:
        """Cache values a decoded token reads per past token: ``2 * nkv * hd`` (K and V)."""
        return 2 * self.kv_heads * self.head_dim


@dataclass(frozen=True)
class GatedDeltaNet:
    """The shape of one Gated DeltaNet linear-attention layer; all zeros: none.

    Args:
        qk_heads: query/key heads nk.
        v_heads: value heads nv.
        qk_head_dim: dk.
        v_head_dim: dv.
        conv_kernel: width of the depthwise causal conv1d over the q, k and v channels.
    """

    qk_heads: int = 0
    v_heads: int = 0
    qk_head_dim: int = 0
    v_head_dim: int = 0
    conv_kernel: int = 0

    def params(self, hidden: int) -> int:
        """Weights of in_proj_qkvz (H -> 2*nk*dk + 2*nv*dv), in_proj_ba (H -> 2*nv), the conv and out_proj."""
        qk = self.qk_heads * self.qk_head_dim
        v = self.v_heads * self.v_head_dim
        in_proj = hidden * (2 * qk + 2 * v + 2 * self.v_heads)
        conv = (2 * qk + v) * self.conv_kernel
        out_proj = v * hidden
        return in_proj + conv + out_proj

    @property
    def state_values(self) -> int:
        """Recurrent state values per sequence: ``nv * dk * dv``."""
        return self.v_heads * self.qk_head_dim * self.v_head_dim

    @property
    def conv_state_values(self) -> int:
        """Conv1d state values per sequence: ``(2*nk*dk + nv*dv) * (kernel - 1)`` past inputs."""
        return (2 * self.qk_heads * self.qk_head_dim + self.v_heads * self.v_head_dim) * max(self.conv_kernel - 1, 0)


@dataclass(frozen=True)
class ModelConfig:
    """One decoder: its MoE block, how many layers of each attention kind, and each kind's shape."""

    name: str
    hidden: int                      # H
    moe_intermediate: int            # I (per routed expert)
    n_experts: int                   # E
    top_k: int                       # k
    n_layers: int                    # decoder layers, each with one MoE block
    vocab: int
    n_shared_experts: int = 0
    shared_intermediate: int = 0
    n_full_attn_layers: int = 0
    n_sliding_attn_layers: int = 0
    sliding_window: int = 0          # past tokens a sliding-window layer reads at most
    attention: Attention = Attention()  # shape of the full and sliding layers
    n_linear_attn_layers: int = 0
    linear: GatedDeltaNet = GatedDeltaNet()
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
        for what, layers, shape in (("softmax attention", self.n_full_attn_layers + self.n_sliding_attn_layers,
                                     self.attention), ("Gated DeltaNet", self.n_linear_attn_layers, self.linear)):
            if layers and not all(v > 0 for v in astuple(shape) if type(v) is int):
                raise ValueError(f"{self.name}: {layers} {what} layers need every head count and size of "
                                 f"that layer positive, got {shape}")

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
        return self.attention.params(self.hidden)

    @property
    def linear_attn_params_per_layer(self) -> int:
        return self.linear.params(self.hidden)

    @property
    def n_attn_weight_layers(self) -> int:
        return self.n_full_attn_layers + self.n_sliding_attn_layers

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def _params(self, experts_per_layer: int, vocab_tables: int) -> int:
        """``L * (experts_per_layer * 3HI + shared + router) + attention + linear attention
        + vocab_tables * V*H``."""
        return (self.n_layers * (experts_per_layer * self.expert_params + self.shared_params_per_layer
                                 + self.router_params_per_layer)
                + self.n_attn_weight_layers * self.full_attn_params_per_layer
                + self.n_linear_attn_layers * self.linear_attn_params_per_layer
                + vocab_tables * self.lm_head_params)

    def active_params(self) -> int:
        """Parameters a single token multiplies with: top_k experts per layer and the lm_head
        (the embedding lookup multiplies nothing)."""
        return self._params(self.top_k, 1)

    def total_params(self) -> int:
        """All weights: every expert, the lm_head and an untied embedding table."""
        return self._params(self.n_experts, 2)

    @property
    def moe_shape(self) -> dict[str, int]:
        return {"E": self.n_experts, "k": self.top_k, "H": self.hidden, "I": self.moe_intermediate}


_QWEN35_CARD = "https://huggingface.co/Qwen/Qwen3.5-397B-A17B (model card; read via the pages below)"
_QWEN3NEXT_CARD = "https://lmstudio.ai/models/qwen3-next (reproduces the Qwen/Qwen3-Next-80B-A3B-Instruct card)"



def _qwen_hybrid(n_layers: int, q_heads: int, v_heads: int) -> dict:
    """The Qwen3-Next / Qwen3.5 layer layout: n_layers/4 x (3 Gated DeltaNet + 1 gated attention), the
    attention with 2 KV heads of 256, the Gated DeltaNet with 16 QK heads, head dims 128, conv kernel 4;
    the sizes differ only in ``q_heads`` and ``v_heads`` (see each preset's sources)."""
    return dict(n_layers=n_layers, n_full_attn_layers=n_layers // 4, n_linear_attn_layers=n_layers - n_layers // 4,
                attention=Attention(q_heads=q_heads, kv_heads=2, head_dim=256, output_gate=True),
                linear=GatedDeltaNet(qk_heads=16, v_heads=v_heads, qk_head_dim=128, v_head_dim=128, conv_kernel=4))


_ARCH: dict[str, dict] = {
    "qwen3.5-397b-a17b": dict(
        **_qwen_hybrid(n_layers=60, q_heads=32, v_heads=64), vocab=248320, n_shared_experts=1,
        shared_intermediate=1024,
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
        **_qwen_hybrid(n_layers=48, q_heads=16, v_heads=32), vocab=151936, n_shared_experts=1,
        shared_intermediate=512,
        sources=(
            _QWEN3NEXT_CARD + " (H=2048, 48 layers = 12 x (3 GDN + 1 attention), 16 Q / 2 KV x 256, GDN 32 V / 16 QK x 128, 512 experts top-10 + 1 shared, expert I=512)",
            "https://apxml.com/models/qwen3-next-80b-a3b (vocab 151936)",
        ),
        notes="shared expert intermediate assumed = 512 (the card gives the count, not the size)"),
    "qwen3-235b-a22b": dict(
        n_layers=94, vocab=151936, n_full_attn_layers=94, attention=Attention(q_heads=64, kv_heads=4, head_dim=128),
        sources=(
            "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/qwen3_235b_a22b.yaml (94 layers, H 4096, 64 heads / 4 groups, kv_channels 128, 128 experts top-8, moe_ffn 1536, vocab 151936, untied)",
            "https://www.pythonalchemist.com/llm-architectures/qwen-3-235b-a22b (no shared expert)",
        )),
    "gpt-oss-120b": dict(
        n_layers=36, vocab=201088, n_full_attn_layers=18, n_sliding_attn_layers=18,
        sliding_window=128, attention=Attention(q_heads=64, kv_heads=8, head_dim=64),
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
