"""Where a layer's time goes: its GPU kernels, one by one, from ``torch.profiler``.

For a callable ``fn`` (one MoE layer call) run ``iters`` times under the profiler after one warm-up call,
each kernel name ``n`` gets

    calls_per_layer(n) = (number of launches of n) / iters
    us_per_layer(n)    = (sum of n's device durations) / iters

and ``kernel_us`` is the sum of ``us_per_layer`` over all kernels. Against the layer's CUDA-graph time
``graph_us`` (:mod:`.timing`), ``graph_us - kernel_us`` is the time no kernel of the layer ran: the gaps
between kernels of one graph (launch latency, the tail of one kernel before the next starts). A kernel's
bytes over its ``us_per_layer`` give its own bandwidth, free of those gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def aggregate_kernels(events: Iterable[tuple[str, float]], iters: int) -> dict:
    """``(kernel name, device duration in µs)`` pairs of ``iters`` layer calls -> the per-layer breakdown.

    Args:
        events: one pair per kernel launch.
        iters: how many layer calls the events cover (>= 1).

    Returns:
        ``{"kernels": [{"kernel", "calls_per_layer", "us_per_layer"}, ...] (slowest first),
        "kernel_us": float, "iters": int}``.
    """
    if iters < 1:
        raise ValueError(f"iters: expected >= 1, got {iters}")
    acc: dict[str, list[float]] = {}
    for name, us in events:
        a = acc.setdefault(name, [0, 0.0])
        a[0] += 1
        a[1] += float(us)
    rows = [{"kernel": n, "calls_per_layer": c / iters, "us_per_layer": t / iters} for n, (c, t) in acc.items()]
    rows.sort(key=lambda r: -r["us_per_layer"])
    return {"kernels": rows, "kernel_us": sum(r["us_per_layer"] for r in rows), "iters": iters}


def kernel_breakdown(fn: Callable[[], object], iters: int = 20) -> dict:
    """Profile ``iters`` eager calls of ``fn`` on the current CUDA device -> :func:`aggregate_kernels`.

    Args:
        fn: one layer call (its inputs bound).
        iters: calls profiled after one warm-up call.

    Returns:
        :func:`aggregate_kernels`'s dict (device-side kernel durations; memcpy/memset included by name).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    events = []
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            events.append((ev.name, ev.time_range.elapsed_us()))
    return aggregate_kernels(events, iters)
