# %% [markdown]
# # 02 · Arch flags and toolkits, settled by compiling
#
# The seed report spent days on `compute_120` vs `120a` vs `120f` and on CUDA 12.8 vs 13.0. All of
# it can be decided on a CPU machine: compile one small probe kernel per feature with each CUDA
# toolkit for each target, and read the machine code (SASS) that comes out.
#
# - **Probes** (`sm120lab/kernels/probes/*.cu`): the SM120 block-scaled FP4 MMA (NVFP4 and MXFP4),
#   the `mxf8f6f4` block-scaled MMA, plain FP8 `mma.sync`, `cvt ... e2m1x2`, `wgmma`, `tcgen05`,
#   `griddepcontrol` (PDL), TMA, a CUTLASS-style arch-conditional kernel, and a macro probe.
# - **Toolkits**: CUDA 12.8 and 12.9 from PyPI wheels (NVRTC + that version's `ptxas`; the 12.x PyPI
#   `nvcc` has no front end) and 13.0 (`nvcc`). `sm120lab toolchains install 12.8 12.9 13.0`.
# - **Each cell**: accepted / rejected at the arch name / rejected by `ptxas`, the first error, the
#   SASS opcodes that prove the feature (or that the kernel became a `printf` stub), the macros.
#
# The full matrix takes ~10 minutes on 2 cores, so by default this notebook **reads the recorded
# matrix** (`data/archflags/matrix.json`, written by `sm120lab archflags`) and recompiles a small
# subset with whatever toolkits this machine has, to show the recording still holds here.

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap

from sm120lab import results
from sm120lab.archflags import matrix as mx
from sm120lab.archflags.probes import get_probe
from sm120lab.archflags.summary import CODES, cell_code, cells_frame, describe, find, grid, load
from sm120lab.archflags.verdicts import verdict_table

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 120)

# %% tags=["parameters"]
matrix_json = "../data/archflags/matrix.json"   # the recorded full matrix
toolkits = None        # None: every toolkit found here (sm120lab toolchains --list); e.g. ["12.9", "13.0"]
targets = None         # None: the small live subset below; e.g. ["sm_120a", "compute_120f->sm_121a"]
probes = None          # None: the small live subset below; e.g. ["mma_nvfp4", "wgmma"]
live_compile = True    # recompile a subset here and compare with the recording
compile_cutlass = False  # compile FlashInfer's SM120 grouped GEMM sources (~3 min each) instead of reading data/
jobs = 2

# %% [markdown]
# ## 1. What the `a` and `f` suffixes mean
#
# | target | runs on | meaning |
# |---|---|---|
# | `sm_120` / `compute_120` | 12.0 and, as PTX, later chips | portable: only features every later GPU keeps |
# | `sm_120a` | exactly 12.0 | **architecture-specific**: every feature of this chip, no forward compatibility |
# | `sm_120f` | 12.0 and later members of its family (12.1) | **family-specific**: the features the family shares |
#
# The block-scaled FP4 tensor-core MMA is not a portable feature, so plain `compute_120` cannot use
# it. Which macros each target defines decides what CUTLASS-style guarded code compiles to
# (read from the macro probe's compile, no GPU):

# %%
matrix = load(matrix_json)
newest = sorted((t["name"] for t in matrix["toolkits"]), key=lambda v: tuple(map(int, v.split("."))))[-1]
cells = cells_frame(matrix)

# %%
# NBVAL_IGNORE_OUTPUT
print("recorded:", matrix["envinfo"]["timestamp_utc"], "on", matrix["envinfo"]["host"], "by:", matrix["command"])
print(pd.DataFrame(matrix["toolkits"])[["name", "version", "frontend", "origin"]].to_string(index=False))

# %%
# NBVAL_CHECK_OUTPUT
MACROS = ["__CUDA_ARCH__", "__CUDA_ARCH_SPECIFIC__", "__CUDA_ARCH_FAMILY_SPECIFIC__",
          "__CUDA_ARCH_FEAT_SM120_ALL", "__CUDA_ARCH_FEAT_SM121_ALL"]
macro_rows = []
for tk in [t["name"] for t in matrix["toolkits"]]:
    for tg in ["sm_120", "sm_120a", "sm_120f", "sm_121a", "sm_121f", "compute_120f->sm_121a"]:
        c = find(matrix, tk, "macros", tg)
        if c is None or not c["macros"]:
            macro_rows.append({"toolkit": tk, "target": tg, **{m: "" for m in MACROS}, "note": c["status"] if c else "-"})
            continue
        macro_rows.append({"toolkit": tk, "target": tg, **{m: c["macros"].get(m, "-") for m in MACROS}, "note": ""})
