"""The correctness harness: correct backends pass on every routing; planted faults are caught and
localized to the right experts/tokens; the sentinel catches untouched output."""

import importlib
import json
import os

import numpy as np
import pytest
import torch

from sm120lab.moe import ROUTINGS, make_moe_problem
from sm120lab.moe.backends import Backend, Needs, all_backends
from sm120lab.moe.faults import FAULTS
from sm120lab.moe.harness import check


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.mark.parametrize("routing", ROUTINGS)
def test_correct_backends_pass_every_routing(routing):
    seed = _seed()
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    res = check(p, ["reference", "emulated-w4a4", "torch-bf16"])
    msg = f"seed {seed}: {res.table()}"
    assert {r.verdict for r in res.reports.values()} == {"correct"}, msg
    assert res.reports["reference"].diff.rel_fro == 0.0
    env = res.envelope
    assert 0 < env.e_a < env.garbage_rel and env.correct_rel < env.garbage_rel + 1e-12, msg
    # 16-bit activations are far inside the W4A4 band
    assert res.reports["torch-bf16"].diff.rel_fro < env.e_a / 5, msg
    assert not res.any_garbage


@pytest.mark.parametrize("routing", ROUTINGS)
def test_planted_faults_caught_and_localized(routing):
    seed = _seed()
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    faults = [cls() for cls in FAULTS]
    res = check(p, faults, keep_output=False)
    for f in faults:
        rep = res.reports[f.name]
        ctx = f"{f.name} routing={routing} seed={seed}: {rep.reasons}"
        assert rep.verdict == "garbage", ctx
        assert set(rep.flagged_experts) == f.expected_experts(p), ctx
        tokens = f.expected_tokens(p)
        if tokens is not None:
            assert set(rep.flagged_tokens) == tokens, ctx


class _HalfWriter(Backend):
    """Writes the reference into the first half of the rows only (a kernel that skips tiles)."""

    name, needs, out_dtype, numerics = "half-writer", Needs(), torch.float64, "exact"

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference

        ref = moe_reference(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2)
        half = problem.tokens // 2
        out[:half] = ref[:half]


def test_sentinel_catches_untouched_rows():
    p = make_moe_problem("tiny", tokens=10, seed=_seed())
    rep = check(p, [_HalfWriter()]).reports["half-writer"]
    assert rep.verdict == "garbage"
    assert rep.diff.untouched == 5 * p.config.H
    assert set(rep.flagged_tokens) == set(range(5, 10))
    assert np.all(np.isfinite(rep.diff.per_token[:5])) and rep.diff.per_token[:5].max() == 0.0


class _Raiser(Backend):
    name, needs, numerics = "raiser", Needs(), "w4a16"

    def run(self, problem, out):
        raise RuntimeError("kernel launch failed\nsecond line")


class _NeedsGpu(Backend):
    name, needs = "needs-gpu", Needs(device="cuda", capabilities=(12,))


def test_errors_and_skips_are_one_line():
    p = make_moe_problem("tiny", tokens=4, seed=_seed())
    res = check(p, [_Raiser(), _NeedsGpu()])
    assert res.reports["raiser"].verdict == "error"
    assert res.reports["raiser"].reason == "RuntimeError: kernel launch failed"
    assert res.reports["needs-gpu"].verdict == "skipped" and "\n" not in res.reports["needs-gpu"].reason
    json.dumps(res.to_json(), allow_nan=False)  # strict JSON


def test_registry_lists_required_backends_and_cpu_skip_reasons():
    names = set(all_backends())
    assert {"reference", "emulated-w4a4", "torch-bf16", "flashinfer-cutlass", "flashinfer-sm12x-w4a4",
            "vllm-marlin", "vllm-cutlass-fp4"} <= names
    for b in all_backends().values():
        reason = b.skip_reason("cpu")
        if b.needs.device == "cuda":
            assert reason and "\n" not in reason
        if not b.verified:  # real code for hardware we cannot run says so
            assert "unverified on sm120 hardware" in importlib.import_module(type(b).__module__).__doc__.lower()
            assert "unverified on SM120 hardware" in b.summary


@pytest.mark.gpu
def test_torch_bf16_on_gpu_small_preset():
    p = make_moe_problem("small", tokens=64, seed=_seed(), device="cuda")
    res = check(p, ["reference", "emulated-w4a4", "torch-bf16"])
    assert res.reports["torch-bf16"].verdict == "correct", res.table()


def test_error_matrix_and_plots():
    import matplotlib

    matplotlib.use("Agg")
    from sm120lab.moe.faults import ZeroedGroup
    from sm120lab.moe.plots import error_matrix, plot_expert_bars, plot_heatmap, plot_histograms

    p = make_moe_problem("tiny", tokens=12, routing="sparse", seed=_seed())
    fault = ZeroedGroup()
    res = check(p, ["torch-bf16", fault])
    rep = res.reports[fault.name]
    m = error_matrix(rep, p.config.E)
    assert m.shape == (p.config.E, p.tokens)
    assert int(np.isfinite(m).sum()) == p.tokens * p.config.k  # one entry per routed cell
    (target,) = fault.expected_experts(p)
    routed = np.isfinite(m[target])
    vals = m[target][routed]  # zeroed group: ||0 - twin|| / max(||twin||, floor) is in (0, 1]
    assert np.all((vals > 0) & (vals <= 1 + 1e-12)) and np.any(np.isclose(vals, 1.0))
    assert rep.cells.zero[rep.cells.ids == target].all() and not rep.cells.zero[rep.cells.ids != target].any()
    others = np.delete(m, target, axis=0)
    assert np.nanmax(others) < 1e-9
    for fig in (plot_heatmap(res), plot_expert_bars(res), plot_histograms(res)):
        assert fig is not None and len(fig.axes) >= 1
    with pytest.raises(ValueError, match="kind"):
        error_matrix(rep, p.config.E, kind="abs")
