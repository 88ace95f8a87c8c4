"""The correctness harness: correct backends pass on every routing; planted faults are caught and
localized to the right experts/tokens; the sentinel catches untouched output."""

import importlib
import json

import numpy as np
import pytest
import torch

from sm120lab.moe import ROUTINGS, make_moe_problem
from sm120lab.moe.backends import Backend, Needs, all_backends
from sm120lab.moe.faults import FAULTS, judge_fault
from sm120lab.moe.harness import check
from sm120lab.moe.verdict import SHARED_CELL_SHARE, Verdict


@pytest.mark.parametrize("routing", ROUTINGS)
def test_correct_backends_pass_every_routing(routing, seed):
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    res = check(p, ["reference", "emulated-w4a4", "torch-bf16"])
    msg = f"seed {seed}: {res.table()}"
    assert {r.verdict for r in res.reports.values()} == {Verdict.CORRECT}, msg
    assert all(r.flagged_tokens == [] and r.flagged_experts == [] for r in res.reports.values()), msg
    assert res.reports["reference"].diff.rel_fro == 0.0
    env = res.envelope
    assert 0 < env.e_a < env.garbage_rel and env.correct_rel < env.garbage_rel + 1e-12, msg
    # 16-bit activations are far inside the W4A4 band
    assert res.reports["torch-bf16"].diff.rel_fro < env.e_a / 5, msg
    assert not res.any_garbage


#: the planted faults of the first rounds that break something on every problem; the off-by-one offset is
#: applicable only where some group's last cell can move to an expert its token does not use (a lone token
#: routed to experts E-2 and E-1 has none), checked separately below
ALWAYS_APPLICABLE = tuple(c for c in FAULTS[:11] if c.__name__ != "OffByOneOffsets")


@pytest.mark.parametrize("routing", ROUTINGS)
def test_planted_faults_caught_and_localized(routing, seed):
    """Every planted fault: garbage, and exactly its experts AND its tokens flagged (every broken cell);
    "all experts" faults also called shared where >= 3 experts are routed; a routing fault that moves
    no token beyond the mixing resolution (e.g. one hot expert holding all the weight) flags nothing."""
    p = make_moe_problem("tiny", routing=routing, seed=seed)
    faults = [cls() for cls in FAULTS]
    res = check(p, faults, keep_output=False)
    for f in faults:
        rep = res.reports[f.name]
        out = judge_fault(f, p, rep)
        ctx = f"{f.name} routing={routing} seed={seed}: {out} {rep.reasons} {rep.flagged_experts} {rep.flagged_tokens}"
        assert out.exact, ctx
        if out.applicable:
            assert rep.verdict == Verdict.GARBAGE, ctx
            assert set(rep.flagged_tokens) == f.expected_tokens(p), ctx
        if type(f).__name__ == "OffByOneOffsets":
            assert out.applicable == (f._target(p) is not None), ctx
        if type(f) in ALWAYS_APPLICABLE:
            assert out.applicable and set(rep.flagged_experts) == (
                set(p.topk_ids.reshape(-1).tolist()) if f.shared else f.expected_experts(p)), ctx


class _HalfWriter(Backend):
    """Writes the reference into the first half of the rows only (a kernel that skips tiles)."""

    name, needs, out_dtype, numerics = "half-writer", Needs(), torch.float64, "exact"

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference

        ref = moe_reference(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2)
        half = problem.tokens // 2
        out[:half] = ref[:half]


def test_sentinel_catches_untouched_rows(seed):
    p = make_moe_problem("tiny", tokens=10, seed=seed)
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


def test_errors_and_skips_are_one_line(seed):
    p = make_moe_problem("tiny", tokens=4, seed=seed)
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
def test_torch_bf16_on_gpu_small_preset(seed):
    p = make_moe_problem("small", tokens=64, seed=seed, device="cuda")
    res = check(p, ["reference", "emulated-w4a4", "torch-bf16"])
    assert res.reports["torch-bf16"].verdict == "correct", res.table()


def test_error_matrix_and_plots(seed):
    import matplotlib

    matplotlib.use("Agg")
    from sm120lab.moe.faults import ZeroedGroup
    from sm120lab.moe.plots import error_matrix, plot_expert_bars, plot_heatmap, plot_histograms

    p = make_moe_problem("tiny", tokens=12, routing="sparse", seed=seed)
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


class _CellBug(Backend):
    """The reference with chosen per-slot outputs altered (main run and probes alike), fp64."""

    needs, out_dtype, numerics = Needs(), torch.float64, "exact"

    def __init__(self, name, alter):
        self.name, self.alter = name, alter

    def run(self, problem, out):
        from sm120lab.moe.reference import moe_reference_slots

        slots = moe_reference_slots(problem.hidden, problem.topk_ids, problem.w13, problem.w2)
        w = self.alter(problem, slots, problem.topk_weights.double().clone())
        out.copy_((slots * w.unsqueeze(-1)).sum(1))