macro_df = pd.DataFrame(macro_rows).rename(columns=lambda s: s.replace("__CUDA_ARCH", "").strip("_") or s)
print(macro_df.to_string(index=False))

# %% [markdown]
# Read off the table: `f` defines only `__CUDA_ARCH_FAMILY_SPECIFIC__`, never `__CUDA_ARCH_FEAT_SM120_ALL`,
# so code guarded on the `FEAT` macro alone silently compiles into its fallback under `120f`; the
# `SPECIFIC`/`FAMILY` macros exist from 12.9 on; a `compute_120f -> sm_121a` build reports `1200`
# (the PTX was made for 12.0) yet runs on 12.1. One toolkit difference shows too: with 12.9 (NVRTC),
# `sm_121a` defines no `__CUDA_ARCH_FEAT_SM121_ALL` (13.0 does), so the FEAT-only guarded probe
# below is a stub for 12.9 `sm_121a` and real MMA for 13.0.
#
# ## 2. The matrix
#
# One panel per toolkit: rows are probes, columns targets. **feature** = accepted and the proving
# opcode is in the SASS; **stub** = accepted but compiled into the `printf`+`trap` fallback;
# **ptxas** = rejected by `ptxas`; **arch** = the toolkit does not know the target name.

# %%
COLORS = {"feature": "#2ca02c", "accepted": "#98df8a", "stub": "#ff7f0e", "ptxas": "#d62728",
          "arch": "#7f7f7f", "error": "#000000"}
cmap = ListedColormap([COLORS[c] for c in CODES])
tks_in = [t["name"] for t in matrix["toolkits"]]
fig, axes = plt.subplots(len(tks_in), 1, figsize=(13, 3.8 * len(tks_in)), squeeze=False)
for ax, tk in zip(axes[:, 0], tks_in):
    g = grid(matrix, tk)
    ax.imshow(g.map(CODES.index).to_numpy(), cmap=cmap, vmin=0, vmax=len(CODES) - 1, aspect="auto")
    ax.set_xticks(range(g.shape[1]), [c.replace("->", "→") for c in g.columns], fontsize=8, rotation=30, ha="right")
    ax.set_yticks(range(g.shape[0]), g.index, fontsize=8)
    for (i, j), code in np.ndenumerate(g.to_numpy()):
        ax.text(j, i, code, ha="center", va="center", fontsize=6, color="white" if code in ("ptxas", "arch", "error") else "black")
    ax.set_title(f"CUDA {tk} ({next(t['frontend'] for t in matrix['toolkits'] if t['name'] == tk)})")
fig.tight_layout()
plt.show()

# %% [markdown]
# The SASS behind the green cells (newest toolkit; the same opcodes in every toolkit that accepts the target):

# %%
# NBVAL_CHECK_OUTPUT
ev = cells[(cells.toolkit == newest) & (cells.code == "feature") & (cells.frontend != "triton")]
ev_table = (ev.assign(sass=ev["sass"].map(", ".join)).groupby(["probe", "sass"])["target"]
            .agg(lambda s: " ".join(t for t in s if "->" not in t)).reset_index())
print(ev_table.to_string(index=False))

# %% [markdown]
# Does the toolkit matter once it accepts the target? Every cell two toolkits share, compared by
# code and SASS opcodes (12.x goes through NVRTC + ptxas, 13.0 through nvcc):

# %%
# NBVAL_CHECK_OUTPUT
cpp = [t for t in tks_in]
for older, newer in zip(cpp, cpp[1:]):
    both, diffs = 0, []
    for c in matrix["cells"]:
        if c["toolkit"] != older:
            continue
        o = find(matrix, newer, c["probe"], c["target"])
        if o is None or "arch" in (cell_code(c), cell_code(o)):
            continue
        both += 1
        if (cell_code(c), c["sass"]) != (cell_code(o), o["sass"]):
            diffs.append(f"{c['probe']} {c['target']}: {older} {cell_code(c)} vs {newer} {cell_code(o)}")
    print(f"{older} vs {newer}: {both} cells accepted-or-rejected by both, {len(diffs)} differ")
    for line in diffs:
        print("   ", line)

