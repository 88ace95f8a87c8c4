# %% [markdown]
# # 06 · What changed between runs
#
# Every time a driver, CUDA toolkit, FlashInfer or vLLM release lands, re-run the workbook
# (`make run`, or `sm120lab run --matrix settings.yaml` for several settings at once) and compare:
# which backends went from garbage to correct, which arch-flag cells now compile, which timings
# moved beyond their noise. The same comparison on the command line is
# `sm120lab compare RUN_A RUN_B ...` (non-zero exit status on a correctness regression).
#
# Under `sm120lab run` this notebook judges **the run it is part of** against every run recorded
# in `data/runs/` (`sm120lab.runs.compare.against_recorded`). Opened on its own on a new machine, it
# judges that machine's newest run (the newest folder under `runs/` that `make run` wrote), or,
# when there is none yet, compares the recorded runs with each other. Pass `runs` to compare any
# run folders.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from matplotlib.patches import Patch

from sm120lab.paths import data_dir
from sm120lab.runs import answer, results
from sm120lab.runs.answer import Answer, Status
from sm120lab.runs.compare import (
    Assessment,
    against_recorded,
    compare_many,
    current_run_dir,
    plot_bench_runs,
    recorded_runs,
    run_overview,
    timeline,
)

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 60)

# %% tags=["parameters"]
# run folders to compare, the first one the baseline (empty: this run against data/runs/, or,
# outside a run, the recorded runs with each other)
runs = []
# smallest relative bench change ever called a regression
min_rel = 0.05

# %%
this_run = current_run_dir()
local_runs = recorded_runs(data_dir().parent / "runs")    # what `make run` wrote on this machine
if this_run is None and local_runs:
    this_run = local_runs[-1]
if runs:
    mode, folders = "the runs given in `runs`", [Path(r) for r in runs]
    comparisons = compare_many(folders, min_rel=min_rel) if len(folders) >= 2 else []
elif this_run is not None:
    in_progress = current_run_dir() is not None
    mode = "this run against every recorded run" if in_progress else f"this machine's newest run ({this_run.name})"
    folders = [*recorded_runs(), this_run]
    comparisons = against_recorded(None if in_progress else this_run, min_rel=min_rel)
else:
    mode, folders = "the recorded runs with each other (no run of this machine yet)", recorded_runs()
    comparisons = compare_many(folders, min_rel=min_rel) if len(folders) >= 2 else []


box = []
for c in comparisons:
    corr, regs = c.correctness_regressions, c.regressions
    fixes = c.count(Assessment.FIX, Assessment.IMPROVEMENT)
    other = "this run" if this_run is not None and c.other == this_run.name else c.other
    value = f"{len(corr)} correctness regression(s), {len(regs) - len(corr)} other, {fixes} fix(es)/improvement(s)"
    if c.device_differs:
        value += f", {len(c.not_comparable)} not comparable (device differs)"
    box.append(Answer(f"{other} vs {c.baseline}", value, Status.bad if regs else Status.ok,
                      f"device {c.devices[0]} -> {c.devices[1]}" + (
                          ": checks that ran on one device only, and timings, are not comparable"
                          if c.device_differs else "")))
if not comparisons:
    box.append(Answer("runs compared", "not run", Status.not_run,
                      f"{len(folders)} run folder(s) found for {mode}: record runs with `sm120lab run`"))
answer.show(box, title=f"Comparison: {mode}")
_ = answer.record(box, "06_compare_runs")

# %% [markdown]
# ## The runs and their environments

# %%
# NBVAL_IGNORE_OUTPUT
display(pd.DataFrame(run_overview(folders, in_progress=current_run_dir())) if folders else "no run folders")

# %% [markdown]
# ## Differences
#
# `regression` on a verdict means correctness evidence was lost: a backend that was `correct`
# is now worse, errored, was skipped, or its verdict is missing, or a notebook failed. Bench
# figures are only called regressions or improvements outside their noise band (the larger
# recorded repeat spread, at least `min_rel`). Between runs on different devices (a CPU-only run
# against a GPU run) a check that ran on one side only, and every timing, is `not comparable`.