def _experts_of(p, tokens):
    return {int(e) for t in tokens for e in p.topk_ids[t].tolist()}


def test_all_zero_output_row_flags_its_token(seed):
    """An all-zero row has error exactly 1.0 vs the reference: it must still name its token."""
    p = make_moe_problem("tiny", tokens=12, seed=seed, device="cpu")
    t0 = seed % p.tokens

    def zero_row(problem, slots, w):
        slots[t0] = 0.0
        return w

    rep = check(p, [_CellBug("zero-row", zero_row)]).reports["zero-row"]
    assert rep.verdict == Verdict.GARBAGE, rep.reasons
    assert rep.flagged_tokens == [t0] and set(rep.flagged_experts) == _experts_of(p, [t0]), rep.reasons


def test_one_broken_cell_flags_its_expert_and_its_token(seed):
    """A fault in one (token, expert) cell, seen only in the per-slot probes' cells, names both."""
    p = make_moe_problem("tiny", tokens=16, routing="zipf", seed=seed, device="cpu")
    t0, j0 = seed % p.tokens, (seed // p.tokens) % p.config.k

    def negate_cell(problem, slots, w):
        slots[t0, j0] = -slots[t0, j0]
        return w

    rep = check(p, [_CellBug("one-cell", negate_cell)]).reports["one-cell"]
    assert rep.verdict == Verdict.GARBAGE, rep.reasons
    assert rep.flagged_experts == [int(p.topk_ids[t0, j0])], rep.reasons
    assert rep.flagged_tokens == [t0], rep.reasons


def test_mixing_error_at_top2_names_every_affected_token(seed):
    """Routing weights applied to the wrong slot (top-k = 2) for some tokens: all of them named."""
    p = make_moe_problem("tiny", tokens=24, seed=seed, device="cpu")
    g = torch.Generator().manual_seed(seed)
    mixed = sorted(torch.randperm(p.tokens, generator=g)[:5].tolist())

    def swap_weights(problem, slots, w):
        w[mixed] = w[mixed].flip(-1)
        return w

    rep = check(p, [_CellBug("mixed-weights", swap_weights)]).reports["mixed-weights"]
    assert rep.verdict == Verdict.GARBAGE, rep.reasons
    assert rep.flagged_tokens == mixed, rep.reasons
    experts = _experts_of(p, mixed)
    if rep.shared:
        # the documented rule (sm120lab.moe.verdict, SHARED_CELL_SHARE): when the deviating experts hold nearly
        # every routed cell, the harness cannot single them out and names every routed expert. CI seed 588494009
        # drew it: the 5 mixed tokens touch 6 of 7 routed experts, 97.9% of the cells; expert 1 has one cell.
        ids = p.topk_ids.reshape(-1)
        share = sum(int((ids == e).sum()) for e in experts) / ids.numel()
        assert share >= SHARED_CELL_SHARE, (share, rep.reasons)
        assert set(rep.flagged_experts) == {int(e) for e in ids.unique()}, rep.reasons
    else:
        assert set(rep.flagged_experts) == experts, rep.reasons


def test_every_verdict_records_its_seed_and_replays(seed):
    from sm120lab.cmdline import command_line

    p = make_moe_problem("tiny", tokens=9, routing="hot", seed=seed, device="cpu").take_tokens(5)
    res = check(p, ["reference", "torch-bf16"])
    doc = res.to_json()
    assert doc["problem"]["seed"] == seed and {b["seed"] for b in doc["backends"]} == {seed}
    assert {row["seed"] for row in res.table()} == {seed}
    assert doc["replay"] == command_line("sm120lab", ["check", "--preset", "tiny", "--routing", "hot", "--seed",
                                                      str(seed), "--device", "cpu", "--tokens", "9",
                                                      "--take-tokens", "5"])
    again = make_moe_problem("tiny", tokens=9, routing="hot", seed=seed, device="cpu").take_tokens(5)
    assert torch.equal(again.hidden, p.hidden) and torch.equal(again.topk_ids, p.topk_ids)


def test_default_device_is_the_gpu_when_there_is_one(monkeypatch):
    from sm120lab.moe.harness import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == "cpu"
    assert make_moe_problem("tiny", tokens=2, device=None).device.type == "cpu"


@pytest.mark.parametrize("seed_", [1046938220, 1637259727])  # tiny zipf problems with e_a = 0.43, 0.35
def test_garbage_limit_stays_above_the_correct_band(seed_):
    """With 1.25 e_a the garbage limit fell below the correct band (1.5 e_a) once e_a > 1/3."""
    p = make_moe_problem("tiny", routing="zipf", seed=seed_, device="cpu")
    res = check(p, ["reference", "emulated-w4a4", "torch-bf16"], keep_output=False)
    env = res.envelope
    assert env.e_a > 1 / 3 and env.garbage_rel >= 2 * env.e_a > env.correct_rel
    assert {r.verdict for r in res.reports.values()} == {Verdict.CORRECT}
