"""False alarms and gates: correct-but-different backends are never garbage, planted faults always are
(caught and localized to experts and tokens), and ``sm120lab check`` fails when something it judges
crashed or never ran. The full sweep (>= 100 problems per preset x routing family) is recorded in
data/correctness/false_alarm_sweep.json; CI runs 48 tiny problems of it at a fixed seed (tests/conftest.py);
``make fresh-seeds`` runs it at fresh ones."""

import json

import numpy as np
import pytest
import torch

from sm120lab.moe import make_moe_problem
from sm120lab.moe.backends import Backend, Needs
from sm120lab.moe.harness import check
from sm120lab.moe.sweep import FAMILIES, false_alarm_sweep, problem_of
from sm120lab.moe.variants import FP8RowwiseWeights, all_variants
from sm120lab.moe.verdict import Verdict, pooled_deviation

#: problems per routing family in CI: 6 families x 8 = 48 tiny problems (the recorded sweep holds 100
#: per preset and family)
CI_PROBLEMS_PER_FAMILY = 8


def test_false_alarm_sweep_tiny(seed):
    """48 tiny problems (fixed seeds in CI, fresh under SM120LAB_FRESH_SEEDS=1): 0 false garbage, every planted
    fault caught and localized."""
    record = false_alarm_sweep(("tiny",), FAMILIES, CI_PROBLEMS_PER_FAMILY, seed)
    tot = record["totals"]
    assert tot["problems"] == len(FAMILIES) * CI_PROBLEMS_PER_FAMILY
    assert tot["false_garbage"] == 0 and tot["false_errors"] == 0, record["failures"][:5]
    assert tot["required_faults_not_localized"] == 0, record["failures"][:5]
    exact = sum(st["localized_exactly"] for st in tot["faults"].values())
    assert exact >= 0.99 * sum(st["of"] for st in tot["faults"].values()), tot["faults"]
    for name in ("reference", "emulated-w4a4", "torch-bf16", "variant-bf16-accumulate",
                 "variant-reversed-expert-order"):
        assert tot["verdicts"][name] == {"correct": tot["problems"]}, (name, tot["verdicts"][name])
    # more precise weights, other activation quantizers: never garbage
    for name in record["backends"]["correct"]:
        assert set(tot["verdicts"][name]) <= {"correct", "degraded"}, (name, tot["verdicts"][name])
    assert len([n for n in record["backends"]["correct"] if n.startswith("variant-act-")]) >= 5
    assert len(record["problems"]) == tot["problems"] and record["seeds"]["first"] == seed


#: tiny problems on which the fixed 0.5 cell limit judged FP8-rowwise weights ``garbage`` (found with
#: the pre-fix harness over seeds 0..19 of each routing: uniform 15, 17; zipf and hot 3, 12, 13, 15;
#: sparse 12, 13, 15)
FP8_FALSE_ALARMS = (("uniform", 15), ("zipf", 3), ("sparse", 13))


@pytest.mark.parametrize("routing, seed_", FP8_FALSE_ALARMS)
def test_more_precise_weight_format_is_a_format_mismatch_not_garbage(routing, seed_):
    p = make_moe_problem("tiny", routing=routing, seed=seed_, device="cpu")
    res = check(p, [FP8RowwiseWeights(), "torch-bf16"])
    rep = res.reports["variant-fp8-rowwise-weights"]
    assert rep.verdict == Verdict.DEGRADED and rep.format_mismatch, rep.reasons
    assert rep.reasons[0].startswith("weight-format mismatch") and not rep.flagged_tokens
    assert rep.cells.dev.max() > res.envelope.dev_garbage  # beyond the old fixed cell limit
    assert res.reports["torch-bf16"].verdict == Verdict.CORRECT and not res.reports["torch-bf16"].format_mismatch


def test_mostly_empty_routings_and_variants(seed):
    for s in range(seed, seed + 6):
        p = problem_of("tiny", "mostly-empty", s)
        assert int((p.expert_counts() == 0).sum()) >= p.config.E - 2 * p.tokens
        res = check(p, ["torch-bf16", *all_variants()])
        assert not res.any_garbage, (s, res.table())


# --- sm120lab check: gates ----------------------------------------------------------------------

class _Crash(Backend):
    name, needs, numerics = "test-crashing-backend", Needs(), "w4a16"

    def run(self, problem, out):
        raise RuntimeError("illegal memory access")


@pytest.fixture
def crashing_backend():
    from sm120lab.moe import backends

    b = backends.register(_Crash(), replace=True)
    yield b
    backends._REGISTRY.pop(b.name, None)


