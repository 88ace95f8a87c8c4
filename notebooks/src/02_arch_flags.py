# %% [markdown]
# # 02 · Arch flags, toolkits and shared memory, settled by compiling
#
# The seed report spent days on `compute_120` vs `120a` vs `120f` and on CUDA 12.8 vs 13.0. All of
# it can be decided on a CPU machine: compile one small probe kernel per feature with each CUDA
# toolkit for each target and read the machine code (SASS) that comes out; compile FlashInfer's
# own SM120 grouped-GEMM sources and read the size of their shared storage.
#
# - **Probes** (`sm120lab/archflags/cuda_probes/*.cu`): the SM120 block-scaled FP4 MMA (NVFP4 and MXFP4),
#   the `mxf8f6f4` block-scaled MMA, plain FP8 `mma.sync`, `cvt ... e2m1x2`, `wgmma`, `tcgen05`,
#   `griddepcontrol` (PDL), TMA, a CUTLASS-style arch-conditional kernel, and a macro probe.
# - **Toolkits**: CUDA 12.8 and 12.9 from PyPI wheels (NVRTC + that version's `ptxas`) and 13.0
#   (`nvcc`): `sm120lab toolchains install 12.8 12.9 13.0`.
# - The full matrix takes ~10 minutes on 2 cores, so this notebook **reads the recorded matrix**
#   (`data/archflags/matrix.json`, written by `sm120lab archflags`) and recompiles a small subset
#   with the toolkits this machine has, to show the recording still holds here.

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from sm120lab import cutlass_smem, recommend
from sm120lab.archflags import matrix as mx
from sm120lab.archflags.probes import get_probe
from sm120lab.archflags.summary import CODES, cell_code, cells_frame, describe, find, grid, load
from sm120lab.archflags.verdicts import verdict_table
from sm120lab.constants import SM120_SMEM_LIMIT
from sm120lab.cutlass_smem.analysis import configs
from sm120lab.paths import data_dir
from sm120lab.runs import answer, results
from sm120lab.runs.answer import Answer, Status

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 120)

# %% tags=["parameters"]
matrix_json = "../data/archflags/matrix.json"   # the recorded full matrix
toolkits = None        # None: every toolkit found here (sm120lab toolchains --list); e.g. ["12.9", "13.0"]
targets = None         # None: the small live subset below; e.g. ["sm_120a", "compute_120f->sm_121a"]
probes = None          # None: the small live subset below; e.g. ["mma_nvfp4", "wgmma"]
live_compile = True    # recompile a subset here and compare with the recording
gpu_probes = "auto"    # "auto": run the probes on this machine's CUDA GPU when there is one; False: never
compile_cutlass = False  # compile FlashInfer's SM120 grouped GEMM sources (~3 min each) instead of reading data/
jobs = 2
guide_gpu = "rtx-pro-6000"   # the decision guide's GPU: rtx-pro-6000 | rtx-5090 | dgx-spark

# %%
# The recorded matrix, the claims it settles, and the recorded CUTLASS shared-storage sizes.
matrix = load(matrix_json)
tks_in = [t["name"] for t in matrix["toolkits"]]
newest = sorted(tks_in, key=lambda v: tuple(map(int, v.split("."))))[-1]
cells = cells_frame(matrix)
verdict_df = verdict_table(matrix)
if compile_cutlass:
    for version in ("0.6.5", "0.7.4"):
        cutlass_smem.measure_cached(version, jobs=jobs)
smem_results = {(r["flashinfer_version"], r["patched"]): r for r in cutlass_smem.recorded()}
over = {v: [d for d in configs(r, dedupe_output_type=False) if not d["fits"]]
        for (v, patched), r in smem_results.items() if not patched}
kinds = {v: len(r["records"]) for (v, patched), r in smem_results.items() if not patched}
over_after = {v: sum(not d["fits"] for d in configs(r, dedupe_output_type=False))
              for (v, patched), r in smem_results.items() if patched}

# Recompile a subset here (CPU only: needs a CUDA toolkit, not a GPU).
live, live_why = None, "live_compile=False"
if live_compile:
    try:
        tks, tgs, prs = mx.resolve(toolkits, targets or ["sm_120", "sm_120a", "sm_120f", "compute_120f->sm_121a",
                                                        "compute_120a->sm_121a"],
                                   probes or ["mma_nvfp4", "arch_conditional", "macros"])
        live = mx.run_matrix(tks, tgs, prs, jobs=jobs, progress=False)
    except Exception as exc:  # noqa: BLE001 - no toolkit here: one line, no traceback
        live_why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
