# %% [markdown]
# # 04 · tok/s against the physical ceiling
#
# Users pick an NVFP4 MoE backend by tok/s. The seed report's table (Marlin 46-49 tok/s,
# FlashInfer CUTLASS 120f 39.0, 120a 14.6, and the 4-user figures) says nothing about how far
# any of them is from what the hardware allows. This notebook puts every number against a
# **ceiling**: for one decode step, the bytes every GPU must read (weights of the experts the
# batch touches, attention and linear-attention weights, lm_head, KV cache, linear-attention
# state) over its memory bandwidth, or the FLOPs over its tensor rate, whichever is larger, plus
# the tensor-parallel all-reduces and pipeline hops on the link. On a machine with a GPU it also
# measures one MoE layer there.
#
# **One ceiling.** Every ceiling here is on the decision guide's basis unless its label says
# otherwise: each checkpoint counted in its own FP4/16-bit split (`data/published/checkpoints.yaml`),
# plus the cited latency of each all-reduce and pipeline hop over PCIe (`data/published/latency.yaml`),
# the 136 tok/s that `sm120lab recommend` states for the seed's setup. A number on another basis (a
# named precision plan, bandwidth only) carries that basis's label beside it;
# `tests/test_one_ceiling.py` fails when two numbers for one setup disagree without one.
#
# Sources: published figures in `data/published/*.csv` (one row per number, link in each row),
# GPU specifications in `data/hardware.csv` (every value with its source), model shapes in
# `sm120lab.roofline.models` (public model cards), recorded MoE-layer sweeps in
# `data/bench/moe_*.json`. The formulas are in the docstrings of `sm120lab/roofline/*.py`;
# `tests/test_roofline_*.py` check them on hand-computed cases. The SM120 ceilings are
# arithmetic on datasheets, **unverified on SM120 hardware**.

# %%
import matplotlib.pyplot as plt

from sm120lab import recommend
from sm120lab.recommend.facts import guide_basis
from sm120lab.roofline import get_model, lesson, load_gpus, load_hardware_table
from sm120lab.roofline.basis import plan_basis
from sm120lab.roofline.published import load_published
from sm120lab.runs import answer, results

# %% tags=["parameters"]
model = "qwen3.5-397b-a17b"
gpus = ["rtx-pro-6000", "rtx-5090", "dgx-spark", "h200", "b200"]
tp = 2
pp = 2
concurrency = [1, 2, 4, 8, 16, 32, 64]
context_len = 2048
weight_format = "nvfp4"
ceiling_basis = "guide"   # "guide": the decision guide's basis; "linear-quantized" | "experts-only": that plan, bandwidth only
routing = "uniform"
measure = "auto"       # "auto": a short MoE-layer sweep on this machine's CUDA GPU when it has one; False: never
guide_gpu = "rtx-pro-6000"   # the decision guide's GPU: rtx-pro-6000 | rtx-5090 | dgx-spark

# %%
cfg = get_model(model)
basis = guide_basis() if ceiling_basis == "guide" else plan_basis(ceiling_basis, weight_format)
gpu_specs = load_gpus()                      # datasheets + the recorded bench ceilings (H200)
pub = lesson.published_vs_ceiling(load_published(), gpu_specs, basis, weight_format=weight_format, context=context_len,
                                  routing=routing)
seed = lesson.seed_rows(pub)
seed_ceiling = lesson.seed_ceiling(cfg, basis, gpu_specs, context=context_len)
newest, efficiency = lesson.recorded_kernel_efficiency(cfg, gpu_specs["h200"])   # the Triton layer's share of its floor
# The decision guide's one answer for guide_gpu (its default setup): the ceiling it states counts the
# checkpoint's own FP4/16-bit split and the cited PCIe all-reduce latency; every headline below uses it.
guide = recommend.answer(guide_gpu)
prediction = lesson.guide_prediction(guide, gpu_specs[guide_gpu], efficiency)
# like for like: the same model fed vLLM's Marlin's layer times from the same H200 run, calibrated on its
# published number (section 7)
_, marlin_efficiency = lesson.recorded_kernel_efficiency(cfg, gpu_specs["h200"], prefix="vllm-marlin")
marlin_prediction = lesson.guide_prediction(guide, gpu_specs[guide_gpu], marlin_efficiency)
lfl = lesson.like_for_like(prediction, marlin_prediction, seed)
# Measure here: a short sweep on this machine's GPU, written into this run's folder (never into data/).
sweep_path = lesson.live_sweep_path(results.results_dir())
live, live_why = lesson.live_sweep(sweep_path, model=model, enabled=bool(measure))
box = [answer.Answer(*row) for row in lesson.headline_rows(
    guide, guide_gpu, seed, seed_ceiling, cfg, weight_format=weight_format, context=context_len, live=live,
    live_why=live_why, live_file=sweep_path.name, prediction=prediction, efficiency=efficiency, lfl=lfl)]
