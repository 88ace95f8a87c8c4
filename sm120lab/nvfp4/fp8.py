"""FP8 E4M3 with one fp32 scale per row: the format of the FP8 grouped-GEMM contender and of the
FP8 weight variant of the correctness harness.

    scale[e, n] = max(amax(w[e, n, :]) / 448, 1e-12),    q = e4m3(w / scale),    w ~= q * scale

(448 is E4M3's largest finite value.)
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def fp8_rowwise(w: torch.Tensor, chunk: int = 32):
    """bf16 [E, N, K] -> (fp8 e4m3 [E, N, K], fp32 scale [E, N]) with w ~= fp8 * scale per row.

    Args:
        w: the weights, [E, N, K] (any float dtype).
        chunk: experts converted at a time (bounds the fp32 temporary).

    Returns:
        ``(q, scale)``: float8_e4m3fn codes and the fp32 row scales.
    """
    e = w.shape[0]
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    s = torch.empty(w.shape[:2], dtype=torch.float32, device=w.device)
    for i in range(0, e, chunk):
        part = w[i:i + chunk].float()
        sc = (part.abs().amax(dim=-1) / E4M3_MAX).clamp_min(1e-12)
        q[i:i + chunk] = (part / sc.unsqueeze(-1)).to(torch.float8_e4m3fn)
        s[i:i + chunk] = sc
    return q, s
