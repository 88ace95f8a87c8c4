"""Constants shared across the package: each is defined here once and imported everywhere else.

Sources:
- ``SM120_SMEM_LIMIT``: ``cudaDevAttrMaxSharedMemoryPerBlockOptin`` on SM120/SM121 (99 KiB = 101,376 B);
  CUTLASS ``include/cutlass/arch/arch.h`` ``sm120_smem_capacity_bytes``.
- ``SENTINEL``: the poison value written into every output buffer before a kernel runs, so an element
  the kernel never wrote shows up as ``-2**127`` (finite in fp32 and bf16, far outside any real output).
"""

from __future__ import annotations

SM120_SMEM_LIMIT: int = 101_376
"""Largest opt-in dynamic shared memory per block on SM120/SM121, in bytes."""

SENTINEL: float = -(2.0**127)
"""Poison value for output buffers: ``-2**127``."""