answer.show(box)
_ = answer.record(box, "04_throughput")

# %% [markdown]
# ## 1. What one decoded token costs
#
# The weight groups are stored as the basis says. The guide's basis (default) reads them from the
# checkpoint `vllm serve` loads (`data/published/checkpoints.yaml`: for
# `nvidia/Qwen3.5-397B-A17B-NVFP4` routed experts NVFP4 as stated, attention NVFP4 as inferred,
# shared expert, router, Gated DeltaNet and lm_head bf16 as stated). The named plans, shown beside
# it in section 4 with their labels: `linear-quantized` (routed experts, shared expert and
# softmax-attention projections in the expert format, the coverage RedHat's Qwen3.5-family NVFP4
# cards state) and `experts-only` (only routed experts quantized). KV cache FP8 (the seed's
# `--kv-cache-dtype`), linear-attention state fp32 (the `mamba_ssm_dtype` of the Qwen3.5 configs).

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.step_cost_text(cfg, basis, context_len, (1, 4, max(concurrency))))

# %% [markdown]
# Sources of the model shape:

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.model_sources_text(cfg))

# %% [markdown]
# ## 2. The GPUs
#
# Datasheet values and measurements are separate. `derived` marks a dense rate computed from a
# published sparse one (2:4 sparsity doubles the headline); `unsourced` marks a value no
# datasheet in reach gave (only tensor rates, which do not bind at decode). The only measured
# values are the H200's, read from the recorded bench run's ceilings.

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.gpu_table(load_hardware_table()).to_string(index=False, na_rep="-", float_format=lambda x: f"{x:g}"))

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.measured_gpu_text(gpu_specs["h200"]))

# %% [markdown]
# ## 3. The ceiling per GPU
#
# For each GPU in `gpus`, `tp` x `pp` copies, each concurrency in `concurrency`: the per-user
# ceiling (datasheet bandwidth; PCIe where there is no NVLink), and whether weights + KV cache +
# linear state + activations fit in each GPU's memory. The all-reduce latency is cited for SM12x
# GPUs over PCIe only; the GPUs without one are marked, and count link bytes only.

# %%
# NBVAL_CHECK_OUTPUT
ceil_table = lesson.ceiling_table(cfg, basis, gpu_specs, gpus, tp=tp, pp=pp, batches=concurrency, context=context_len,
                                  routing=routing)
print(lesson.ceiling_report(ceil_table, cfg, gpus=gpus, tp=tp, pp=pp, context=context_len, routing=routing,
                            batches=concurrency))

# %%
fig = lesson.plot_ceilings(ceil_table, cfg, tp=tp, pp=pp, batches=concurrency)
plt.show()

# %% [markdown]
# The H200 at its measured copy bandwidth (the recorded bench run): the number the measured MoE
# sweeps of section 6 are set against.

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.measured_ceiling_text(cfg, basis, gpu_specs, gpus, tp=tp, pp=pp, batches=concurrency, context=context_len,
                                   routing=routing))

# %% [markdown]
# ## 4. The seed's table against the ceiling
#
# Each published row is compared with the ceiling of its own configuration (GPU, TP, PP,
# model and concurrency from its CSV row). The seed ran `nvidia/Qwen3.5-397B-A17B-NVFP4` on
# 4x RTX PRO 6000 (PCIe) at TP2 PP2. Rows that produced garbage or crashed have no tok/s. The
# seed reports ranges (Marlin "46-49"); the share of the ceiling is computed from the midpoint,
# and both are shown. The ceiling and % columns are on this notebook's basis; the LQ and EO
# columns are the two named plans, bandwidth only, each named above the table.

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.seed_table_text(seed, gpu_specs["rtx-pro-6000"], weight_format))

# %%
fig = lesson.plot_seed_vs_guide(seed, prediction)
plt.show()

# %% [markdown]
# ## 5. tok/s vs concurrency: published points against the ceiling curve
#
# Per-user tok/s falls with concurrency even at the ceiling: a batch of B tokens touches
# E(1-(1-k/E)^B) distinct experts (38.8 of 512 for B=4 instead of 10), and each sequence adds
# its KV cache and linear-attention state. Aggregate tok/s rises. Published points whose model
# is not one of the presets (or is not stated) cannot get a ceiling and are listed instead.

# %%
# NBVAL_CHECK_OUTPUT
cs = lesson.concurrency_grid(concurrency)
panels, unmatched = lesson.ceiling_curves(pub, gpu_specs, basis, context=context_len, routing=routing, batches=cs)
print(lesson.ceiling_curves_text(panels, unmatched, basis, batches=cs))

