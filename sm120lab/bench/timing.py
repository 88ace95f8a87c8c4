"""Timing on a CUDA device: CUDA events around every repetition, after warm-up; median and
10th/90th percentiles (METHOD.md: events, warm-up, median of many runs).

``time_calls(fns, ...)`` cycles through a list of callables (one per input set, e.g. different
routings) so that repeated runs do not re-read the same weights from L2. ``graphed(fn)`` captures
``fn`` in a CUDA graph and returns its replay (removes Python launch gaps; used where capturable).
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import torch


def percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of an empty list")
    i = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[i]


def time_calls(fns: Sequence[Callable[[], object]], *, reps: int = 50, warmup: int = 5) -> dict:
    """Median/p10/p90 microseconds of one call, cycling through ``fns``."""
    if not fns:
        raise ValueError("fns must hold at least one callable")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    us = [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]
    return {"us_median": statistics.median(us), "us_p10": percentile(us, 10), "us_p90": percentile(us, 90),
            "n_reps": reps}


def graphed(fn: Callable[[], object], warmup: int = 2) -> Callable[[], None]:
    """Capture ``fn`` (static inputs) in a CUDA graph; return a callable that replays it."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g.replay
