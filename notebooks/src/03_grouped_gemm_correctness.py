# %% [markdown]
# # 03 · Grouped-GEMM correctness: every MoE backend against an exact reference
#
# The seed report's core symptom: an NVFP4 MoE backend on SM120 produced garbage text while dense
# FP4 GEMM was fine, and nobody could say which experts, which groups, or why. This notebook runs
# every MoE backend installed on this machine (on its GPU when it has one) on one MoE layer,
# compares each with an exact reference, and says per backend: correct, degraded or garbage, and
# where the error lives. The box below is this run's answer; the evidence follows.
#
# 1. draw one MoE layer problem (`sm120lab.moe.make_moe_problem`): routing, NVFP4 weights with
#    per-expert global scales, linear and 128x4-swizzled scale copies;
# 2. compute the exact reference (dequantized weights, fp64 on CPU, fp32 on a GPU);
# 3. run every backend into an output buffer poisoned with a sentinel, once with the real routing
#    weights and once per top-k slot with one-hot weights, so every error is attributed to a
#    (token, expert) cell;
# 4. judge each against an error envelope measured on the same data;
# 5. plant known faults (wrong scale layout, swapped experts, ...) to show that the harness catches
#    and localizes them.
#
# Backends for hardware or packages this machine lacks (FlashInfer CUTLASS / SM12x runners, vLLM
# Marlin and CUTLASS FP4) are real code behind a capability check, **unverified on SM120
# hardware**; the same harness is the `sm120lab check` command.

# %%
import matplotlib.pyplot as plt
from IPython.display import display

from sm120lab.moe import lesson, make_moe_problem
from sm120lab.moe.backends import all_backends
from sm120lab.moe.faults import all_faults
from sm120lab.moe.harness import check, default_device
from sm120lab.moe.plots import plot_expert_bars, plot_expert_load, plot_heatmap, plot_histograms, plot_output_row
from sm120lab.moe.quantizer_diff import flashinfer_fp4_quantize_diffs, self_check_diffs, triton_quantize_diffs
from sm120lab.runs import answer, results

# %% tags=["parameters"]
preset = "tiny"
tokens = 48
routing = "zipf"
backends = None        # None: every registered backend; e.g. ["torch-bf16", "flashinfer-cutlass"]
seed = 0
device = "auto"        # "auto": cuda when this machine has a CUDA GPU, else cpu
with_faults = True

# %%
run_on = default_device() if device == "auto" else device
problem = make_moe_problem(preset, tokens=tokens, routing=routing, seed=seed, device=run_on)
registry = all_backends()
chosen = [registry[b] for b in (backends or registry) if b in registry]
faults = all_faults() if with_faults else []
result = check(problem, chosen + faults)

# each backend's verdict, and each planted fault judged on what it broke (sm120lab.moe.faults.judge_fault):
# caught = garbage, or for a fault judged by the envelope, not pinned on a subset of experts;
# localized = the right experts/tokens
box = [answer.Answer(claim, value, answer.status_of_verdict(verdict), why)
       for claim, value, verdict, why in lesson.headline_rows(result, faults, problem, run_on)]
answer.show(box, title=f"On this machine: {preset} MoE layer, {tokens} tokens, {routing} routing, {run_on}")
_ = answer.record(box, "03_grouped_gemm_correctness")

# %% [markdown]
# ## 1. The problem
#
# Weights `W ~ N(0, sigma_e^2)` with a different `sigma_e` per expert (so per-expert global scales
# differ) and 1% outlier input channels x8; hidden states with outlier channels x10. `w13` stacks
# gate (rows `0:I`) over up (`I:2I`), ModelOpt-style. The routing decides how unevenly experts
# are loaded: `zipf` gives a few busy experts and a long tail.

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.problem_text(problem))

# %%
fig = plot_expert_load(problem)
plt.show()

# %% [markdown]
# ## 2. The reference and the envelope
#
# `out[t] = sum_j w[t,j] * W2[e_j] @ (SiLU(G[e_j] h_t) * U[e_j] h_t)` with every weight
# dequantized exactly (`e2m1 * SF / gs`). It is the W4A16 answer: what the NVFP4 checkpoint
# *means*. `e_a`: error of `emulated-w4a4` (activations NVFP4-quantized with static per-tensor
# scales, exact math), the cost a correct native W4A4 kernel must show. `e_w`: error of the layer
# with unquantized weights against the NVFP4 reference, the size of the whole NVFP4 perturbation.
# Per (token, expert) cell the verdict uses the deviation from the backend's *expected numerics*
# (emulated-w4a4 for W4A4 backends, the reference otherwise).

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.envelope_text(result.envelope))

# %% [markdown]
# ## 3. The verdict table
#
# Deterministic for a given seed on CPU (checked by nbval): verdict and the experts the harness
# localized the error to.

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.verdict_table(result, run_on).to_string(index=False))

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.numbers_text(result))