# %%
# NBVAL_IGNORE_OUTPUT
diff = pd.DataFrame([{"baseline": c.baseline[:28], "other": c.other[:28], "kind": ch.kind.value,
                      "notebook": ch.notebook, "key": ch.key, "before": ch.before, "after": ch.after,
                      "assessment": ch.assessment.value}
                     for c in comparisons for ch in c.changes if ch.kind.value != "environment"])
for c in comparisons:
    print(c.summary_line())
if diff.empty:
    print("no differences beyond the environment" if comparisons else "nothing to compare")
else:
    print(diff.groupby(["other", "kind", "assessment"]).size().rename("changes").to_string())
    notable = diff[~diff["assessment"].isin(["within-noise", "not comparable"])].sort_values(
        "assessment", key=lambda s: s != "regression")
    if len(notable):
        print(f"\nthe first {min(20, len(notable))} of {len(notable)} comparable changes beyond noise, "
              "regressions first:")
        print(notable.drop(columns=["baseline"]).head(20).to_string(index=False))
    else:
        print("\nno comparable change beyond noise")

# %% [markdown]
# ## Verdicts across runs

# %%
rows = pd.DataFrame(timeline(folders)) if folders else pd.DataFrame()
CODE = {"correct": 0, "degraded": 1, "garbage": 2, "error": 3, "skipped": 4}
COLOURS = ["#2ca02c", "#ffbf00", "#d62728", "#7b2d8e", "#bbbbbb"]
verdict_rows = rows[(rows["kind"] == "verdict") & ~rows["key"].str.startswith("fault-")] if len(rows) else rows
if len(rows) and (rows["kind"] == "verdict").any():
    faults = rows[(rows["kind"] == "verdict") & rows["key"].str.startswith("fault-")]
    for run_name, grp in faults.groupby("run"):
        # a garbage verdict only: notebook 03's "caught and localized" also counts the faults judged by their
        # envelope (a 32-element activation block is correctly called correct), so this number can be lower
        print(f"{run_name}: planted faults with a garbage verdict: {(grp['value'] == 'garbage').sum()} of {len(grp)}"
              " (notebook 03 counts caught and localized)")
if len(verdict_rows):
    v = verdict_rows.pivot_table(index="key", columns="run", values="value", aggfunc="first")
    num = v.apply(lambda col: col.map(lambda s: CODE.get(s, float("nan"))))
    fig, ax = plt.subplots(figsize=(2.5 + 2.2 * num.shape[1], 1.0 + 0.32 * num.shape[0]))
    cmap = plt.matplotlib.colors.ListedColormap(COLOURS)
    cmap.set_bad("white")
    ax.imshow(num.values.astype(float), cmap=cmap, vmin=-0.5, vmax=len(COLOURS) - 0.5, aspect="auto")
    ax.set_xticks(range(num.shape[1]), [c[:30] for c in num.columns], rotation=15, ha="right")
    ax.set_yticks(range(num.shape[0]), num.index, fontsize=7)
    ax.set_xlabel("run")
    ax.set_ylabel("check (backend or probe)")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in zip(CODE, COLOURS)] + [Patch(color="white", ec="k",
              label="not in this run")], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("verdict per check and run")
    plt.tight_layout()
    plt.show()
else:
    print("no verdicts recorded in these runs")

# %% [markdown]
# ## Benchmark figures across runs
#
# One panel per timing and contender (notebook 04's `moe_us`, `w13_us`, `sort_us`), the runs side by
# side at each token count T. Timings from different GPUs show what each machine does; they are
# never called regressions of one another.

# %%
fig, no_bench = plot_bench_runs(folders)
if fig is None:
    print("no bench figures recorded in these runs")
else:
    plt.show()
if no_bench:
    print("runs without bench figures (no GPU, or notebook 04 measured nothing):", ", ".join(no_bench))

# %%
_ = results.record("06_compare_runs", {
    "mode": mode, "runs": [Path(r).name for r in folders],
    "correctness_regressions": {c.baseline: len(c.correctness_regressions) for c in comparisons},
    "not_comparable": {c.baseline: len(c.not_comparable) for c in comparisons},
})
