"""Pictures of a :class:`~sm120lab.moe.harness.CheckResult`: where the error lives.

- :func:`plot_heatmap`: expert x token map of every routed (token, expert) cell (from the per-slot
  probes; blank = not routed), log colour scale, per backend: by default the deviation from the
  backend's expected numerics (``dev``: ~0 if correct), or ``kind="rel"`` the error vs the reference.
  Cells exactly 0 get their own colour (the colour bar's lower extension), never a clamped value;
  with ``kind="dev"`` backends whose expected numerics are themselves (``reference``,
  ``emulated-w4a4``: identically 0) are left out;
- :func:`plot_expert_bars`: per-expert relative error vs the reference, with the envelope's lines;
- :func:`plot_histograms`: histogram of per-cell errors vs the reference per backend (log x); cells
  exactly 0 cannot sit on a log axis and are counted in the legend instead;
- :func:`plot_expert_load`: the (token, slot) pairs each expert of a problem receives;
- :func:`plot_output_row`: one output row of a backend over the reference's, at its worst token.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SELF_TWINS", "error_matrix", "output_pair", "plot_expert_load", "plot_heatmap", "plot_expert_bars",
           "plot_histograms", "plot_output_row"]


def error_matrix(report, num_experts: int, kind: str = "dev") -> np.ndarray:
    """[E, T] cell values (``dev`` or ``rel``; NaN where token t is not routed to expert e)."""
    if kind not in ("dev", "rel"):
        raise ValueError(f"kind must be 'dev' or 'rel', got {kind!r}")
    rel = report.cells.dev if kind == "dev" else report.cells.rel
    t, k = rel.shape
    m = np.full((num_experts, t), np.nan)
    ids = report.topk_ids
    for j in range(k):
        m[ids[:, j], np.arange(t)] = rel[:, j]
    return m


#: colour-scale range of the heatmaps (deviation / relative error)
VMIN, VMAX = 1e-6, 1e3
#: backends compared with themselves under kind="dev" (their deviation is 0 by construction)
SELF_TWINS = ("reference", "emulated-w4a4")


def _clip_top(x):
    """Infinite (NaN/untouched) cells to the top of the scale; NaN (not routed) stays blank."""
    return np.where(np.isposinf(x), VMAX, np.minimum(x, VMAX))


def plot_heatmap(result, backends=None, *, kind: str = "dev", max_cols: int = 3):
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    reps = [r for n, r in result.reports.items() if r.cells is not None and (backends is None or n in backends)
            and not (kind == "dev" and n in SELF_TWINS)]
    if not reps:
        return None
    cols = min(max_cols, len(reps))
    rows = -(-len(reps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, constrained_layout=True)
    e = result.problem.config.E
    cmap = plt.get_cmap("magma").with_extremes(under="#4dac26", bad="white")
    for ax, rep in zip(axes.flat, reps):
        m = error_matrix(rep, e, kind)
        shown = np.where(m == 0, VMIN / 10, _clip_top(m))  # exact zeros: the "under" colour
        im = ax.imshow(shown, aspect="auto", interpolation="nearest", norm=LogNorm(vmin=VMIN, vmax=VMAX), cmap=cmap)
        ax.set_title(f"{rep.name}: {rep.verdict}", fontsize=9)
        ax.set_xlabel("token")
        ax.set_ylabel("expert")
    for ax in list(axes.flat)[len(reps):]:
        ax.axis("off")
    label = "deviation from expected numerics" if kind == "dev" else "relative error vs reference"
    fig.colorbar(im, ax=axes, shrink=0.8, extend="min", label=f"{label} (green: exactly 0; blank: not routed)")
    return fig


def plot_expert_bars(result, backends=None):
    import matplotlib.pyplot as plt

    reps = [r for n, r in result.reports.items() if r.per_expert is not None and (backends is None or n in backends)]
    if not reps:
        return None
    e = result.problem.config.E
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * e), 3.9))  # room for the legend below the axes
    width = 0.8 / len(reps)
    for i, rep in enumerate(reps):
        ax.bar(np.arange(e) + i * width, _clip_top(np.nan_to_num(rep.per_expert, nan=0.0)), width=width,
               label=rep.name)
    env = result.envelope
    ax.axhline(env.correct_rel, ls="--", c="g", lw=1, label="correct band (1.5 e_a)")
    ax.axhline(env.garbage_rel, ls="--", c="r", lw=1, label="garbage")
    ax.set_yscale("log")
    ax.set_xlabel("expert")
    ax.set_ylabel("per-expert relative error vs reference")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)  # below: no bar hidden
    fig.tight_layout()
    return fig


def plot_histograms(result, backends=None):
    import matplotlib.pyplot as plt

    reps = [r for n, r in result.reports.items() if r.cells is not None and (backends is None or n in backends)]
    if not reps:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    bins = np.logspace(-8, 3, 56)
    for rep in reps:
        rel = _clip_top(rep.cells.rel.ravel())
        zeros = int((rel == 0).sum())
        ax.hist(rel[rel > 0], bins=bins, histtype="step", lw=1.4,
                label=rep.name + (f" ({zeros} cells exactly 0, not drawn)" if zeros else ""))
    env = result.envelope
    ax.axvline(env.e_a, ls="--", c="g", lw=1, label="e_a (emulated W4A4, whole output)")
    ax.set_xscale("log")
    ax.set_xlabel("relative error vs reference per (token, expert) cell")
    ax.set_ylabel("cells")
    ax.legend(fontsize=7)
    return fig


def plot_expert_load(problem):
    """Bar per expert e of ``problem``: the (token, slot) pairs routed to it, ``#{(t, j): topk_ids[t, j] = e}``
    (:meth:`~sm120lab.moe.problem.MoEProblem.expert_counts`), titled with the problem's routing.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    counts = problem.expert_counts().cpu().numpy()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.bar(np.arange(len(counts)), counts)
    ax.set_xlabel("expert")
    ax.set_ylabel("routed (token, slot) pairs")
    ax.set_title(f"expert load ({problem.describe()['routing']} routing)")
    fig.tight_layout()
    return fig


def output_pair(result, name: str):
    """``(report of backend name, reference report)`` when both ran with their outputs kept, else None."""
    rep, ref = result.reports.get(name), result.reports.get("reference")
    if rep is None or ref is None or rep.output is None or ref.output is None or rep.diff is None:
        return None
    return rep, ref


def plot_output_row(result, name: str = "fault-linear-as-swizzled", label: str = "linear scales read as swizzled"):
    """One output row of backend ``name`` drawn over the reference's, at the token with the largest
    relative error ``argmax_t ||out_t - ref_t|| / ||ref_t||`` (infinite errors left out).

    Args:
        result: a :class:`~sm120lab.moe.harness.CheckResult` run with ``keep_output=True``.
        name: the backend (by default the planted fault that reads linear scales as swizzled).
        label: its legend entry.

    Returns:
        The matplotlib figure, or None when ``name`` or the reference did not run (:func:`output_pair`).
    """
    import matplotlib.pyplot as plt

    pair = output_pair(result, name)
    if pair is None:
        return None
    rep, ref = pair
    t = int(np.argmax(np.nan_to_num(rep.diff.per_token, posinf=0)))
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.plot(ref.output[t].double().cpu().numpy(), lw=1, label="reference")
    ax.plot(rep.output[t].double().cpu().numpy(), lw=1, alpha=.8, label=label)
    ax.set_title(f"token {t}: one output row")
    ax.set_xlabel("hidden channel")
    ax.set_ylabel("output value")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
