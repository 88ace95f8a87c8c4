"""The two ceilings every benchmark number is divided by, measured in the same run.

- copy bandwidth: ``dst.copy_(src)`` on 2 GiB bf16 buffers, (bytes read + bytes written) / time;
- bf16 dense matmul: 8192^3 ``torch.mm`` on random data, 2*M*N*K / time.
Both timed with ``triton.testing.do_bench`` (median after warm-up), in the same process as the numbers they divide.
"""

from __future__ import annotations

import torch


def measure_copy_gbps(nbytes: int = 2 << 30) -> dict:
    from triton.testing import do_bench

    n = nbytes // 2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    us = do_bench(lambda: dst.copy_(src), warmup=20, rep=200, return_mode="median") * 1000.0
    return {"copy_GBps": 2 * n * 2 / (us * 1e-6) / 1e9, "copy_bytes": nbytes, "copy_us_median": us}


def measure_bf16_tflops(n: int = 8192) -> dict:
    from triton.testing import do_bench

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    us = do_bench(lambda: torch.mm(a, b), warmup=20, rep=200, return_mode="median") * 1000.0
    return {"bf16_TFLOPs": 2 * n ** 3 / (us * 1e-6) / 1e12, "mm_n": n, "mm_us_median": us}
