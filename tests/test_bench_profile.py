"""The kernel breakdown of sm120lab.bench.profile: per-layer calls and µs from profiler events."""

import pytest

from sm120lab.bench.profile import aggregate_kernels


def test_per_layer_counts_and_times_slowest_first():
    iters = 4
    events = [("w13", 10.0), ("w2sum", 3.0)] * iters + [("sort", 1.0)] * (2 * iters)
    out = aggregate_kernels(events, iters)
    assert [k["kernel"] for k in out["kernels"]] == ["w13", "w2sum", "sort"]
    by = {k["kernel"]: k for k in out["kernels"]}
    assert by["w13"]["us_per_layer"] == pytest.approx(10.0)
    assert by["sort"]["calls_per_layer"] == 2 and by["sort"]["us_per_layer"] == pytest.approx(2.0)
    assert out["kernel_us"] == pytest.approx(15.0) and out["iters"] == iters


def test_iters_must_be_positive():
    with pytest.raises(ValueError, match="iters"):
        aggregate_kernels([("k", 1.0)], 0)
