"""sm120lab.bench.lesson: notebook 07's tables and verdict box, on the recorded H200 run
(``data/bench/moe_h200_2026-12-03_qwen3.5-397b-a17b_final.json``, with the peer and a profile), on hand-made inputs, and (in a fresh process with
Triton's CPU interpreter) on the kernel itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sm120lab.bench import lesson
from sm120lab.bench.moe import find_row
from sm120lab.constants import SENTINEL
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe import make_moe_problem
from sm120lab.nvfp4.e2m1 import e2m1_decode
from sm120lab.paths import data_dir

RUN = json.loads((data_dir() / "bench" / "moe_h200_2026-12-03_qwen3.5-397b-a17b_final.json").read_text())
OLD_RUN = json.loads((data_dir() / "bench" / "moe_h200_2026-12-03.json").read_text())  # no peer, no profile
ROOT = Path(__file__).resolve().parents[1]


def test_word_codes_table_decodes_every_e2m1_code_exactly():
    # the 16 codes in nibble order over two words: 0x76543210 holds codes 0..7, 0xFEDCBA98 codes 8..15
    for word, first in ((0x76543210, 0), (0xFEDCBA98, 8)):
        tab = lesson.word_codes_table(word)
        codes = torch.arange(first, first + 8)
        assert list(tab.index) == [f"element {j}" for j in range(8)]
        assert list(tab["code (s|m)"]) == [f"{c:04b}" for c in codes.tolist()]
        assert tab["E4M3 value x 2**6 = E2M1"].tolist() == e2m1_decode(codes.to(torch.uint8)).tolist()
    tab = lesson.word_codes_table(0xFEDCBA98)
    assert tab.loc["element 7", "E4M3 byte"] == "0x9c" and tab.loc["element 7", "E4M3 value x 2**6 = E2M1"] == -6.0


def test_per_t_text_and_where_t():
    d = {"1": 80.4, "4": None, "16": 99.6}
    assert lesson.per_t_text(d, "{:.0f}%") == "T=1: 80%, T=16: 100%"
    assert lesson.per_t_text({"1": 1.234}, "{:.2f}x") == "T=1: 1.23x"
    assert lesson.where_t({"1": 1.2, "4": 1.5}, lambda v: v > 1, "faster", "slower") == "faster at every T"
    assert lesson.where_t({"1": 1.2, "4": 0.9, "16": None}, lambda v: v > 1, "faster", "slower") == \
        "faster at T = 1; slower at T = 4; not measured at T = 16"
    assert lesson.where_t({}, lambda v: v > 1, "faster", "slower") == "nothing measured"


def _kernel(rel=3e-3, written=True):
    return {"rel. error vs fp64": rel, "all written": written}


def test_headline_rows_on_the_recorded_run():
    rows = lesson.headline_rows(RUN, _kernel(), round_trip=True, where="CPU interpreter", fragment=False)
    assert len(rows) == 9 and all(len(r) == 4 for r in rows)
    assert rows[0][:3] == ("Decode kernel on prepared weights, this machine", "rel. error 3.0e-03 vs fp64", "ok")
    tg = RUN["targets"]
    assert rows[1][2] == ("ok" if RUN["checks_ok"] else "bad")
    assert rows[1][3].startswith(f"{sum(c['ok'] for c in RUN['checks'])}/{len(RUN['checks'])} cases")
    assert rows[2][2] == ("ok" if tg["w13_ge_75pct_copy_bw"] else "bad")
    assert rows[2][1] == lesson.per_t_text(tg["w13_pct_copy_bw"], "{:.0f}%")
    assert rows[3][2] == ("ok" if tg["layer_within_1.35x_floor"] else "bad")
    assert rows[4][2] == ("ok" if tg["faster_than_fp8_every_T"] else "warn")
    assert rows[5][1] == f"{tg['speedup_vs_bf16_T4096']:.2f}x"
    assert rows[5][3] == f"ours at T=4096: {find_row(RUN, 4096, 'triton-w4a16', 'moe')['path']} path"
    assert rows[6][1:3] == ("not measured", "not_run")  # this run has no Marlin rows
    peer = tg["speedup_vs_peer"]
    assert peer and rows[7][1] == lesson.per_t_text(peer, "{:.2f}x")
    assert rows[7][2] == ("ok" if all(v > 1.0 for v in peer.values()) else "bad")
    assert rows[8][2] == "not_run"
    # a run without the peer says so instead of judging
    old = lesson.headline_rows(OLD_RUN, _kernel(), round_trip=True, where="x", fragment=True)
    assert old[7][1:3] == ("not measured", "not_run")


def test_headline_marlin_row_on_the_recorded_marlin_run():
    run = json.loads((data_dir() / "bench" / "moe_h200_2026-12-04_qwen3.5-397b-a17b_marlin.json").read_text())
    row = lesson.headline_rows(run, _kernel(), round_trip=True, where="x", fragment=True)[6]
    vs = run["targets"]["speedup_vs_marlin"]
    assert set(vs) == {"1", "4", "16", "64", "256", "1024", "4096"}
    for t, v in vs.items():  # Marlin time / ours, from the rows themselves
        assert v == pytest.approx(find_row(run, int(t), "vllm-marlin", "moe")["us_median"]
                                  / find_row(run, int(t), "triton-w4a16", "moe")["us_median"])
    assert row[1] == lesson.per_t_text(vs, "{:.2f}x")
    assert row[2] == ("ok" if all(v > 1.0 for v in vs.values()) else "bad")
    assert "vLLM 0.26.0" in row[3] and all(c["ok"] for c in run["marlin"]["checks"])
    # the first row fails on any of: an error at or above 1e-2, an unwritten output, an inexact round trip
    for kernel, trip in ((_kernel(rel=1e-2), True), (_kernel(written=False), True), (_kernel(), False)):
        assert lesson.headline_rows(RUN, kernel, round_trip=trip, where="x", fragment=True)[0][2] == "bad"
    assert lesson.headline_rows(RUN, _kernel(), round_trip=True, where="x", fragment=True)[0][0].startswith(
        "Fragment (tensor-core) kernel")


def test_bench_table_reads_the_recorded_rows():
    tab = lesson.bench_table(RUN)
    ts = sorted({r["T"] for r in RUN["rows"]})
    assert list(tab["T"]) == ts
    for _, line in tab.iterrows():
        t = int(line["T"])
        ours = find_row(RUN, t, "triton-w4a16", "moe")
        assert line["triton-w4a16 us"] == round(ours["us_median"], 1)
        assert line["ours path"] == ours["path"]
        # % of floor = 100 * floor_us / us = 100 / x_floor (the same floor)
        assert line["ours % floor"] == pytest.approx(100.0 / ours["x_floor"], abs=0.06)
        w13 = find_row(RUN, t, "triton-w4a16", "w13")
        assert _same(line["w13 % copy BW"], round(w13["pct_copy_bw"], 1) if w13 else None)
        for c in lesson.TABLE_CONTENDERS:
            r = find_row(RUN, t, c, "moe")
            assert _same(line[f"{c} us"], round(r["us_median"], 1) if r else None)
    assert tab["w13 % copy BW"].notna().sum() >= 3  # the w13 GEMM was timed at T = 1, 4, 16 at least


def _same(cell, expected) -> bool:
    """A table cell against its expected value; a missing row reads as None or NaN (pandas' float column)."""
    return (cell is None or cell != cell) if expected is None else cell == expected


@pytest.fixture(scope="module")
def tiny():
    prob = make_moe_problem("tiny", tokens=3, routing="uniform", seed=0, device="cpu")
    return prob, prepare_moe_weights(prob.w13_swizzled, prob.w2_swizzled)


def test_packed_round_trip_is_exact_and_sees_one_changed_byte(tiny):
    prob, packed = tiny
    assert lesson.packed_round_trip(prob.w13_swizzled, prob.w2_swizzled, packed)
    other = make_moe_problem("tiny", tokens=3, routing="uniform", seed=1, device="cpu")
    assert not lesson.packed_round_trip(other.w13_swizzled, prob.w2_swizzled, packed)


def test_run_packed_catches_an_output_left_unwritten(tiny, monkeypatch):
    from sm120lab.kernels import moe_layer

    prob, packed = tiny
    ref = torch.ones(prob.tokens, prob.config.H, dtype=torch.float64)
    monkeypatch.setattr(moe_layer, "fused_moe_packed", lambda *a, **k: None)  # writes nothing
    got = lesson.run_packed(prob, packed, ref)
    assert got["all written"] is False
    assert got["rel. error vs fp64"] == pytest.approx(abs(SENTINEL - 1.0), rel=1e-2)


def test_kernel_paths_on_cpu_and_no_live_run_here():
    assert [n for n, _ in lesson.kernel_paths(torch.device("cpu"))] == ["decode", "mma"]
    assert lesson.live_run([1], enabled=False) is None
    if not torch.cuda.is_available():
        assert lesson.live_run([1]) is None
    assert lesson.live_targets_text(None).startswith("no CUDA GPU here")
    assert lesson.live_targets_text({"targets": {"a": 1}}) == 'live targets: {\n "a": 1\n}'


_INTERPRETED = r"""
import json, torch
from sm120lab.bench import lesson
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe import make_moe_problem
from sm120lab.moe.reference import moe_reference
prob = make_moe_problem("tiny", tokens=4, routing="uniform", seed=3, device="cpu")
packed = prepare_moe_weights(prob.w13_swizzled, prob.w2_swizzled)
ref = moe_reference(prob.hidden, prob.topk_ids, prob.topk_weights, prob.w13, prob.w2, dtype=torch.float64)
print(json.dumps({"one": lesson.run_packed(prob, packed, ref),
                  "table": lesson.path_table(prob, packed, ref).to_dict("records")}))
"""


def test_run_packed_and_path_table_under_the_interpreter():
    """The kernel itself, every CPU path, against the fp64 reference (Triton's interpreter needs a fresh process)."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", _INTERPRETED], env=env, capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["one"]["all written"] and got["one"]["rel. error vs fp64"] < 1e-2
    assert [r["path"] for r in got["table"]] == ["decode", "mma"]
    for r in got["table"]:
        assert r["all written"] and 0 < r["rel. error vs fp64"] < 1e-2  # bf16 output: rounding, never exact


def test_profile_table_lists_each_kernel_and_the_gap():
    tab = lesson.profile_table(RUN, tokens=(1, 4096))
    assert set(tab["T"]) == {1, 4096} and {"triton-w4a16", "oai-matmul-ogs-mxfp4"} <= set(tab["contender"])
    for (t, c), part in tab.groupby(["T", "contender"]):
        p = RUN["profile"][str(t)][c]
        # the kernels plus the gap add up to the timed median (rounded to 0.1 us per line)
        assert abs(part["us per layer"].sum() - p["timed_us"]) < 0.1 * len(part)
        assert (part["kernel"] == "(gap)").sum() == 1
    ours_t1 = tab[(tab["T"] == 1) & (tab["contender"] == "triton-w4a16") & (tab["kernel"] != "(gap)")]
    assert set(ours_t1["kernel"]) == {"moe_w4a16_frag_kernel", "moe_w4a16_frag_w2sum_kernel"}
    assert lesson.profile_table(OLD_RUN) is None


def test_marlin_ranges_and_sentence():
    """The README kernel row's sentence: leads (lo > 1), trails (hi <= 1), shape-dependent otherwise; a file with no
    Marlin rows or no file at all is refused in one line naming ``paths``."""
    from sm120lab.bench.lesson import marlin_range_text, marlin_ranges

    assert marlin_range_text({1: (1.2, 1.5), 4: (0.9, 1.1), 16: (0.5, 1.0)}) == (
        "ahead at T=1 (1.20-1.50x) on every shape; behind at T=16 (0.50-1.00x) on every shape; "
        "shape-dependent at T=4 (0.90-1.10x)")
    with pytest.raises(ValueError, match="^paths: expected at least one"):
        marlin_ranges([])
    with pytest.raises(ValueError, match="^paths: .* has no vllm-marlin rows"):
        marlin_ranges([data_dir() / "bench" / "moe_h200_2026-12-02.json"])
    one = data_dir() / "bench" / "moe_h100-80gb-hbm3_2026-12-07_qwen3.5-397b-a17b_tune.json"
    r = marlin_ranges([one])
    assert all(lo == hi for lo, hi in r.values()) and 0.9 < r[1024][0] < 1.0 < r[1][0]
