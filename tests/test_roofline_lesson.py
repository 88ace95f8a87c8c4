"""sm120lab.roofline.lesson: the pieces notebook 04 calls, on the recorded data (``data/bench/``,
``data/published/``, ``data/hardware.csv``) and on hand-checked cases."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from sm120lab.recommend.facts import guide_basis
from sm120lab.roofline import get_model, lesson, load_gpus
from sm120lab.roofline.ceiling import moe_layer_floor_us
from sm120lab.roofline.measured import bench_files
from sm120lab.roofline.published import load_published

matplotlib.use("Agg")

MODEL = get_model("qwen3.5-397b-a17b")
BASIS = guide_basis()


@pytest.fixture(scope="module")
def gpus():
    return load_gpus()


@pytest.fixture(scope="module")
def seed(gpus):
    return lesson.seed_rows(lesson.published_vs_ceiling(load_published(), gpus, BASIS))


def test_seed_ceiling_is_the_seed_setup(gpus):
    tab = lesson.seed_ceiling(MODEL, BASIS, gpus, context=2048)
    assert list(tab["B"]) == [1, 4, 64] and set(tab["gpu"]) == {"rtx-pro-6000"}
    for _, row in tab.iterrows():
        ce = BASIS.ceiling(MODEL, gpus["rtx-pro-6000"], tp=2, pp=2, batch=int(row["B"]), context=2048)
        assert row["per_user_tok_s"] == pytest.approx(ce.per_user_tok_s, rel=1e-12)
        assert row["basis"] == BASIS.label
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
    one = lesson.gap_paragraph(seed, MODEL, BASIS, 2048)
    wrapped = lesson.gap_paragraph(seed, MODEL, BASIS, 2048, width=110)
    ceil1 = lesson.seed_value(seed, "Marlin", 1, "ceiling")
    assert "\n" not in one and one.startswith(f"At one user the 4x RTX PRO 6000 TP2 PP2 setup could at most decode "
                                              f"{ceil1:.0f} tok/s ({BASIS.label})")
    # the reported range is shown, the midpoint named; the other bases each with its label
    assert "Marlin's 46-49 (midpoint 47.5) tok/s" in one
    for plan, label in lesson.other_basis_labels().items():
        assert f"{lesson.seed_value(seed, 'Marlin', 1, f'ceiling_{plan}'):.0f} tok/s on the {label}" in one
    assert all(len(line) <= 110 for line in wrapped.splitlines()) and len(wrapped.splitlines()) > 5
    assert wrapped.split() == one.split()


def test_plot_seed_vs_guide_draws_every_backend_and_the_prediction(seed):
    seed_guide = seed
    ceil1 = lesson.seed_value(seed_guide, "Marlin", 1, "ceiling")
    assert math.isfinite(ceil1) and ceil1 > lesson.seed_value(seed_guide, "Marlin", 1, "tok_s")
    prediction = {1: {"predicted_tok_s": 0.5 * ceil1, "pct_of_ceiling": 50.0}}
    fig = lesson.plot_seed_vs_guide(seed_guide, prediction)
    ax = fig.axes[0]
    names = list(dict.fromkeys(seed_guide[seed_guide["tok_s"].notna()]["backend"]))
    assert len(ax.get_xticklabels()) == len(names) + 1
    assert BASIS.label in ax.get_title().replace("\n", " ") and "section 7" in ax.get_xlabel()


def test_prediction_text_sets_marlin_against_the_predictions_own_ceiling(seed, gpus):
    """Issue 31: "ceiling 136 tok/s ... Marlin recorded 47.5 = 25%" put 47.5 over the other basis's 187."""
    from sm120lab import recommend

    guide = recommend.answer("rtx-pro-6000")
    _, eff = lesson.recorded_kernel_efficiency(MODEL, gpus["h200"])
    pred = lesson.guide_prediction(guide, gpus["rtx-pro-6000"], eff)
    text = lesson.prediction_text(pred, eff, seed, gpus["h200"])
    marlin = lesson.seed_value(seed, "Marlin", 1, "tok_s")
    c1 = pred[1]["ceiling_tok_s"]
    assert c1 == pytest.approx(guide.ceiling.per_user_tok_s, rel=1e-9)
    assert f"ceiling {c1:.0f} tok/s" in text
    assert f"Marlin recorded 46-49 (midpoint 47.5) = {100 * marlin / c1:.0f}% of the same ceiling" in text


def test_seed_table_names_every_basis_above_its_columns(seed, gpus):
    text = lesson.seed_table_text(seed, gpus["rtx-pro-6000"])
    head, table = text.split("\n  ceiling, %: ", 1)
    assert table.startswith(BASIS.label)
    for plan, label in lesson.other_basis_labels().items():
        short = lesson.OTHER_COLUMNS[plan]
        assert f"  ceiling {short}, % {short}: {label}" in text
    assert " 46-49 " in text and "midpoint" in text


def test_like_for_like_feeds_one_model_both_kernels_and_calibrates_on_marlins_published_range():
    """Notebook 04's prediction: the model applied to ours and to vLLM's Marlin from the same H200 run, both
    scaled by Marlin's published / modelled ratio; ours calibrated = published x model(ours) / model(Marlin)."""
    from sm120lab import recommend
    from sm120lab.roofline.published import load_published

    cfg, gpus = get_model("qwen3.5-397b-a17b"), load_gpus()
    guide = recommend.answer("rtx-pro-6000")
    pub = lesson.published_vs_ceiling(load_published(), gpus, guide_basis(), weight_format="nvfp4",
                                      context=2048, routing="uniform")
    seed = lesson.seed_rows(pub)
    f_ours, ours = lesson.recorded_kernel_efficiency(cfg, gpus["h200"])
    f_marlin, marlin = lesson.recorded_kernel_efficiency(cfg, gpus["h200"], prefix="vllm-marlin")
    assert f_ours == f_marlin and marlin[1]["contender"] == "vllm-marlin" and ours[1]["contender"] == "triton-w4a16"
    lfl = lesson.like_for_like(lesson.guide_prediction(guide, gpus["rtx-pro-6000"], ours),
                               lesson.guide_prediction(guide, gpus["rtx-pro-6000"], marlin), seed)
    r = lfl[1]
    lo, hi = r["marlin_published"]
    assert (lo, hi) == (46.0, 49.0)
    for c, published, calibrated in zip(r["c"], (lo, hi), r["ours_calibrated"]):
        assert c * r["marlin_model"] == pytest.approx(published)
        assert calibrated == pytest.approx(published * r["ours_model"] / r["marlin_model"])
    # the faster layer predicts more tok/s, by less than the layer-time ratio (the rest of the model is shared)
    layer_ratio = marlin[1]["us_median"] / ours[1]["us_median"]
    assert 1.0 < r["model_ratio"] < layer_ratio
    text = lesson.like_for_like_text(lfl, ours, marlin)
    assert "PREDICTION, unverified on SM120 hardware" in text and "46-49" in text
