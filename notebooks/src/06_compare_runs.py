# %% [markdown]
# # 06 · What changed between runs
#
# Every time a driver, CUDA toolkit, FlashInfer or vLLM release lands, re-run the workbook
# (`make run`, or `sm120lab run --matrix settings.yaml` for several settings at once) and compare:
# which backends went from garbage to correct, which arch-flag cells now compile, which timings
# moved beyond their noise. The same comparison on the command line is
# `sm120lab compare RUN_A RUN_B ...` (exit status 1 on a correctness regression).
#
# By default this notebook compares the runs recorded in `data/runs/` (a CPU-only run and an
# H200 run, both committed, trimmed of bulky outputs with `sm120lab archive`).

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from sm120lab import results
from sm120lab.compare import compare_many, load_run, run_overview, timeline
from sm120lab.paths import data_dir

# %% tags=["parameters"]
# run folders (empty: every folder under data/runs/, oldest first)
runs = []
# smallest relative bench change ever called a regression
min_rel = 0.05

# %%
if not runs:
    root = data_dir() / "runs"
    runs = sorted((str(p) for p in root.iterdir() if (p / "summary.json").exists()),
                  key=lambda p: load_run(p).summary.get("started_utc", "")) if root.is_dir() else []
enough = len(runs) >= 2
if not enough:
    print(f"only {len(runs)} run folder(s) found: record runs with `sm120lab run` and pass them as `runs`")

# %% [markdown]
# ## The runs and their environments

# %%
# NBVAL_IGNORE_OUTPUT
pd.DataFrame(run_overview(runs))

# %% [markdown]
# ## Differences against the first run
#
# `regression` on a verdict means a backend that was `correct` is now `degraded` or `garbage`.
# Bench figures are only called regressions or improvements outside their noise band
# (the larger recorded repeat spread, at least `min_rel`).

# %%
# NBVAL_IGNORE_OUTPUT
if enough:
    comparisons = compare_many(runs, min_rel=min_rel)
    diff = pd.DataFrame([{"other": c.other, **ch.__dict__} for c in comparisons for ch in c.changes
                         if ch.kind != "environment"])
    print(f"{sum(len(c.correctness_regressions) for c in comparisons)} correctness regression(s)")
    display(diff if len(diff) else "no differences beyond the environment")
else:
    print("needs two runs")

# %% [markdown]
# ## Verdicts across runs

# %%
rows = pd.DataFrame(timeline(runs)) if enough else pd.DataFrame()
if enough and len(rows) and (rows["kind"] == "verdict").any():
    v = rows[rows["kind"] == "verdict"].pivot_table(index="key", columns="run", values="value", aggfunc="first")
    code = {"correct": 0, "degraded": 1, "garbage": 2}
    num = v.apply(lambda col: col.map(lambda s: code.get(s, float("nan"))))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * num.shape[1], 0.4 + 0.35 * num.shape[0]))
    ax.imshow(num.values, cmap="RdYlGn_r", vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(num.shape[1]), [c[:24] for c in num.columns], rotation=20, ha="right")
    ax.set_yticks(range(num.shape[0]), num.index)
    for (i, j), s in pd.DataFrame(v.values).stack().items():
        ax.text(j, i, s, ha="center", va="center", fontsize=7)
    ax.set_title("verdict per backend and run"); plt.tight_layout(); plt.show()
else:
    print("no verdicts recorded in these runs")

# %% [markdown]
# ## Benchmark figures across runs

# %%
if enough and len(rows) and (rows["kind"] == "bench").any():
    b = rows[rows["kind"] == "bench"]
    keys = sorted(b["key"].unique())[:12]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for key in keys:
        s = b[b["key"] == key]
        ax.errorbar(s["run"], s["value"], yerr=s["value"] * s["spread"].fillna(0) / 2, marker="o", label=key, capsize=3)
    ax.set_yscale("log"); ax.set_ylabel("value (unit per figure)"); ax.legend(fontsize=7, ncol=2)
    ax.set_title("bench figures per run (error bars: recorded repeat spread)")
    plt.xticks(rotation=20, ha="right"); plt.tight_layout(); plt.show()
else:
    print("no bench figures recorded in these runs")

# %%
results.record("06_compare_runs", {"runs": [Path(r).name for r in runs],
                                   "correctness_regressions": sum(len(c.correctness_regressions) for c in comparisons) if enough else None})