live_rows = []
for c in (live or {}).get("cells", []):
    rec = find(matrix, c["toolkit"], c["probe"], c["target"])
    same = rec is not None and (rec["status"], rec["sass"], rec["stub"]) == (c["status"], c["sass"], c["stub"])
    live_rows.append({"toolkit": c["toolkit"], "probe": c["probe"], "target": c["target"], "status": c["status"],
                      "sass": ", ".join(c["sass"]), "seconds": c["seconds"],
                      "matches recording": "yes" if same else ("not recorded" if rec is None else "NO")})

# Run the probes on this machine's GPU (any CUDA GPU; SM120 probes only on SM12x).
gpu, gpu_why = None, "gpu_probes=False"
if gpu_probes and torch.cuda.is_available():
    try:
        from sm120lab.archflags.gpu_run import run_gpu_probes
        gpu = run_gpu_probes()
    except Exception as exc:  # noqa: BLE001 - one line, no traceback
        gpu_why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
elif gpu_probes:
    gpu_why = "no CUDA GPU on this machine"

# %%
box = []
for _, row in verdict_df.iterrows():
    box.append(Answer(row["claim"], row["verdict"], Status.info,
                      "recorded compile matrix: " + "; ".join(row["evidence"].split(" | ")[:2])))
if over:
    tiles = sorted({f"{d['tile']} {d['epilogue']}" for ds in over.values() for d in ds})
    worst = max((d for ds in over.values() for d in ds), key=lambda d: d["kernel_smem"])
    box.append(Answer(f"FlashInfer SM120 NVFP4 grouped-GEMM tiles over the {SM120_SMEM_LIMIT:,} B limit",
                      f"{len(tiles)} tiles: {', '.join(tiles)} ({worst['kernel_smem']:,} B)", Status.bad,
                      "; ".join(f"FlashInfer {v}: {len(ds)} of {kinds[v]} kernel types" for v, ds in sorted(over.items()))
                      + "; with the stage-count patch: "
                      + ", ".join(f"{n} over ({v})" for v, n in sorted(over_after.items()))))
else:
    box.append(Answer("FlashInfer SM120 shared-memory overflow", "not run", Status.not_run,
                      "no CUTLASS shared-memory data in data/cutlass_smem/ (sm120lab cutlass-smem)"))
if live_rows:
    n_same = sum(r["matches recording"] == "yes" for r in live_rows)
    box.append(Answer("the recorded matrix holds on this machine", "yes" if n_same == len(live_rows) else "NO",
                      Status.ok if n_same == len(live_rows) else Status.bad,
                      f"{n_same} of {len(live_rows)} cells recompiled with CUDA {', '.join(sorted({r['toolkit'] for r in live_rows}))} "
                      "match"))
else:
    box.append(Answer("the recorded matrix holds on this machine", "not run", Status.not_run, live_why))
if gpu is not None:
    ok = [r for r in gpu["results"] if r.get("ok")]
    box.append(Answer(f"probe kernels run correctly on this GPU ({gpu.get('device', 'CUDA GPU')})",
                      f"{len(ok)} of {len(gpu['results'])}", Status.ok if len(ok) == len(gpu["results"]) else Status.bad,
                      ", ".join(f"{r['probe']}@{r['target']}: {'ok' if r.get('ok') else 'FAILED'}" for r in gpu["results"])))
else:
    box.append(Answer("probe kernels run correctly on this GPU", "not run", Status.not_run, gpu_why))
answer.show(box)
_ = answer.record(box, "02_arch_flags")

# %% [markdown]
# ## 1. The root cause: one pipeline stage too many for SM120's shared memory
#
# FlashInfer's SM120 NVFP4 MoE grouped GEMM is a CUTLASS kernel whose number of pipeline stages
# CUTLASS picks automatically: it divides the shared memory that is left after the epilogue's
# carve-out by the bytes of one stage. The kernel's `SharedStorage`, however, also holds the
# pipeline barriers, the scheduler's response buffer and the tensor maps, and it is aligned to
# 1024 B, and the stage-count formula counts neither the alignment nor (in CUTLASS 4.2.1) those
# extra parts. For two tiles the arithmetic lands just over the limit (compiled from FlashInfer's
# own generated sources, `sm120lab.cutlass_smem`, recorded in `data/cutlass_smem/`):
#
# **3 x 27,648 B** (three stages of A + B + their scale factors) **+ 16,896 B** (epilogue tensors)
# **+ 1,248 B** (pipelines, scheduler response, tensor maps) **= 101,088 B** of parts; aligned to
# 1024 B that is **102,400 B > 101,376 B**, the most shared memory one block may have on SM120/SM121.
# The tiles are the NVFP4 `128x256x128` and `256x128x128` tiles with the `FINALIZE` epilogue (the
# fused weighted sum of the down projection) without swap-AB, in FlashInfer 0.6.5 and 0.7.4.
# The sizes come from the kernel's C++ types on the host, and nothing in them depends on the arch
# suffix, so a `120a` build and a `120f` build get the same 3-stage tile: the overflow is the same
# under both flags. With two stages (the stage-count patch of notebook 05) every tile fits.
#
# What it does **not** explain: the seed's 120a -> 120f speed difference (14.6 -> 39 tok/s; the
# overflow is identical under both). Nor does the suffix itself, as far as FlashInfer's sources
# show: no tactic filter or compile path of its SM120 MoE depends on it (`notes/arch_suffix.md`);
# the toolkit (CUDA 12.8 -> 13.0) and a fresh JIT build changed in the same step, and separating
# them needs a run on SM120 hardware. What an SM120 GPU does with an over-limit tactic at run time
# (a launch failure the autotuner skips, or a crash) is **unverified on SM120 hardware**.
# The numbers, computed from the recorded data:

# %%
# NBVAL_CHECK_OUTPUT
for version, rows_over in sorted(over.items()):
    seen = set()
    for d in rows_over:
        key = (d["tile"], d["epilogue"], d["swap_ab"])
        if key in seen:
            continue
        seen.add(key)
        print(f"FlashInfer {version}, NVFP4 {d['tile']} {d['epilogue']} swap_ab={d['swap_ab']}: "
              f"{d['stages']} x {d['stage_bytes']:,} + {d['epilogue_tensors']:,} + {d['other_bytes']:,} = "
              f"{d['parts_bytes']:,} B of parts; aligned to 1024 B = {d['kernel_smem']:,} B "
              f"{'>' if d['kernel_smem'] > SM120_SMEM_LIMIT else '<='} {SM120_SMEM_LIMIT:,} B")
    print(f"   {len(rows_over)} of {kinds[version]} instantiated kernel types (one per tile, epilogue, swap-AB "
          f"and output type) over the limit; after the stage-count patch: {over_after.get(version, 'not measured')}")

# %%
if smem_results:
    fig, ax = plt.subplots(figsize=(14, 5.5))
    cutlass_smem.plot_stage_bytes(ax=ax)
    ax.set_xlabel("kernel config: FlashInfer version, tile MxNxK, epilogue, swap-AB")
    plt.tight_layout()
    plt.show()
else:
    print("no CUTLASS shared-memory data recorded (data/cutlass_smem/ is empty; run `sm120lab cutlass-smem`)")

# %% [markdown]
# ## 2. What the `a` and `f` suffixes mean
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
# ## 3. The matrix
#
# One panel per toolkit: rows are probes, columns targets. **feature** = accepted and the proving
# opcode is in the SASS; **stub** = accepted but compiled into the `printf`+`trap` fallback;
# **ptxas** = rejected by `ptxas`; **arch** = the toolkit does not know the target name.

# %%
COLORS = {"feature": "#2ca02c", "accepted": "#98df8a", "stub": "#ff7f0e", "ptxas": "#d62728",
          "arch": "#7f7f7f", "error": "#000000"}
cmap = ListedColormap([COLORS[c] for c in CODES])
fig, axes = plt.subplots(len(tks_in), 1, figsize=(13, 3.8 * len(tks_in)), squeeze=False)
for ax, tk in zip(axes[:, 0], tks_in):
    g = grid(matrix, tk)
    ax.imshow(g.map(CODES.index).to_numpy(), cmap=cmap, vmin=0, vmax=len(CODES) - 1, aspect="auto")
    ax.set_xticks(range(g.shape[1]), [c.replace("->", "→") for c in g.columns], fontsize=8, rotation=30, ha="right")
    ax.set_yticks(range(g.shape[0]), g.index, fontsize=8)
    for (i, j), code in np.ndenumerate(g.to_numpy()):
        ax.text(j, i, code, ha="center", va="center", fontsize=6, color="white" if code in ("ptxas", "arch", "error") else "black")
    ax.set_title(f"CUDA {tk} ({next(t['frontend'] for t in matrix['toolkits'] if t['name'] == tk)})")
    ax.set_xlabel("compile target")
    ax.set_ylabel("probe kernel")
handles = [Patch(color=COLORS[c], label=c) for c in CODES]
fig.legend(handles=handles, loc="upper center", ncol=len(CODES), title="cell outcome", fontsize=8)
fig.tight_layout(rect=(0, 0, 1, 0.97))
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
for older, newer in zip(tks_in, tks_in[1:]):
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
# ## 4. One `120f` build serves SM121 (DGX Spark); a `120a` build does not

# %%
# NBVAL_CHECK_OUTPUT
for tk in tks_in:
    for tg in ["compute_120f->sm_121a", "compute_120f->sm_121f", "compute_120f->sm_121", "compute_120a->sm_121a",
               "compute_120->sm_121"]:
        print(describe(find(matrix, tk, "mma_nvfp4", tg)))

