"""Run the probes this GPU supports and check their numbers (skipped without a GPU)."""

import pytest


@pytest.mark.gpu
def test_gpu_probes_pass():
    from sm120lab.archflags.gpu_run import run_gpu_probes
    res = run_gpu_probes(seed=1)
    assert res["available"]
    failed = [r for r in res["results"] if not r.get("ok")]
    assert not failed, failed