# %% [markdown]
# `mma_fp8` shows the one surprise: plain FP8 `mma.sync` compiles everywhere from `sm_89`, but only
# Ada and the SM12x parts have a native FP8 warp MMA (`QMMA`); on Hopper and datacenter Blackwell
# `ptxas` emulates it with `HMMA` (those chips do FP8 through `wgmma` / `tcgen05`).
#
# ## 3. One `120f` build serves SM121 (DGX Spark); a `120a` build does not

# %%
# NBVAL_CHECK_OUTPUT
for tk in tks_in:
    for tg in ["compute_120f->sm_121a", "compute_120f->sm_121f", "compute_120f->sm_121", "compute_120a->sm_121a",
               "compute_120->sm_121"]:
        print(describe(find(matrix, tk, "mma_nvfp4", tg)))

# %% [markdown]
# ## 4. The `printf`-stub trap of plain `compute_120`
#
# CUTLASS puts the block-scaled MMA behind the feature macros; on any other target the same kernel
# compiles **cleanly** into `printf("... Arch conditional MMA instruction used without targeting
# appropriate compute capability ...")` followed by `trap`. So the seed's error is a run-time
# message from a kernel that compiled, not a compile error. Using the instruction directly on
# `sm_120` is the compile error:

# %%
# NBVAL_CHECK_OUTPUT
for probe in ["arch_conditional", "arch_conditional_feat_only", "mma_nvfp4"]:
    for tg in ["sm_120", "sm_120a", "sm_120f", "sm_121"]:
        print(describe(find(matrix, newest, probe, tg)))
stub_src = get_probe("arch_conditional").source()
print("stub message in the probe source:", "Arch conditional MMA instruction used without targeting" in stub_src)

# %% [markdown]
# ## 5. The Triton route
#
# Triton compiles ahead of time for a GPU we do not have (`triton.compile(ASTSource(...),
# target=GPUTarget("cuda", cc, 32))`). Its `tl.dot_scaled` with E2M1 operands lowers on `sm_120`
# to the same block-scaled `mma.sync` (NVFP4: `scale_vec::4X ... ue4m3`; MXFP4: `2X ... ue8m0`):

# %%
# NBVAL_CHECK_OUTPUT
tri = cells[cells.frontend == "triton"]
if tri.empty:
    print("no Triton rows in the recorded matrix (recorded with --no-triton or without Triton)")
else:
    tri_table = tri.assign(instruction=tri["ptx_instructions"].map(lambda xs: ", ".join(xs) or "-"))[
        ["toolkit", "probe", "target", "status", "shared", "instruction"]]
    print(tri_table.to_string(index=False))

# %% [markdown]
# ## 6. Verdicts on the seed report's claims
#
# Each verdict is computed from the cells listed beside it (`sm120lab.archflags.verdicts`).

# %%
# NBVAL_CHECK_OUTPUT
verdict_df = verdict_table(matrix)
for _, row in verdict_df.iterrows():
    print(f"[{row['verdict']}] {row['claim']}")
    for e in row["evidence"].split(" | "):
        print(f"      {e}")

# %%
results.record("02_arch_flags", {
    "claims": verdict_df[["claim", "verdict"]].to_dict("records"),
    "recorded_matrix": {"toolkits": tks_in, "cells": len(cells),
                        "codes": cells["code"].value_counts().to_dict()},
})

# %% [markdown]
# ## 7. Recompile here
#
# With the toolkits this machine has (CI: the system nvcc 13.0 only), compile a few cells again
# and compare with the recording. Set `toolkits` / `targets` / `probes` to run any part of the
# matrix (`sm120lab archflags` does the whole of it).

# %%
# NBVAL_IGNORE_OUTPUT
live = None
if not live_compile:
    print("live compile skipped (live_compile=False)")
else:
    try:
        live_targets = targets or ["sm_120", "sm_120a", "sm_120f", "compute_120f->sm_121a", "compute_120a->sm_121a"]
        live_probes = probes or ["mma_nvfp4", "arch_conditional", "macros"]
        tks, tgs, prs = mx.resolve(toolkits, live_targets, live_probes)
        live = mx.run_matrix(tks, tgs, prs, jobs=jobs, progress=False)
    except Exception as exc:  # no toolkit / no network for the SASS tool: say so in one line
        print(f"live compile not possible here: {type(exc).__name__}: {exc}")