def test_check_exits_nonzero_when_a_backend_crashes(crashing_backend, capsys):
    from sm120lab.cli import main

    rc = main(["check", "--tokens", "4", "--device", "cpu", "--backend", "torch-bf16", "--backend", crashing_backend.name])
    assert rc == 1
    assert f"ERROR (backend crashed): {crashing_backend.name}" in capsys.readouterr().err


def test_check_exits_nonzero_when_every_backend_was_skipped(capsys):
    from sm120lab.cli import main

    gpu_only = [b for b, obj in __import__("sm120lab.moe.backends", fromlist=["x"]).all_backends().items()
                if obj.needs.device == "cuda"][:2]
    if torch.cuda.is_available() or not gpu_only:
        pytest.skip("needs a machine where the CUDA-only backends skip")
    args = ["check", "--tokens", "4", "--device", "cpu"] + [a for b in gpu_only for a in ("--backend", b)]
    assert main(args) == 1
    assert "every requested backend was skipped" in capsys.readouterr().err
    assert main(args + ["--allow-skips"]) == 0


def test_check_unwritable_json_is_one_line(tmp_path):
    from sm120lab.cli import main

    (tmp_path / "file.txt").write_text("x")
    for bad, word in ((tmp_path / "file.txt" / "out.json", "not a directory"), (tmp_path, "directory")):
        with pytest.raises(SystemExit) as exc:
            main(["check", "--tokens", "4", "--device", "cpu", "--backend", "reference", "--json", str(bad)])
        msg = str(exc.value)
        assert msg.startswith("--json:") and word in msg and "\n" not in msg


