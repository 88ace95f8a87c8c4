"""sm120lab.roofline.lesson: the pieces notebook 04 calls, on the recorded data (``data/bench/``,
``data/published/``, ``data/hardware.csv``) and on hand-checked cases."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from sm120lab.roofline import get_model, lesson, load_gpus, precision_plan
from sm120lab.roofline.ceiling import ceiling, moe_layer_floor_us
from sm120lab.roofline.measured import bench_files
from sm120lab.roofline.published import load_published

matplotlib.use("Agg")

MODEL = get_model("qwen3.5-397b-a17b")
PLAN = precision_plan("linear-quantized", "nvfp4")


@pytest.fixture(scope="module")
def gpus():
    return load_gpus()


@pytest.fixture(scope="module")
def seed(gpus):
    return lesson.seed_rows(lesson.published_vs_ceiling(load_published(), gpus))


def test_seed_ceiling_is_the_seed_setup(gpus):
    tab = lesson.seed_ceiling(MODEL, PLAN, gpus, context=2048)
    assert list(tab["B"]) == [1, 4, 64] and set(tab["gpu"]) == {"rtx-pro-6000"}
    for _, row in tab.iterrows():
        ce = ceiling(MODEL, gpus["rtx-pro-6000"], PLAN, tp=2, pp=2, batch=int(row["B"]), context=2048)
        assert row["per_user_tok_s"] == pytest.approx(ce.per_user_tok_s, rel=1e-12)
    # per-user ceiling falls with users (more distinct experts, more KV), aggregate rises
    assert tab["per_user_tok_s"].is_monotonic_decreasing and tab["aggregate_tok_s"].is_monotonic_increasing
    assert tab.iloc[-1]["fits"]  # the seed's model fits 4x 96 GB at 64 users x 2048 tokens


def test_recorded_kernel_efficiency_picks_the_newest_sweep_of_the_model(gpus):
    newest, eff = lesson.recorded_kernel_efficiency(MODEL, gpus["h200"])
    assert newest == lesson.newest_bench_file(bench_files(), model=MODEL.name)
    assert set(eff) == {1, 4}
    for T, e in eff.items():
        assert e["T"] == T and e["contender"].startswith("triton") and e["file"] == f"data/bench/{newest.name}"
        floor = moe_layer_floor_us(MODEL, T, gpus["h200"].mem_bw_GBps)
        assert e["floor_us"] == pytest.approx(floor, rel=1e-9)
        assert e["eta"] == pytest.approx(floor / e["us_median"], rel=1e-9) and 0 < e["eta"] < 1
    assert lesson.recorded_kernel_efficiency(MODEL, gpus["h200"], tokens=(1,), files=[]) == (None, {})


def test_live_sweep_path_and_disabled_sweep(tmp_path):
    assert lesson.live_sweep_path(tmp_path / "results") == tmp_path / "bench_live.json"
    assert lesson.live_sweep_path(None) == Path(".") / "bench_live.json"
    assert lesson.live_sweep(tmp_path / "x.json", model=MODEL.name, enabled=False) == (None, "measure=False")
    assert not (tmp_path / "x.json").exists()


def test_texts_without_a_sweep():
    assert lesson.live_table_text(None, "no CUDA GPU on this machine") == \
        "no MoE layer measured on this machine: no CUDA GPU on this machine"
    assert lesson.recorded_moe_text(None, None, MODEL, 4000.0).startswith("no recorded MoE-layer sweep")
    assert lesson.recorded_moe_text(pd.DataFrame(), None, MODEL, 4000.0).startswith("no recorded MoE-layer sweep")
    assert lesson.plot_moe_only(None, MODEL, 4000.0) is None


def test_recorded_moe_text_formats_microseconds_with_one_decimal(gpus):
    newest, _ = lesson.recorded_kernel_efficiency(MODEL, gpus["h200"])
    bw = gpus["h200"].bandwidth_GBps("measured")
    tab = lesson.moe_layer_vs_floor([newest], MODEL, bw)
    text = lesson.recorded_moe_text(tab, newest, MODEL, bw)
    assert text.startswith(f"recorded: data/bench/{newest.name}")
    us = tab.pivot_table(index=["contender", "timing"], columns="T", values="us_median")
    first = us.iloc[0].dropna()
    assert f"{first.iloc[0]:,.1f}" in text  # the table's own one-decimal format, not the notebook's pandas option
    fig = lesson.plot_moe_only(tab, MODEL, bw)
    assert len(fig.axes[0].get_lines()) == tab.groupby(["contender", "timing"]).ngroups + 1  # + the floor


def test_gap_paragraph_wraps_at_width(seed):
    one = lesson.gap_paragraph(seed, MODEL, PLAN, 2048)
    wrapped = lesson.gap_paragraph(seed, MODEL, PLAN, 2048, width=110)
    assert "\n" not in one and one.startswith("On memory and link bandwidth alone")
    assert all(len(line) <= 110 for line in wrapped.splitlines()) and len(wrapped.splitlines()) > 5
    assert wrapped.split() == one.split()


def test_plot_seed_vs_guide_draws_every_backend_and_the_prediction(seed):
    from sm120lab.recommend.facts import with_guide_ceiling

    seed_guide = with_guide_ceiling(seed, "rtx-pro-6000")
    ceil1 = lesson.seed_value(seed_guide, "Marlin", 1, "ceiling_guide")
    assert math.isfinite(ceil1) and ceil1 > lesson.seed_value(seed_guide, "Marlin", 1, "tok_s")
    prediction = {1: {"predicted_tok_s": 0.5 * ceil1, "pct_of_ceiling": 50.0}}
    fig = lesson.plot_seed_vs_guide(seed_guide, prediction)
    ax = fig.axes[0]
    names = list(dict.fromkeys(seed_guide[seed_guide["tok_s"].notna()]["backend"]))
    assert len(ax.get_xticklabels()) == len(names) + 1
    assert "guide's ceiling" in ax.get_title() and "section 7" in ax.get_xlabel()
