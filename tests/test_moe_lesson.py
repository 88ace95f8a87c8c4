"""sm120lab.moe.lesson, the figures notebook 03 adds to sm120lab.moe.plots and the quantizer
controls of sm120lab.moe.quantizer_diff: on a real harness run (tiny problem, CPU) and hand-made inputs."""

from __future__ import annotations

import dataclasses
import json

import matplotlib
import numpy as np
import pytest
import torch

from sm120lab.moe import lesson, make_moe_problem
from sm120lab.moe.backends import all_backends
from sm120lab.moe.faults import all_faults
from sm120lab.moe.harness import check
from sm120lab.moe.plots import output_pair, plot_expert_load, plot_output_row
from sm120lab.moe.quantizer_diff import QuantizerDiff, self_check_diffs
from sm120lab.moe.verdict import Verdict

matplotlib.use("Agg")

BACKENDS = ("reference", "emulated-w4a4", "torch-bf16", "flashinfer-cutlass", "vllm-marlin")
FAULTS = ("fault-swapped-experts", "fault-linear-as-swizzled")


@pytest.fixture(scope="module")
def run():
    problem = make_moe_problem("tiny", tokens=16, routing="zipf", seed=0, device="cpu")
    registry = all_backends()
    faults = [f for f in all_faults() if f.name in FAULTS]
    return problem, faults, check(problem, [registry[b] for b in BACKENDS] + faults)


def test_fmt_err():
    assert [lesson.fmt_err(v) for v in (0.012345, 1234.5, -2e3, float("nan"), float("inf"), 1e-7, "x")] == \
        ["0.0123", ">1000", ">1000", "nan", "inf", "1e-07", "x"]


def test_split_reports_and_why_not_run(run):
    _, _, result = run
    real, planted = lesson.split_reports(result)
    assert set(real) == set(BACKENDS) and set(planted) == set(FAULTS)
    skipped = [r for r in real.values() if r.diff is None]
    assert {r.name for r in skipped} >= {"flashinfer-cutlass", "vllm-marlin"}
    for r in skipped:
        why = lesson.why_not_run(r, "cpu")
        assert why == lesson.NO_GPU or (len(why) <= 110 and ";" not in why)
    assert lesson.why_not_run(real["vllm-marlin"], "cuda") != lesson.NO_GPU


def test_headline_rows(run):
    problem, faults, result = run
    rows = lesson.headline_rows(result, faults, problem, "cpu")
    by_claim = {r[0]: r for r in rows}
    assert not any(c.startswith("reference") for c in by_claim)
    bf16 = by_claim["torch-bf16 on this machine (cpu)"]
    assert bf16[1] == bf16[2] == "correct" and bf16[3].startswith("rel err ")
    assert by_claim["emulated-w4a4 on this machine (cpu)"][2] == "correct"
    no_gpu = [r for r in rows if r[3].startswith("this machine has no CUDA GPU")]
    assert len(no_gpu) == 1 and no_gpu[0][1:3] == ("not run", "skipped")
    assert {"flashinfer-cutlass", "vllm-marlin"} <= set(no_gpu[0][0].split(", "))
    faults_row = rows[-1]
    assert faults_row[0] == "planted faults caught and localized by the harness"
    assert faults_row[1:3] == ("2 of 2", "correct") and "missed: none" in faults_row[3]
    # a harness that missed a fault: hand it the correct backend's report under the fault's name
    reports = dict(result.reports, **{"fault-swapped-experts": result.reports["torch-bf16"]})
    missed = lesson.headline_rows(dataclasses.replace(result, reports=reports), faults, problem, "cpu")[-1]
    assert missed[1:3] == ("1 of 2", "garbage") and "missed: fault-swapped-experts" in missed[3]
    assert all(not r[0].startswith("planted") for r in lesson.headline_rows(result, [], problem, "cpu")[:-1])


def test_tables_and_texts(run):
    problem, _, result = run
    text = lesson.problem_text(problem).splitlines()
    assert text[0].startswith("{'preset': 'tiny'") and text[1].startswith(f"w13: {tuple(problem.w13.shape)}")
    counts = json.loads(text[2].split(": ", 1)[1])
    assert sum(counts) == problem.tokens * problem.config.k and len(counts) == problem.config.E
    env = lesson.envelope_text(result.envelope).splitlines()
    assert len(env) == len(result.envelope.as_dict()) and env[0].split()[0] == next(iter(result.envelope.as_dict()))
    table = lesson.verdict_table(result, "cpu")
    assert list(table["backend"]) == list(result.reports)
    assert (table["why not run"] != "").sum() == sum(r.diff is None for r in result.reports.values())
    numbers = lesson.numbers_text(result).splitlines()
    assert len(numbers) == 1 + sum(r.diff is not None for r in result.reports.values())
    reasons = lesson.reasons_text(result)
    for name in FAULTS:
        assert f"{name}: garbage" in reasons
    assert "torch-bf16" not in reasons


