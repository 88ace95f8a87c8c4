"""The two ceilings every benchmark number is divided by, measured in the same run.

- copy bandwidth: ``dst.copy_(src)`` on 2 GiB bf16 buffers, bytes read + written over time;
- bf16 dense matmul: 8192^3 ``torch.mm`` on random data (2*M*N*K flops over time).
Both with CUDA events after warm-up, median of ``reps`` (METHOD.md "Two numbers first").
"""

from __future__ import annotations

import torch

from .timing import time_calls


def measure_copy_gbps(nbytes: int = 2 << 30, reps: int = 30) -> dict:
    n = nbytes // 2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = time_calls([lambda: dst.copy_(src)], reps=reps, warmup=3)
    gbps = 2 * n * 2 / (t["us_median"] * 1e-6) / 1e9
    del src, dst
    torch.cuda.empty_cache()
    return {"copy_GBps": gbps, "copy_bytes": nbytes, **{f"copy_{k}": v for k, v in t.items()}}


def measure_bf16_tflops(n: int = 8192, reps: int = 30) -> dict:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = time_calls([lambda: torch.mm(a, b)], reps=reps, warmup=3)
    tflops = 2 * n ** 3 / (t["us_median"] * 1e-6) / 1e12
    del a, b
    torch.cuda.empty_cache()
    return {"bf16_TFLOPs": tflops, "mm_n": n, **{f"mm_{k}": v for k, v in t.items()}}