# %% [markdown]
# The reasons, for everything that is not `correct`:

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.reasons_text(result))

# %% [markdown]
# ## 4. Where the error lives
#
# Expert x token maps of each backend's deviation from its expected numerics (blank: token not
# routed to that expert). A correct backend is dark everywhere; a fault lights up exactly the
# experts it broke. (`emulated-w4a4` is not drawn: it *is* the expected numerics of the W4A4
# backends, so its map would compare it with itself.)

# %%
fig = plot_heatmap(result, ["torch-bf16", "triton-w4a16", "triton-w4a4", "flashinfer-cutlass", "fault-zeroed-group",
                             "fault-swapped-experts", "fault-offset-off-by-one", "fault-linear-as-swizzled"])
plt.show()

# %%
fig = plot_expert_bars(result, ["torch-bf16", "emulated-w4a4", "fault-swapped-experts"])
plt.show()

# %% [markdown]
# Error vs the reference per cell: bf16 rounding sits near 1e-3, NVFP4 activation noise near
# `e_a`, faults at 1 and beyond.

# %%
fig = plot_histograms(result, ["torch-bf16", "emulated-w4a4", "fault-linear-as-swizzled", "fault-offset-off-by-one"])
plt.show()

# %% [markdown]
# ## 5. One silent-garbage failure class: linear scales where swizzled are expected
#
# A grouped-GEMM kernel that reads 128x4-swizzled block scales but is handed the linear buffer
# multiplies every 16-element block by some *other* block's scale. Nothing crashes; every expert is
# wrong. It is one of the faults planted here to show what such garbage looks like; whether it is
# what broke the seed's runs is not known (no SM120 run exists to check). The bytes are the same
# bytes, only their order differs:

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.scale_bytes_text(problem))

# %%
fig = plot_output_row(result, "fault-linear-as-swizzled")   # None: the faults did not run
plt.show()
print(lesson.fault_summary_text(result, "fault-linear-as-swizzled"))

# %% [markdown]
# ## 6. Activation quantizers, byte for byte
#
# A W4A4 MoE quantizes activations on the fly, so the quantizer is part of the chain. Here a
# quantizer's packed E2M1 bytes and E4M3 scale bytes are compared with `sm120lab.nvfp4`: our own
# quantizer (must be `correct`), a quantizer that returns without writing its outputs (what
# FlashInfer 0.6.5's `fp4_quantize` does on SM90: a *silent* failure), and, where a GPU and
# FlashInfer are present, FlashInfer's `fp4_quantize` in both scale layouts; on a GPU also the
# workbook's own Triton quantizer as this machine's Triton compiles it (under Triton 3.6 an
# approximate division once made it miss rounding ties).

# %%
gs = problem.a1_gscale.reshape(1)   # the activations' static per-tensor global scale
demo = self_check_diffs(problem.hidden, gs)
gpu_diffs = flashinfer_fp4_quantize_diffs(problem.hidden, gs) + triton_quantize_diffs(problem.hidden, gs)

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.quantizer_demo_text(demo))

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.quantizer_gpu_text(gpu_diffs, run_on))

# %% [markdown]
# ## 7. Recorded GPU runs
#
# `scripts/h200_correctness.py` runs the GPU backends against the fp32 GPU reference at the
# qwen3.5-397b-a17b shape for T = 1, 64, 1024, and diffs FlashInfer 0.6.5's `fp4_quantize` on an
# H200 (SM90). The recorded results live in `data/correctness/` (shown here, not recorded as this
# run's measurement).

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.recorded_gpu_runs_text())

# %% [markdown]
# ## 8. vLLM's Marlin, the kernel SM120 owners serve with, through the same harness
#
# The guide tells SM120 owners to serve with `--moe-backend marlin` and to check it with
# `sm120lab check --backend vllm-marlin`. That command ran on the H200 with vLLM 0.26.0's own Marlin
# MoE (its Python and compiled ops read from the real wheel by `sm120lab upstream vllm-cache`;
# `scripts/h200_marlin.py`) at every model preset for T = 4, 64, 256, and at tiny and small with every
# planted fault in the same run. Shown from `data/correctness/marlin_h200_*/` (recorded, not this run's
# measurement). `rel / limit` is Marlin's error over the envelope's W4A16 correct limit on the same
# problem; `faults garbage` counts the planted faults judged garbage (`fault-act-block-32` breaks W4A4
# activations only, so on this W4A16 problem the envelope rightly calls it correct).

# %%
# NBVAL_IGNORE_OUTPUT
marlin_dir, marlin_runs = lesson.recorded_marlin()
if marlin_runs is None:
    print("no recorded Marlin run in data/correctness/")
else:
    print(lesson.marlin_envelope_text(marlin_dir, marlin_runs))
    display(marlin_runs.round(4))

# %%
_ = results.record("03_grouped_gemm_correctness", lesson.results_record(result, run_on, demo, gpu_diffs))