def test_scale_bytes_text(run):
    problem, _, _ = run
    lines = lesson.scale_bytes_text(problem, n=4).splitlines()
    lin = problem.w13.scale[0].view(torch.uint8).reshape(-1)[:4].tolist()
    assert lines[0].endswith(str(lin)) and lines[2] == "same multiset of bytes: True"


def test_fault_row_figure_and_text(run):
    _, _, result = run
    rep, ref = output_pair(result, "fault-linear-as-swizzled")
    assert rep.name == "fault-linear-as-swizzled" and ref.name == "reference"
    fig = plot_output_row(result)
    lines = fig.axes[0].get_lines()
    t = int(fig.axes[0].get_title().split()[1].rstrip(":"))
    assert t == int(np.argmax(np.nan_to_num(rep.diff.per_token, posinf=0)))
    assert np.allclose(lines[0].get_ydata(), ref.output[t].double().numpy())
    assert np.allclose(lines[1].get_ydata(), rep.output[t].double().numpy())
    assert lesson.fault_summary_text(result).endswith(f"garbage, flagged experts {rep.flagged_experts}")
    assert output_pair(result, "fault-nan-token") is None and plot_output_row(result, "fault-nan-token") is None
    assert lesson.fault_summary_text(result, "fault-nan-token") == "fault backends not run (with_faults=False)"


def test_plot_expert_load(run):
    problem, _, _ = run
    fig = plot_expert_load(problem)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == problem.expert_counts().tolist() and "zipf routing" in fig.axes[0].get_title()


def test_self_check_diffs_are_the_two_controls(run):
    problem, _, _ = run
    diffs = self_check_diffs(problem.hidden, problem.a1_gscale.reshape(1))
    assert [(d.name, d.layout) for d in diffs] == [("sm120lab (self)", "linear"), ("unwritten output", "linear"),
                                                   ("sm120lab (self)", "swizzled"), ("unwritten output", "swizzled")]
    for d in diffs[0::2]:
        assert d.verdict == Verdict.CORRECT and d.byte_match == 1.0 and not d.silent
    for d in diffs[1::2]:
        assert d.verdict == Verdict.GARBAGE and d.silent and d.byte_match < 1.0
    text = lesson.quantizer_demo_text(diffs).splitlines()
    assert text[1].split() == ["unwritten", "output", "linear", "verdict=garbage", "silent=True"]


def test_triton_quantizer_diff_without_a_gpu_is_one_skipped_entry():
    from sm120lab.moe.quantizer_diff import triton_quantize_diffs

    (d,) = triton_quantize_diffs(torch.randn(4, 32).bfloat16(), torch.tensor([100.0]))
    assert d.status == "skipped" and d.reason == "needs a CUDA GPU" and d.name == "sm120lab Triton quantizer"


def test_quantizer_gpu_text():
    ran = QuantizerDiff(name="fi", layout="linear", status="ran", byte_match=0.5, code_match=0.25, scale_match=1.0,
                        verdict="garbage", silent=True, note="n")
    skipped = QuantizerDiff(name="fi", layout="-", status="skipped", reason="needs a CUDA GPU")
    assert lesson.quantizer_gpu_text([ran], "cuda") == \
        "fi linear: garbage (bytes 0.5000, codes 0.2500, scales 1.0000) silent=True n"
    assert lesson.quantizer_gpu_text([skipped], "cpu") == f"fi: not run ({lesson.NO_GPU})"
    assert lesson.quantizer_gpu_text([skipped], "cuda") == "fi: not run (needs a CUDA GPU)"
    # one line per reason, naming every quantizer it stopped (the notebook's CPU run: FlashInfer and Triton)
    tq = QuantizerDiff(name="sm120lab Triton quantizer", layout="linear", status="skipped", reason="needs a CUDA GPU")
    assert lesson.quantizer_gpu_text([skipped, skipped, tq], "cpu") == \
        f"fi, sm120lab Triton quantizer: not run ({lesson.NO_GPU})"
    no_fi = QuantizerDiff(name="fi", layout="-", status="skipped", reason="flashinfer not importable (ImportError)")
    assert lesson.quantizer_gpu_text([no_fi, ran], "cuda").splitlines()[1] == "fi: not run (flashinfer not importable (ImportError))"


def test_recorded_gpu_runs_text(tmp_path):
    text = lesson.recorded_gpu_runs_text()
    assert text.startswith("h200_fp4_quantize.json: ") and "h200_moe_check.json: " in text
    assert "fp4_quantize linear: garbage" in text  # FlashInfer 0.6.5 on SM90: the silent failure on record
    assert lesson.recorded_gpu_runs_text(tmp_path) == "no recorded GPU runs in data/correctness/"


def test_results_record(run):
    _, _, result = run
    rec = lesson.results_record(result, "cpu", [], [])
    assert set(rec["verdicts"]) == set(result.reports)
    assert set(rec["flagged_experts"]) == {n for n, r in result.reports.items() if r.diff is not None}
    assert rec["device"] == "cpu" and rec["envelope"] == result.envelope.as_dict()
    json.dumps(rec)  # what the run folder writes