def test_check_sweep_cli_records_seeds_env_and_command(tmp_path, seed):
    from sm120lab.cli import main

    out = tmp_path / "sweep.json"
    rc = main(["check", "--sweep", "1", "--preset", "tiny", "--routing", "uniform,mostly-empty", "--seed", str(seed),
               "--device", "cpu", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and doc["totals"]["problems"] == 2 and doc["totals"]["false_garbage"] == 0
    assert doc["command"].startswith("sm120lab check --sweep 1") and "env" in doc
    assert "_env_at_start" not in doc
    # the environment is read when the sweep starts (the commit can move during a long sweep)
    import sm120lab.envinfo as envinfo

    calls = []
    real = envinfo.collect
    monkey = pytest.MonkeyPatch()
    monkey.setattr(envinfo, "collect", lambda: calls.append("env") or {**real(), "call": len(calls)})
    try:
        assert main(["check", "--sweep", "1", "--preset", "tiny", "--routing", "single", "--seed", str(seed),
                     "--device", "cpu", "--json", str(out)]) == 0
    finally:
        monkey.undo()
    assert calls == ["env"] and json.loads(out.read_text())["env"]["call"] == 1
    assert [row[3] for row in doc["problems"]] == [seed, seed]
    assert main(["check", "--sweep", "1", "--routing", "gauss", "--device", "cpu"]) == 2


# --- bench/check.py: the GPU check of the Triton op goes through the harness ----------------------

def test_bench_check_case_rows_through_the_harness(monkeypatch, seed):
    """With a stand-in for fused_moe_nvfp4 (the reference / emulated-w4a4 in bf16), rows are ok; a
    broken one (one row zero) is not. The row keys are the ones data/bench/aux/*_check.json holds."""
    pytest.importorskip("triton")
    import sm120lab.kernels.moe_layer as moe_layer
    from sm120lab.bench import check as bench_check
    from sm120lab.moe.backends.emulated_w4a4 import EmulatedW4A4
    from sm120lab.moe.reference import moe_reference

    broken = {"on": False}

    def stand_in(hidden, topk_ids, topk_weights, w13, w2, *, mode, a1_gscale, a2_gscale, configs, out, _poison):
        p = problem.with_topk_weights(topk_weights)
        if mode == "w4a16":
            y = moe_reference(hidden, topk_ids, topk_weights, w13, w2)
        else:
            y = torch.empty(out.shape, dtype=torch.float32)
            EmulatedW4A4().run(p, y)
        out.copy_(y)
        if broken["on"]:
            out[out.float().norm(dim=1).argmax()] = 0  # the largest row: a fault no envelope may absorb
        return out

    monkeypatch.setattr(moe_layer, "fused_moe_nvfp4", stand_in)
    monkeypatch.setattr(bench_check.TritonCase, "needs", Needs())
    problem = make_moe_problem("tiny", tokens=12, routing="zipf", seed=seed, device="cpu")
    rows = bench_check.check_case("tiny/zipf", problem)
    assert [r["mode"] for r in rows] == ["w4a16", "w4a4"]
    assert all(r["ok"] and r["finite_and_written"] and r["seed"] == seed for r in rows), rows
    w4a4 = rows[1]
    assert {"rel_vs_emulated_w4a4", "row_rel_max", "rows_rel_gt_1e-2", "rel_emulated_vs_reference",
            "strict_ok"} <= set(w4a4)
    assert w4a4["strict_ok"] and w4a4["rel_vs_emulated_w4a4"] < 5e-3
    broken["on"] = True
    rows = bench_check.check_case("tiny/zipf", problem)
    assert not any(r["ok"] for r in rows) and {r["verdict"] for r in rows} == {"garbage"}, rows


#: the failures of the first full sweep (floor 0.25, global rules against the reference only), each
#: fixed since: tiny-preset problems as (family, seed, backend)
FIRST_SWEEP_FAILURES = (("zipf", 33, "fault-swapped-experts"), ("zipf", 34, "fault-offset-off-by-one"),
                        ("sparse", 71, "variant-fp8-rowwise-weights"), ("single", 46, "emulated-w4a4"),
                        ("mostly-empty", 87, "variant-bf16-weights"))


@pytest.mark.parametrize("family, seed_, backend", FIRST_SWEEP_FAILURES)
def test_first_sweep_failures_stay_fixed(family, seed_, backend):
    from sm120lab.moe.faults import all_faults

    p = problem_of("tiny", family, seed_)
    candidates = {b.name: b for b in all_faults() + all_variants()}
    rep = check(p, [candidates.get(backend, backend)], keep_output=False).reports[backend]
    if backend.startswith("fault-"):
        fault = candidates[backend]
        assert rep.verdict == Verdict.GARBAGE
        assert set(rep.flagged_experts) == fault.expected_experts(p), rep.reasons
        assert set(rep.flagged_tokens) == fault.expected_tokens(p), rep.reasons
    else:
        assert rep.verdict in (Verdict.CORRECT, Verdict.DEGRADED), rep.reasons


# --- sm120lab check: inputs that cannot work, and output for humans (issues 20, 21) ---------------

@pytest.mark.parametrize("argv, word", [(["--tokens", "100000000"], "--tokens:"),
                                        (["--preset", "qwen3.5-397b-a17b"], "--preset:")])
def test_check_refuses_what_does_not_fit_in_memory(argv, word, capsys, monkeypatch):
    """Estimated before allocating: one line naming the argument, the estimate and the limit; exit 2."""
    from sm120lab.cli import main
    from sm120lab.moe import problem as problem_mod

    monkeypatch.setattr(problem_mod, "available_memory", lambda device: 16 * 2 ** 30)
    assert main(["check", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(word) and "\n" not in err and "16.0 GiB available" in err, err


def test_memory_estimate_lets_the_recorded_runs_through():
    """The tiny/small CPU presets and the H200 run (qwen3.5 at T=1024 on 139 GiB) fit."""
    from sm120lab.moe.problem import memory_error, memory_estimate

    assert memory_error("small", None, "cpu", available=2 * 2 ** 30) is None
    assert memory_error("qwen3.5-397b-a17b", 1024, "cuda", available=139 * 2 ** 30) is None
    est = memory_estimate("tiny", 1)
    assert memory_error("tiny", 10 ** 8, "cpu", available=est.total(10 ** 6)).startswith("--tokens:")


@pytest.mark.parametrize("extra", [["--faults"], ["--sweep", "1"]])
def test_check_faults_or_sweep_without_probes_is_refused(extra, capsys):
    from sm120lab.cli import main

    assert main(["check", "--tokens", "4", "--device", "cpu", "--no-probes", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "--no-probes" in err and "\n" not in err


def test_check_output_says_unverified_once_and_rounds_floats(capsys):
    import re

    from sm120lab.cli import main

    rc = main(["check", "--tokens", "4", "--device", "cpu", "--backend", "torch-bf16", "--backend",
               "flashinfer-cutlass", "--allow-skips"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert any("flashinfer-cutlass" in line and "unverified on SM120 hardware" in line for line in lines), out
    assert all(line.count("unverified on SM120 hardware") <= 1 for line in lines), out
    problem_line = next(line for line in lines if line.startswith("problem:"))
    for key in ("a1_gscale", "a2_gscale"):
        value = re.search(rf"{key}: ([0-9.e+-]+)", problem_line).group(1)
        assert len(value.replace(".", "").lstrip("0")) <= 4, problem_line


#: problems the recorded sweep of issue 21 failed on before the last fixes: (preset, family, seed, fault)
ISSUE21_SWEEP_MISSES = (("tiny", "single", 69, "fault-expert-gate-up-swapped"),      # pooled 0.036 < 8 x 0.005
                        ("tiny", "mostly-empty", 7001, "fault-expert-gate-up-swapped"))  # pooled 0.0495 < 0.05


@pytest.mark.parametrize("preset, family, seed_, name", ISSUE21_SWEEP_MISSES)
def test_issue21_sweep_misses_stay_fixed(preset, family, seed_, name):
    from sm120lab.moe.faults import all_faults, judge_fault

    fault = next(f for f in all_faults() if f.name == name)
    p = problem_of(preset, family, seed_)
    rep = check(p, [fault], keep_output=False).reports[name]
    assert judge_fault(fault, p, rep).exact, (rep.verdict, rep.flagged_experts, rep.reasons)


def test_percentile_calibration_saturates_a_massive_activation():
    """Why the 99.99th-percentile global scale is not in the legitimate set: on this problem it clips
    the largest intermediate value by 65% and the layer's error is 5.7 x the NVFP4 activation error: never ``correct``."""
    from sm120lab.moe.variants import SATURATING_VARIANTS, PercentileGlobalScale

    p = problem_of("small", "sparse", 75)
    res = check(p, [PercentileGlobalScale()], keep_output=False)
    rep = res.reports["variant-act-gscale-percentile"]
    assert PercentileGlobalScale in SATURATING_VARIANTS
    # 5.7 e_a; under the calibrated rule (issue 32) it is 3.8 x the activation family's layer band, below
    # W4A4_GLOBAL_Z, so degraded: flagged as not correct, not called garbage
    assert rep.diff.rel_fro > 5 * res.envelope.e_a and rep.verdict == Verdict.DEGRADED


def test_an_approximate_reciprocal_flips_ties_and_is_not_garbage(seed):
    """An activation quantizer whose output scale 1/(SF/gs) is one fp32 ulp low (an approximate division: what
    Triton 3.6 compiled for the workbook's own quantizer on the H200) moves only the products that land on an
    E2M1 rounding tie, each by one code step; on the ``small`` preset at T=96 that is enough to put the layer
    beyond the Triton kernel's own strict bound (rel vs emulated-w4a4 < 0.25 e_a) on some seeds (H200 seed
    1837863647: 0.86 e_a), so the harness judges such a backend by its envelope, where it is never garbage."""
    from sm120lab.moe.metrics import output_diff
    from sm120lab.moe.variants import ApproxReciprocal, Reciprocal, fake_quant_nvfp4
    from sm120lab.nvfp4 import quantize_nvfp4

    ratios, moved_total = [], 0
    for s in range(seed, seed + 8):
        p = make_moe_problem("small", tokens=96, routing="uniform", seed=s)
        x = p.hidden.float()
        exact = fake_quant_nvfp4(x, p.a1_gscale)
        low = fake_quant_nvfp4(x, p.a1_gscale, reciprocal=Reciprocal.ONE_ULP_LOW)
        moved = exact != low
        # only values whose product x * s sits on an E2M1 rounding threshold, to within an fp32 ulp, move
        # (26 of 24,576 at seed 0; up to 167 at other seeds)
        sf = quantize_nvfp4(x, p.a1_gscale).linear_scale().float()
        s_exact = 1.0 / (sf * (1.0 / p.a1_gscale.float()))
        prod = (x.reshape(*sf.shape, 16).abs() * s_exact.unsqueeze(-1)).reshape(x.shape)[moved]
        thresholds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
        gap = (prod.unsqueeze(-1) - thresholds).abs().amin(-1)
        assert bool((gap <= 2.0 ** -21 * prod).all()), (s, gap.max())
        moved_total += int(moved.sum())
        # each moved value is one E2M1 step smaller in magnitude (0.5 -> 0 included), never of the other sign
        e, lo = exact[moved], low[moved]
        one_step = (lo.abs() < e.abs()) & ((lo.abs() >= 0.5 * e.abs()) | (lo == 0)) & (lo * e >= 0)
        assert bool(one_step.all()), (s, e[~one_step][:4], lo[~one_step][:4])
        v = ApproxReciprocal()
        res = check(p, ["emulated-w4a4", v], probes=False, keep_output=True)
        rep = res.reports[v.name]
        assert rep.verdict != Verdict.GARBAGE, (s, rep.reasons)
        ratios.append(output_diff(rep.output, res.reports["emulated-w4a4"].output).rel_fro / res.envelope.e_a)
    assert moved_total > 0 and max(ratios) > 0  # not the contract's quantizer: it differs somewhere


@pytest.mark.parametrize("seed_,ratio", [(6, 0.449), (19, 0.302)])
def test_an_approximate_reciprocal_beyond_the_kernels_strict_bound_is_correct(seed_, ratio):
    """Two CPU seeds of the 40 scanned (0-39) where the one-ulp-low reciprocal puts the layer beyond the
    Triton kernel check's bound (rel vs emulated-w4a4 >= 0.25 e_a), as on the H200: the harness's verdict
    stays ``correct``."""
    from sm120lab.bench.check import W4A4_REL_FRACTION_OK
    from sm120lab.moe.metrics import output_diff
    from sm120lab.moe.variants import ApproxReciprocal

    p = make_moe_problem("small", tokens=96, routing="uniform", seed=seed_)
    v = ApproxReciprocal()
    res = check(p, ["emulated-w4a4", v], probes=False, keep_output=True)
    got = output_diff(res.reports[v.name].output, res.reports["emulated-w4a4"].output).rel_fro / res.envelope.e_a
    assert got == pytest.approx(ratio, abs=1e-3) and got >= W4A4_REL_FRACTION_OK
    assert res.reports[v.name].verdict == Verdict.CORRECT


def test_per_expert_global_scale_on_a_two_cell_expert_is_not_systematic():
    """CI seed 963338572 drew tiny/hot seed 963338578: expert 6 served two cells, where emulated-w4a4's error
    vs the reference happened to be 0.026 on the larger one (0.13-0.19 on the other experts) and per-expert
    global scales give 0.26: 9.1x the old band (emulated-w4a4 vs the reference), a false systematic expert, then
    patched with a floor for two-cell experts. The calibrated rule judges the variant in the band of the other
    activation quantizers of the null family, where it is no systematic expert (pinned)."""
    from sm120lab.moe.variants import PerExpertGlobalScale

    p = problem_of("tiny", "hot", 963338578)
    v = PerExpertGlobalScale()
    rep = check(p, [v], keep_output=False).reports[v.name]
    assert int((p.topk_ids == 6).sum()) == 2
    assert rep.verdict != Verdict.GARBAGE and not rep.flagged_experts, rep.reasons


@pytest.mark.parametrize("family,seed", [("uniform", 319839912), ("hot", 319839912), ("hot", 7000092)])
def test_offset_fault_is_observable_and_pinned(family, seed):
    """CI seed 319839910 drew the first two: the target group's last token was also routed to the next
    expert (uniform) or weighted 5e-5 (hot), so the off-by-one changed nothing anyone could see; on the
    third every candidate cell weighs < 0.002 and the first one's two experts answer the token within
    0.38. The fault now picks a group whose moved cell changes by >= 1 as the harness measures it, and
    keeps it across the harness's probe runs."""
    from sm120lab.moe.faults import OffByOneOffsets, judge_fault
    from sm120lab.moe.grouping import group_by_expert

    prob = problem_of("tiny", family, seed, "cpu")
    fault = OffByOneOffsets()
    t = fault._target(prob)
    (tok,) = fault.expected_tokens(prob)
    g = group_by_expert(prob.topk_ids, prob.config.E)
    assert tok == int(g.tokens[int(g.offsets[t]) - 1])
    assert t + 1 not in prob.topk_ids[tok].tolist()
    assert fault._change(prob, g, t, tok) >= OffByOneOffsets.MIN_CHANGE
    rep = check(prob, ["reference", fault], keep_output=False).reports[fault.name]
    out = judge_fault(fault, prob, rep)
    assert out.caught and out.exact, (rep.flagged_experts, rep.flagged_tokens)


@pytest.mark.parametrize("variant,family,seed_", [("ScaleRoundUp", "single", 7000020),
                                                  ("ScaleRoundUp", "mostly-empty", 7000020),
                                                  ("Pow2GlobalScale", "single", 8000004),
                                                  ("Pow2GlobalScale", "single", 681662493)])
def test_other_activation_quantizers_at_one_token_are_not_garbage(variant, family, seed_):
    """A second sweep (seeds from 7000000), a scan (from 8000000) and CI seed 681662487 drew one-token problems
    where a legitimate activation quantizer (E4M3 block scales rounded up; power-of-two global scales) sat 5.6
    and 7.2 e_a from both expected outputs, or one expert's only cell at 8.98 x the old band: rounding noise on
    a handful of NVFP4 blocks, not a bug. They were patched with a 10 e_a limit below 8 tokens and a 12x rule
    for one-cell experts; the calibrated rule (each quantizer judged in the band of the others) needs neither
    (pinned)."""
    from sm120lab.moe import variants

    prob = problem_of("tiny", family, seed_, "cpu")
    assert prob.tokens == 1
    v = getattr(variants, variant)()
    res = check(prob, ["reference", v], keep_output=False)
    rep = res.reports[v.name]
    assert rep.verdict != Verdict.GARBAGE and not rep.flagged_experts, rep.reasons


def test_block_scales_rounded_down_on_a_hot_expert_are_not_garbage():
    """The 10,440-problem validation sweep (seeds from 50000000, notes/correctness.md) drew tiny/hot seed 50000210:
    E4M3 block scales rounded down put the hot expert 2 at 8.29 x the other activation quantizers' pooled band,
    past the first calibration's W4A4_EXPERT_Z = 8 (2 x its largest ratio, 3.52). The Z's were re-set at 2 x the
    largest ratios over both sweeps (11,460 problems); this case stays pinned below them."""
    from sm120lab.moe.variants import ScaleRoundDown
    from sm120lab.moe.verdict import W4A4_EXPERT_Z

    prob = problem_of("tiny", "hot", 50000210, "cpu")
    v = ScaleRoundDown()
    rep = check(prob, ["reference", v], keep_output=False).reports[v.name]
    assert rep.verdict != Verdict.GARBAGE and not rep.flagged_experts, rep.reasons
    ratio = float(np.nanmax(pooled_deviation(rep) / rep.expert_band))
    assert 8.0 < ratio < W4A4_EXPERT_Z, ratio  # the tail that broke the first Z, under the new one


def test_a_shared_fault_invisible_in_one_expert_may_be_named_where_it_shows():
    """The fresh validation sweep (seeds from 60000000) drew tiny/mostly-empty seed 60001621 (T = 2, three routed
    experts): gate and up swapped in every expert moved expert 3's one cell by 0.027, under the 16-bit rounding
    floor, and experts 0 and 4 by 0.39 and 0.56. The harness called it garbage and named 0 and 4, which the fault
    oracle counted as a shared bug pinned on a subset; no harness can name an expert the fault did not move."""
    from sm120lab.moe.faults import SwappedGateUp, judge_fault
    from sm120lab.moe.verdict import EXPERT_DEV

    prob = problem_of("tiny", "mostly-empty", 60001621, "cpu")
    f = SwappedGateUp()
    rep = check(prob, ["reference", f], keep_output=False).reports[f.name]
    assert rep.verdict == Verdict.GARBAGE and rep.flagged_experts == [0, 4] and not rep.shared
    pooled = pooled_deviation(rep)
    assert pooled[3] <= EXPERT_DEV < min(pooled[0], pooled[4])
    assert judge_fault(f, prob, rep).localized


@pytest.mark.parametrize("family", ["uniform", "zipf"])
def test_a_token_whose_own_w4a4_rounding_was_exact_is_not_garbage(family):
    """A third hunt (seeds from 9000000) drew token 12 (hidden amax 17 against a median of 6.2): emulated
    W4A4 happened to round it to 0.056 of the reference, the lowest of 48 tokens (median 0.16), and block
    scales rounded up sat 12.2 x that band away: garbage, then patched with a token band floored at its
    experts'. The calibrated rule's token band is the other activation quantizers' spread (pinned)."""
    from sm120lab.moe.variants import ScaleRoundUp

    prob = problem_of("tiny", family, 9000121, "cpu")
    v = ScaleRoundUp()
    rep = check(prob, ["reference", v], keep_output=False).reports[v.name]
    assert rep.verdict != Verdict.GARBAGE, rep.reasons


def test_a_lone_cell_of_a_backend_with_its_own_numerics_is_no_systematic_expert():
    """The same hunt drew a one-token problem where FP8-rowwise weights put expert 5's only cell 0.099 from
    the bf16-weight forward and the other expert 0.0086: 11.6 x, a "systematic expert" by the ratio rule.
    One cell is a pattern only against an otherwise exact backend: here it is judged by the cell rule and
    named a weight-format mismatch. The planted one-expert faults (exact elsewhere) stay caught at T = 1
    (``test_issue21_sweep_misses_stay_fixed``)."""
    prob = problem_of("tiny", "mostly-empty", 9000183, "cpu")
    assert prob.tokens == 1
    v = FP8RowwiseWeights()
    rep = check(prob, ["reference", v], keep_output=False).reports[v.name]
    assert rep.verdict == Verdict.DEGRADED and not rep.flagged_experts, rep.reasons
    assert "weight-format mismatch" in rep.reasons[0]


def test_a_shared_bug_invisible_on_a_lightly_loaded_expert_is_still_shared():
    """A fourth hunt (seeds from 11000000) drew gate/up swapped in every expert where expert 6 (2 tokens,
    small pre-activations) changed by 0.019 only: not every expert was beyond the shared limit, so the bug
    was pinned on the 5 experts with far cells. Shared now needs the experts beyond the limit to hold
    >= 95% of the routed cells (here 94 of 96)."""
    from sm120lab.moe.faults import SwappedGateUp, judge_fault
    from sm120lab.moe.verdict import EXPERT_DEV, pooled_deviation

    prob = problem_of("tiny", "zipf", 11000021, "cpu")
    fault = SwappedGateUp()
    rep = check(prob, ["reference", fault], keep_output=False).reports[fault.name]
    assert rep.shared and judge_fault(fault, prob, rep).exact, (rep.flagged_experts, rep.reasons)
    assert float(pooled_deviation(rep)[6]) < EXPERT_DEV  # the case itself: one expert below the shared limit


def test_a_shared_activation_fault_seen_in_one_cell_may_name_that_cells_expert():
    """CI seed 73558532 drew a two-token problem (seed 73558534, experts 1, 5, 6) where 32-element
    activation blocks moved the largest cell (token 1, expert 6: 10x the others' norm) by 42%, 12.4 x
    its activation-rounding band, past the cell rule's 12: garbage, pinned on expert 6. One cell cannot
    tell an expert's bug from a shared one that shows only there; the report now says so, and the judge
    accepts naming experts that served one cell. The one-expert faults are still held to exact experts."""
    from sm120lab.moe.faults import ActBlock32, ExpertGateUpSwapped, judge_fault

    prob = problem_of("tiny", "mostly-empty", 73558534, "cpu")
    assert prob.tokens == 2
    fault = ActBlock32()
    rep = check(prob, ["reference", fault], keep_output=False).reports[fault.name]
    # the calibrated rule (issue 32): 0.42 from emulated-w4a4 is inside 12 x the null family's band there, so
    # degraded, nothing pinned
    assert rep.verdict == Verdict.DEGRADED and not rep.flagged_experts, rep.reasons
    assert judge_fault(fault, prob, rep).localized
    # the judge's one-cell exception, on the report as the earlier rule made it (garbage, expert 6 named)
    rep.verdict, rep.flagged_experts = Verdict.GARBAGE, [6]
    assert int(prob.expert_counts()[6]) == 1 and judge_fault(fault, prob, rep).localized
    # an expert that served two cells is still a subset pin: the same report with expert 1 named fails
    rep.flagged_experts = [1]
    assert int(prob.expert_counts()[1]) == 2 and not judge_fault(fault, prob, rep).localized
    one = ExpertGateUpSwapped()
    rep1 = check(prob, ["reference", one], keep_output=False).reports[one.name]
    assert judge_fault(one, prob, rep1).exact, rep1.reasons


@pytest.mark.parametrize("argv, flag", [(["--preset", "nope"], "--preset:"), (["--tokens", "-3"], "--tokens:"),
                                        (["--routing", "x"], "--routing:"),
                                        (["--tokens", "4", "--take-tokens", "9"], "--take-tokens:")])
def test_check_problem_errors_name_their_option(argv, flag, capsys):
    from sm120lab.cli import main

    assert main(["check", "--device", "cpu", "--backend", "reference", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(flag) and "\n" not in err, err


def test_a_sweep_fault_failure_replays_that_fault(capsys, monkeypatch):
    """The replay line of a fault failure runs the fault (``--faults --backend NAME``) and the gate judges it:
    the case of ``test_a_shared_activation_fault_seen_in_one_cell_may_name_that_cells_expert``, localized now
    (exit 0); a named fault without --faults is refused with a hint."""
    from sm120lab.cli import main
    from sm120lab.moe import faults as faults_mod
    from sm120lab.moe.faults import ActBlock32

    args = ["check", "--preset", "tiny", "--routing", "sparse", "--seed", "73558534", "--device", "cpu", "--tokens", "2"]
    assert main(args + ["--backend", "fault-act-block-32"]) == 2
    assert "run with --faults" in capsys.readouterr().err
    assert main(args + ["--faults", "--backend", "fault-act-block-32"]) == 0
    out = capsys.readouterr().out
    assert "fault-act-block-32" in out and "fault-nan-token" not in out  # only the named fault ran
    # the gate still fails when the named fault is mislocalized (the old rule: no single-cell exception)
    monkeypatch.setattr(faults_mod, "judge_fault", lambda f, p, r: faults_mod.FaultOutcome(True, True, False, False))
    assert main(args + ["--faults", "--backend", ActBlock32.name]) == 1
    assert "MISLOCALIZED planted fault(s): fault-act-block-32" in capsys.readouterr().err


def test_sweep_fault_failure_records_a_replay_that_runs_the_fault(monkeypatch):
    from sm120lab.moe import sweep as sweep_mod
    from sm120lab.moe.faults import FaultOutcome

    monkeypatch.setattr(sweep_mod, "judge_fault", lambda f, p, r: FaultOutcome(True, True, False, False))
    rec = sweep_mod.false_alarm_sweep(("tiny",), ("mostly-empty",), 1, 73558534)
    fails = [f for f in rec["failures"] if f["kind"] == "mislocalized"]
    assert fails and all(f["replay"].endswith(f"--faults --backend {f['backend']}") for f in fails)
    assert fails[0]["replay"].startswith("sm120lab check --preset tiny --routing sparse --seed 73558534")


@pytest.mark.parametrize("family", ["zipf", "hot"])
def test_weights_from_another_legitimate_quantizer_are_not_garbage(family):
    """Issue 32's false alarm, fixed seed: weights re-quantized with E4M3 block scales rounded up (a legitimate
    quantizer) were judged garbage on small/zipf and small/hot at seed 100 (one cell 0.521 > 0.5 from the
    reference and from the bf16 weights). The envelope's weight-format family now holds them: degraded, not
    garbage; a planted fault on the same problem is still garbage."""
    from sm120lab.moe import variants as V
    from sm120lab.moe.faults import SwappedExperts
    from sm120lab.moe.harness import check
    from sm120lab.moe.sweep import problem_of

    p = problem_of("small", family, 100)
    res = check(p, ["reference", *[c() for c in V.WEIGHT_QUANTIZER_VARIANTS], SwappedExperts()])
    for c in V.WEIGHT_QUANTIZER_VARIANTS:
        assert res.reports[c().name].verdict == "degraded", (c().name, res.reports[c().name].reasons)
    assert res.reports["reference"].verdict == "correct"
    assert res.reports[SwappedExperts().name].verdict == "garbage"


@pytest.mark.parametrize("name,preset,family,seed_", [
    ("variant-act-scale-down", "tiny", "uniform", 41000078),
    ("variant-act-scale-down", "tiny", "zipf", 41000078),
    ("variant-weight-nearest-per-tensor", "tiny", "single", 43000001),
    ("variant-weight-nearest-per-tensor", "tiny", "mostly-empty", 43000093),
])
def test_calibration_sweeps_false_alarms_stay_fixed(name, preset, family, seed_):
    """The calibration sweeps of the null-family rule (issue 32, notes/correctness.md) drew these: block scales
    rounded down judged by the other activation quantizers alone (a token 20.9 x their band, before the
    unquantized activations joined the family), and a per-tensor weight global scale at one and two tokens
    (one expert bit-equal, the other re-quantized: a "systematic expert" before per-tensor scales joined the
    weight-format family). Not garbage now."""
    from sm120lab.moe.variants import all_variants

    v = next(b for b in all_variants() if b.name == name)
    rep = check(problem_of(preset, family, seed_), ["reference", v], keep_output=False).reports[name]
    assert rep.verdict != Verdict.GARBAGE, rep.reasons


@pytest.mark.parametrize("family,seed_", [("uniform", 41000019), ("zipf", 41000131), ("hot", 41000000)])
def test_an_off_by_one_offset_is_caught_where_a_weight_radius_rule_missed_it(family, seed_):
    """A rule tried in the calibration (notes/correctness.md: a radius around the unquantized-weight forward for
    backends far from the twin) missed the off-by-one fault (one cell on the next expert, a change >= 1) 18
    times in 900 problems; it was not kept, and these stay caught and localized exactly."""
    from sm120lab.moe.faults import OffByOneOffsets, judge_fault

    prob = problem_of("tiny", family, seed_)
    fault = OffByOneOffsets()
    rep = check(prob, ["reference", fault], keep_output=False).reports[fault.name]
    out = judge_fault(fault, prob, rep)
    assert out.caught and out.exact, (rep.flagged_experts, rep.flagged_tokens, rep.reasons)
