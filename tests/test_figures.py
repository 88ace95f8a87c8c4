"""Layout of the published figures: no legend over a bar, no overlapping tick labels (matplotlib Agg)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from sm120lab.roofline import lesson  # noqa: E402
from sm120lab.roofline.hardware import load_gpus  # noqa: E402
from sm120lab.roofline.published import load_published  # noqa: E402


def _boxes(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    axes_box = ax.get_window_extent(r)
    bars = [Bbox.intersection(p.get_window_extent(r), axes_box) for p in ax.patches]
    return r, ax, axes_box, [b for b in bars if b is not None and b.width > 0 and b.height > 0]


def _legend_clear_of(fig):
    """(legend overlaps no bar, legend outside the axes box)."""
    r, ax, axes_box, bars = _boxes(fig)
    legend = ax.get_legend().get_window_extent(r)
    return not any(legend.overlaps(b) for b in bars), not legend.overlaps(axes_box)


@pytest.mark.parametrize("with_prediction", [True, False])
def test_published_chart_keeps_the_legend_off_the_bars_and_the_labels_apart(with_prediction):
    from sm120lab.recommend.facts import guide_basis

    seed = lesson.seed_rows(lesson.published_vs_ceiling(load_published(), load_gpus(), guide_basis()))
    names = list(dict.fromkeys(seed[seed["tok_s"].notna()]["backend"]))
    assert len(names) >= 4  # the seed's table (flashinfer#2723): Marlin and three FlashInfer CUTLASS builds
    ceil1 = lesson.seed_value(seed, "Marlin", 1, "ceiling")
    # a prediction as tall as the ceiling: the worst case for a legend inside the axes
    prediction = {1: {"predicted_tok_s": 0.99 * ceil1, "pct_of_ceiling": 99.0},
                  4: {"predicted_tok_s": 0.7 * ceil1, "pct_of_ceiling": 90.0}} if with_prediction else None
    fig = lesson.plot_published(seed, prediction, title="t", xlabel="backend")
    try:
        no_bar_hidden, outside = _legend_clear_of(fig)
        assert no_bar_hidden and outside
        r, ax, _, bars = _boxes(fig)
        ticks = [t.get_window_extent(r) for t in ax.get_xticklabels()]
        assert len(ticks) == len(names) + bool(with_prediction)
        assert not any(a.overlaps(b) for a, b in zip(ticks, ticks[1:])), "tick labels overlap"
        tallest = max(p.get_height() for p in ax.patches)
        assert tallest < ax.get_ylim()[1] and ceil1 < ax.get_ylim()[1] <= 1.2 * max(tallest, ceil1)
    finally:
        plt.close(fig)


def test_expert_bars_legend_sits_below_the_bars():
    from sm120lab.moe import make_moe_problem
    from sm120lab.moe.backends import all_backends
    from sm120lab.moe.faults import all_faults
    from sm120lab.moe.harness import check
    from sm120lab.moe.plots import plot_expert_bars

    problem = make_moe_problem("tiny", tokens=24, routing="zipf", seed=0, device="cpu")
    faults = [f for f in all_faults() if f.name == "fault-swapped-experts"]
    result = check(problem, [all_backends()["torch-bf16"], *faults])
    fig = plot_expert_bars(result)
    try:
        assert len(fig.axes[0].patches) >= 2 * problem.config.E
        assert _legend_clear_of(fig) == (True, True)
    finally:
        plt.close(fig)
