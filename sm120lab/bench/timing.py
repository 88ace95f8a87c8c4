"""Timing on a CUDA device with Triton's own benchmark helpers.

- :func:`time_graph`: ``triton.testing.do_bench_cudagraph`` (the calls captured in one CUDA graph,
  replayed; no Python launch gaps) -- the numbers the targets use.
- :func:`time_eager`: ``triton.testing.do_bench`` (events around each call, L2 flushed between
  calls; includes the Python launch cost of every kernel).

What this module adds to them, and why it exists: both take a *list* of callables (one per input
set, e.g. different routings) and time one pass over the whole list, divided by its length, so
that repeated calls read different experts' weights instead of re-reading one set from L2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

QUANTILES = (0.5, 0.1, 0.9)


def _cycle(fns: Sequence[Callable[[], object]]) -> Callable[[], None]:
    if not fns:
        raise ValueError("fns must hold at least one callable")

    def run_all() -> None:
        for f in fns:
            f()

    return run_all


def _result(ms: list[float], n: int, mode: str) -> dict:
    med, p10, p90 = (x * 1000.0 / n for x in ms)
    return {"us_median": med, "us_p10": p10, "us_p90": p90, "calls_per_pass": n, "timing": mode}


def time_graph(fns: Sequence[Callable[[], object]], rep_ms: int = 40) -> dict:
    """Median/p10/p90 microseconds of one call, from CUDA-graph replays of a pass over ``fns``."""
    from triton.testing import do_bench_cudagraph

    ms = do_bench_cudagraph(_cycle(fns), rep=rep_ms, quantiles=list(QUANTILES))
    return _result(ms, len(fns), "cuda_graph")


def time_eager(fns: Sequence[Callable[[], object]], rep_ms: int = 60) -> dict:
    """Median/p10/p90 microseconds of one call, eager launches (``do_bench``, L2 flushed per pass)."""
    from triton.testing import do_bench

    ms = do_bench(_cycle(fns), warmup=10, rep=rep_ms, quantiles=list(QUANTILES))
    return _result(ms, len(fns), "eager")
