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
import matplotlib.pyplot as plt

from sm120lab import cutlass_smem, recommend
from sm120lab.archflags import lesson
from sm120lab.archflags.summary import cells_frame, load
from sm120lab.archflags.verdicts import verdict_table
from sm120lab.runs import answer, results

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
tks_in, newest = lesson.toolkit_names(matrix), lesson.newest_toolkit(matrix)
cells = cells_frame(matrix)
verdict_df = verdict_table(matrix)
over, kinds, over_after = cutlass_smem.recorded_overflow(compile_cutlass, jobs=jobs)

# Recompile a subset here (CPU only: needs a CUDA toolkit, not a GPU).
live, live_rows, live_why = lesson.live_compare(matrix, toolkits, targets, probes, jobs=jobs, enabled=live_compile)
# Run the probes on this machine's GPU (any CUDA GPU; SM120 probes only on SM12x).
gpu, gpu_why = lesson.gpu_probe_run(gpu_probes)

# %%
box = [answer.Answer(*row) for row in lesson.headline_rows(verdict_df, over, kinds, over_after, live_rows, live_why,
                                                            gpu, gpu_why)]
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
print(cutlass_smem.overflow_text(over, kinds, over_after))

# %%
fig = cutlass_smem.stage_bytes_figure()
if fig is None:
    print("no CUTLASS shared-memory data recorded (data/cutlass_smem/ is empty; run `sm120lab cutlass-smem`)")
plt.show()

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
print(lesson.recording_text(matrix))

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.macro_table(matrix).to_string(index=False))

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
fig = lesson.plot_matrix(matrix)
plt.show()

# %% [markdown]
# The SASS behind the green cells (newest toolkit; the same opcodes in every toolkit that accepts the target):

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.sass_evidence_table(cells, newest).to_string(index=False))

# %% [markdown]
# Does the toolkit matter once it accepts the target? Every cell two toolkits share, compared by
# code and SASS opcodes (12.x goes through NVRTC + ptxas, 13.0 through nvcc):

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.toolkit_diff_text(matrix))

# %% [markdown]
# `mma_fp8` shows the one surprise: plain FP8 `mma.sync` compiles everywhere from `sm_89`, but only
# Ada and the SM12x parts have a native FP8 warp MMA (`QMMA`); on Hopper and datacenter Blackwell
# `ptxas` emulates it with `HMMA` (those chips do FP8 through `wgmma` / `tcgen05`).
#
# ## 4. One `120f` build serves SM121 (DGX Spark); a `120a` build does not

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.describe_cells(matrix, tks_in, ["mma_nvfp4"], ["compute_120f->sm_121a", "compute_120f->sm_121f",
                            "compute_120f->sm_121", "compute_120a->sm_121a", "compute_120->sm_121"]))

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
print(lesson.describe_cells(matrix, [newest], ["arch_conditional", "arch_conditional_feat_only", "mma_nvfp4"],
                            ["sm_120", "sm_120a", "sm_120f", "sm_121"]))
print(lesson.stub_in_probe_text())

# %% [markdown]
# ## 6. The Triton route
#
# Triton compiles ahead of time for a GPU we do not have (`triton.compile(ASTSource(...),
# target=GPUTarget("cuda", cc, 32))`). Its `tl.dot_scaled` with E2M1 operands lowers on `sm_120`
# to the same block-scaled `mma.sync` (NVFP4: `scale_vec::4X ... ue4m3`; MXFP4: `2X ... ue8m0`):

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.triton_text(cells))

# %% [markdown]
# ## 7. Verdicts on the seed report's claims
#
# Each verdict is computed from the cells listed beside it (`sm120lab.archflags.verdicts`).

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.verdicts_text(verdict_df))

# %% [markdown]
# ## 8. Recompile here
#
# The subset compiled above with this machine's toolkits (CI: the system nvcc 13.0 only), against
# the recording. Set `toolkits` / `targets` / `probes` to run any part of the matrix
# (`sm120lab archflags` does the whole of it).

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.live_text(live, live_rows, live_why))
if live_rows:
    _ = results.record_compile_matrix("02_arch_flags", lesson.live_statuses(live_rows))

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
print(lesson.gpu_probes_text(gpu, gpu_why))

# %% [markdown]
# A recorded `wgmma` failure that a later run does not show is the probe harness's old bug (it
# issued `wgmma` with `imm-trans-b = 1`, reading B as N-major, while B was laid out K-major), not
# the hardware: the lines above show which recording predates the fix.

# %%
_ = results.record("02_arch_flags", lesson.results_record(verdict_df, matrix, cells, over, gpu))
if gpu is not None:
    _ = results.record_verdicts("02_arch_flags", lesson.gpu_verdicts(gpu))

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