if live is not None:
    rows = []
    for c in live["cells"]:
        rec = find(matrix, c["toolkit"], c["probe"], c["target"])
        same = rec is not None and (rec["status"], rec["sass"], rec["stub"]) == (c["status"], c["sass"], c["stub"])
        rows.append({"toolkit": c["toolkit"], "probe": c["probe"], "target": c["target"], "status": c["status"],
                     "sass": ", ".join(c["sass"]), "s": c["seconds"], "cached": c["cached"],
                     "matches recording": "yes" if same else ("not recorded" if rec is None else "NO")})
    live_df = pd.DataFrame(rows)
    print(live_df.to_string(index=False))
    print(f"{len(rows)} cells in {live['wall_seconds']} s; all match the recording:",
          all(r["matches recording"] != "NO" for r in rows))
    results.record_compile_matrix("02_arch_flags", {f"{r['probe']}|{r['toolkit']}|{r['target']}": r["status"]
                                                    for r in rows})

# %% [markdown]
# ## 8. On a GPU: run the probes and check the numbers
#
# `python -m sm120lab.archflags.gpu_run` compiles the probes the device supports, runs them through
# the CUDA driver API and checks each against a CPU reference; the block-scaled FP4 MMA tile is
# checked against an exact emulation of the PTX instruction (`sm120lab.kernels.mma_block_scale_emulation`:
# fragment layouts and scale-factor selection). The SM120 path is **unverified on SM120 hardware**
# until a recorded run from an SM120 GPU exists. Recorded once on an H200 (SM90 probes). The `wgmma`
# row failed in that run because of a bug in the probe harness, not the hardware: the instruction
# was issued with `imm-trans-b = 1` (B read as N-major) while B was laid out K-major. The probe now
# passes `imm-trans-b = 0`; that fix has not been run on a GPU yet (one run was allowed).

# %%
# NBVAL_IGNORE_OUTPUT
h200 = Path("../data/archflags/h200_probes.json")
if h200.is_file():
    rec = json.loads(h200.read_text())
    print(rec["device"], rec["compute_capability"], "driver", rec["envinfo"]["gpu"].get("driver"))
    print(pd.DataFrame([{k: r.get(k) for k in ("probe", "target", "toolkit", "ok", "max_abs_err", "exact", "error")}
                        for r in rec["results"]]).to_string(index=False))
else:
    print("no recorded GPU run (data/archflags/h200_probes.json absent)")

# %%
# NBVAL_IGNORE_OUTPUT
import torch  # noqa: E402

if torch.cuda.is_available():
    from sm120lab.archflags.gpu_run import run_gpu_probes
    gpu = run_gpu_probes()
    print(pd.DataFrame([{k: r.get(k) for k in ("probe", "target", "ok", "max_abs_err", "exact", "error")}
                        for r in gpu["results"]]).to_string(index=False))
    results.record("02_arch_flags", {"gpu_probes": gpu})
    results.record_verdicts("02_arch_flags", {f"gpu-probe:{r['probe']}@{r['target']}": "correct" if r.get("ok") else "garbage"
                                              for r in gpu["results"]})
else:
    print("no CUDA GPU here: the probes were compiled, not run")

# %% [markdown]
# ## 9. Shared memory and pipeline stages (CUTLASS SM120 grouped GEMM)
#
# Measured by `sm120lab.cutlass_smem` (another part of this workbook): FlashInfer's generated SM120
# NVFP4 grouped-GEMM sources compiled host-only, stage count and shared-storage size per tile,
# against SM120's 101,376 B. Read from `data/cutlass_smem/` unless `compile_cutlass=True`.

# %%
# NBVAL_IGNORE_OUTPUT
try:
    from sm120lab import cutlass_smem
    recorded = cutlass_smem.recorded()
    if compile_cutlass:
        for version in ("0.6.5", "0.7.4"):
            cutlass_smem.measure_cached(version, jobs=jobs)
        recorded = cutlass_smem.recorded()
    if not recorded:
        print("no CUTLASS shared-memory data recorded yet (data/cutlass_smem/ is empty; run `sm120lab cutlass-smem`)")
    else:
        fig, ax = plt.subplots(figsize=(14, 5))
        cutlass_smem.plot_stage_bytes(ax=ax)
        plt.show()
except Exception as exc:
    print(f"CUTLASS shared-memory figure not available: {type(exc).__name__}: {exc}")