# %% [markdown]
# ## 5. The `printf`-stub trap of plain `compute_120`
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
# ## 6. The Triton route
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
# ## 7. Verdicts on the seed report's claims
#
# Each verdict is computed from the cells listed beside it (`sm120lab.archflags.verdicts`).

# %%
# NBVAL_CHECK_OUTPUT
for _, row in verdict_df.iterrows():
    print(f"[{row['verdict']}] {row['claim']}")
    for e in row["evidence"].split(" | "):
        print(f"      {e}")

# %% [markdown]
# ## 8. Recompile here
#
# The subset compiled above with this machine's toolkits (CI: the system nvcc 13.0 only), against
# the recording. Set `toolkits` / `targets` / `probes` to run any part of the matrix
# (`sm120lab archflags` does the whole of it).

# %%
# NBVAL_IGNORE_OUTPUT
if live_rows:
    print(pd.DataFrame(live_rows).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(f"{len(live_rows)} cells in {live['wall_seconds']:.1f} s")
    results.record_compile_matrix("02_arch_flags", {f"{r['probe']}|{r['toolkit']}|{r['target']}": r["status"]
                                                    for r in live_rows})
else:
    print(f"live compile not run: {live_why}")

# %% [markdown]
# ## 9. On a GPU: run the probes and check the numbers
#
# `sm120lab.archflags.gpu_run` compiles the probes the device supports, runs them through the
# CUDA driver API and checks each against a CPU reference; the block-scaled FP4 MMA tile is
# checked against an exact emulation of the PTX instruction
# (`sm120lab.archflags.mma_block_scale_emulation`). The SM120 probes are **unverified on SM120
# hardware** until a run from an SM120 GPU is recorded. The recorded probe runs, then this run:

# %%
# NBVAL_IGNORE_OUTPUT
recorded_probes = data_dir() / "archflags" / "h200_probes.json"
if recorded_probes.is_file():
    rec = json.loads(recorded_probes.read_text())
    print(f"data/archflags/{recorded_probes.name}: {rec['device']} (cc {rec['compute_capability']}), "
          f"{rec['envinfo']['timestamp_utc']}")
    print(pd.DataFrame([{k: r.get(k) for k in ("probe", "target", "ok", "max_abs_err", "error")}
                        for r in rec["results"]]).to_string(index=False))
for run_results in sorted((data_dir() / "runs").glob("*/results/02_arch_flags.json")):
    probes_run = json.loads(run_results.read_text()).get("gpu_probes")
    if probes_run:
        print(f"run {run_results.parts[-3]}: " + ", ".join(f"{r['probe']} {'ok' if r.get('ok') else 'FAILED'}"
                                                        for r in probes_run["results"]))
print("this run: " + (", ".join(f"{r['probe']}@{r['target']} {'ok' if r.get('ok') else 'FAILED'}"
                                for r in gpu["results"]) if gpu is not None else f"not run ({gpu_why})"))

# %% [markdown]
# A recorded `wgmma` failure that a later run does not show is the probe harness's old bug (it
# issued `wgmma` with `imm-trans-b = 1`, reading B as N-major, while B was laid out K-major), not
# the hardware: the lines above show which recording predates the fix.

# %%
_ = results.record("02_arch_flags", {
    "claims": verdict_df[["claim", "verdict"]].to_dict("records"),
    "recorded_matrix": {"toolkits": tks_in, "cells": len(cells), "codes": cells["code"].value_counts().to_dict()},
    "smem_over_limit": {v: sorted({f"{d['tile']} {d['epilogue']} swap_ab={d['swap_ab']}" for d in ds})
                        for v, ds in over.items()},
})
if gpu is not None:
    _ = results.record("02_arch_flags", {"gpu_probes": gpu})
    _ = results.record_verdicts("02_arch_flags", {f"gpu-probe:{r['probe']}@{r['target']}":
                                                  "correct" if r.get("ok") else "garbage" for r in gpu["results"]})


# %% [markdown]
# ## 10. What to set: the decision guide (arch flags, toolkit and versions)
#
# The part of `sm120lab recommend` this notebook supports, for `guide_gpu`: each item with its
# evidence level (`sm120-run` only once a run from an SM120 machine is archived in `data/runs/`)
# and its source. `sm120lab recommend --gpu rtx-pro-6000` (or `rtx-5090`, `dgx-spark`) prints the
# whole guide.

# %%
# NBVAL_IGNORE_OUTPUT
guide_topics = ['archflags', 'versions']
recommend.show(recommend.section(recommend.guide(guide_gpu), guide_topics),
               title=f"decision guide for {guide_gpu}: {', '.join(guide_topics)}")
