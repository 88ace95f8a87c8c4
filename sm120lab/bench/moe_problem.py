"""A benchmark-sized MoE layer: random NVFP4 weights at a model's shape, drawn directly on the GPU.

Quantizing real-valued weights at qwen3.5-397b size (3.2 G elements per projection) would need
tens of GB of fp32 temporaries; timing does not depend on the values, so codes are uniform random
bytes, E4M3 block scales are drawn from the bit patterns 0x50..0x7E (8..448, the range
``gs * amax_b / 6`` takes), and per-expert global scales ``gs_e = 448*6/amax_e`` with amax_e
~ 0.05 * exp(0.3 z). Correctness at this shape is checked against ``moe_reference`` on the same
tensors (``scripts/h200_bench.py``). Routings: per token, top-k of N(0,1) logits (uniform load),
weights = softmax over the k chosen logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..nvfp4 import NVFP4Tensor, dequantize_nvfp4
from ..nvfp4.fp8 import fp8_rowwise  # noqa: F401 - also imported from here by sm120lab.moe.variants (to move)


def random_nvfp4_experts(e: int, n: int, k: int, *, device="cuda", gen: torch.Generator | None = None) -> NVFP4Tensor:
    """Random NVFP4 weights [e, n, k] (linear scales, per-expert global scale [e, 1])."""
    if k % 16:
        raise ValueError(f"k must be a multiple of 16, got {k}")
    data = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8, device=device, generator=gen)
    scale = torch.randint(0x50, 0x7F, (e, n, k // 16), dtype=torch.uint8, device=device, generator=gen)
    amax = 0.05 * torch.exp(0.3 * torch.randn(e, 1, device=device, generator=gen))
    gs = (448.0 * 6.0 / amax).float()
    return NVFP4Tensor(data=data, scale=scale.view(torch.float8_e4m3fn), global_scale=gs,
                       shape=torch.Size((e, n, k)), scale_layout="linear")


def uniform_routing(tokens: int, e: int, k: int, *, device="cuda", gen: torch.Generator | None = None):
    """(topk_ids int64 [T, k], topk_weights fp32 [T, k]): top-k of random logits, softmax over the k."""
    logits = torch.randn(tokens, e, device=device, generator=gen)
    vals, ids = torch.topk(logits, k, dim=-1)
    return ids, torch.softmax(vals, dim=-1).float()


def dequantize_to(q: NVFP4Tensor, dtype=torch.bfloat16, chunk: int = 32) -> torch.Tensor:
    """[E, N, K] NVFP4 -> dense ``dtype`` (exact values rounded once), ``chunk`` experts at a time."""
    e = q.shape[0]
    out = torch.empty(tuple(q.shape), dtype=dtype, device=q.data.device)
    gs = q.global_scale.reshape(-1)
    for i in range(0, e, chunk):
        j = min(e, i + chunk)
        part = NVFP4Tensor(data=q.data[i:j], scale=q.linear_scale()[i:j], global_scale=gs[i:j].reshape(-1, 1),
                           shape=torch.Size((j - i, *q.shape[1:])), scale_layout="linear")
        out[i:j] = dequantize_nvfp4(part).to(dtype)
    return out


@dataclass
class BenchLayer:
    """Weights of one MoE layer in every format the contenders use."""

    E: int
    k: int
    H: int
    I: int  # noqa: E741
    w13: NVFP4Tensor
    w2: NVFP4Tensor
    w13_bf16: torch.Tensor | None = None
    w2_bf16: torch.Tensor | None = None
    w13_fp8: tuple | None = None
    w2_fp8: tuple | None = None

    def nvfp4_bytes_per_expert(self, op: str) -> int:
        w13 = 2 * self.I * self.H // 2 + 2 * self.I * self.H // 16
        w2 = self.H * self.I // 2 + self.H * self.I // 16
        return {"moe": w13 + w2, "w13": w13, "w2": w2, "sort": 0}[op]

    def dense_bytes_per_expert(self, op: str, elem_bytes: int, scale_bytes_per_row: int = 0) -> int:
        w13 = 2 * self.I * self.H * elem_bytes + 2 * self.I * scale_bytes_per_row
        w2 = self.H * self.I * elem_bytes + self.H * scale_bytes_per_row
        return {"moe": w13 + w2, "w13": w13, "w2": w2, "sort": 0}[op]

    def flops(self, op: str, slots: int) -> float:
        w13 = 2.0 * slots * 2 * self.I * self.H
        w2 = 2.0 * slots * self.H * self.I
        return {"moe": w13 + w2, "w13": w13, "w2": w2, "sort": 0.0}[op]


def make_bench_layer(e: int, k: int, h: int, inter: int, *, seed: int = 0, bf16: bool = True, fp8: bool = True,
                     device="cuda") -> BenchLayer:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    layer = BenchLayer(E=e, k=k, H=h, I=inter, w13=random_nvfp4_experts(e, 2 * inter, h, device=device, gen=gen),
                       w2=random_nvfp4_experts(e, h, inter, device=device, gen=gen))
    if bf16 or fp8:
        layer.w13_bf16 = dequantize_to(layer.w13)
        layer.w2_bf16 = dequantize_to(layer.w2)
    if fp8:
        layer.w13_fp8 = fp8_rowwise(layer.w13_bf16)
        layer.w2_fp8 = fp8_rowwise(layer.w2_bf16)
    return layer