# %%
fig = lesson.plot_ceiling_curves(panels, cs)
plt.show()

# %% [markdown]
# Real routers are not uniform. With Zipf-skewed expert popularity (weight ∝ 1/rank^s, top-k
# drawn without replacement; inclusion probabilities by Monte Carlo, then the exact sum
# Σ 1-(1-π_e)^B) a batch touches fewer distinct experts, so the multi-user ceiling is higher.

# %%
# NBVAL_IGNORE_OUTPUT
skew = lesson.zipf_skew_table(cfg, gpu_specs["rtx-pro-6000"], basis, batches=concurrency, context=context_len)
print(lesson.zipf_skew_text(skew, cfg, basis.label_for(gpu_specs["rtx-pro-6000"], 4)))

# %% [markdown]
# ## 6. Measured MoE layers, MoE-layer-only
#
# A bench row with `op == "moe"` is one full MoE layer for T tokens. A decode step with T
# concurrent sequences runs `n_layers` such layers, so the MoE layers **alone** would allow
# 1/(n_layers x us) tok/s per user. This is **MoE-layer-only**: attention, linear attention,
# lm_head, collectives and launch gaps are not in it. First this machine's own sweep (GPU only),
# then the recorded H200 sweep (shown, not recorded as this run's measurement).

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.live_table_text(live, live_why))
if live is not None:
    _ = results.record_bench("04_throughput", lesson.bench_figures(live))

# %%
# NBVAL_IGNORE_OUTPUT
bw = gpu_specs["h200"].bandwidth_GBps("measured")
moe_tab = lesson.moe_layer_vs_floor([newest], cfg, bw) if newest else None
print(lesson.recorded_moe_text(moe_tab, newest, cfg, bw))

# %%
fig = lesson.plot_moe_only(moe_tab, cfg, bw, weight_format=weight_format)   # None: no recorded sweep
plt.show()

# %% [markdown]
# ## 7. A prediction: the seed's setup with this project's Triton kernel
#
# Take the fraction of its memory floor (at the datasheet bandwidth) that the fastest Triton MoE
# layer reached on the H200 in the newest recorded sweep, assume the same fraction on SM120, and
# keep everything else at its ceiling (`sm120lab.roofline.lesson.predict_with_kernel`). This is a
# **prediction, unverified on SM120 hardware**: an upper bound for the kernel (the rest of the
# model is never at its ceiling), and SM120's GDDR7 and smaller shared memory may change the
# fraction. At TP2 each GPU holds half of every expert, a smaller problem than the one measured.
# Set beside it Marlin's recorded share of the same ceiling (the guide's).
#
# That sets a model's prediction for ours against Marlin's measurement. Like for like: the newest
# recorded run timed vLLM's own Marlin MoE on the same weights and routings, so the same model is fed
# both kernels' layer times, and Marlin's published number calibrates it (`lesson.like_for_like`).

# %%
# NBVAL_IGNORE_OUTPUT
print(lesson.prediction_text(prediction, efficiency, seed, gpu_specs["h200"]))
print()
print(lesson.like_for_like_text(lfl, efficiency, marlin_efficiency))

# %% [markdown]
# ## 8. What the gap means
#
# The paragraph below is computed from the tables above (published CSV rows and the ceiling), so
# it changes if a row or a parameter does.

# %%
# NBVAL_CHECK_OUTPUT
print(lesson.gap_paragraph(seed, cfg, basis, context_len, width=110))

# %%
_ = results.record("04_throughput", lesson.results_record(
    {"model": model, "gpus": gpus, "tp": tp, "pp": pp, "concurrency": concurrency, "context_len": context_len,
     "weight_format": weight_format, "ceiling_basis": ceiling_basis, "routing": routing},
    ceil_table, pub, prediction, efficiency, None if live is None else sweep_path.name, basis))

# %% [markdown]
# ## 9. What to set: the decision guide (expected tok/s and the MoE backend)
#
# The part of `sm120lab recommend` this notebook supports, for `guide_gpu`: each item with its
# evidence level (`sm120-run` only once a run from an SM120 machine is archived in `data/runs/`)
# and its source. `sm120lab recommend --gpu rtx-pro-6000` (or `rtx-5090`, `dgx-spark`) prints the
# whole guide.

# %%
# NBVAL_IGNORE_OUTPUT
guide_topics = ['throughput', 'backend']
print(guide.block.to_text(110))
recommend.show(recommend.section(guide.items, guide_topics),
               title=f"decision guide for {guide_gpu}: {', '.join(guide_topics)}")
