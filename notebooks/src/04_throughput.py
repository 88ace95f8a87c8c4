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
# Sources: published figures in `data/published/*.csv` (one row per number, link in each row),
# GPU specifications in `data/hardware.csv` (every value with its source), model shapes in
# `sm120lab.roofline.models` (public model cards), recorded MoE-layer sweeps in
# `data/bench/moe_*.json`. The formulas are in the docstrings of `sm120lab/roofline/*.py`;
# `tests/test_roofline_*.py` check them on hand-computed cases. The SM120 ceilings are
# arithmetic on datasheets, **unverified on SM120 hardware**.

# %%
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sm120lab import recommend
from sm120lab.recommend.facts import with_guide_ceiling
from sm120lab.roofline import (
    PRECISION_PLANS,
    get_model,
    lesson,
    load_gpus,
    load_hardware_table,
    moe_layer_floor_us,
    precision_plan,
    step_cost,
)
from sm120lab.roofline.measured import bench_files, measured_active_experts
from sm120lab.roofline.published import load_published
from sm120lab.roofline.routing import expected_distinct_uniform
from sm120lab.runs import answer, results
from sm120lab.runs.answer import Answer, Status

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)
pd.set_option("display.float_format", lambda v: f"{v:,.1f}")

# %% tags=["parameters"]
model = "qwen3.5-397b-a17b"
gpus = ["rtx-pro-6000", "rtx-5090", "dgx-spark", "h200", "b200"]
tp = 2
pp = 2
concurrency = [1, 2, 4, 8, 16, 32, 64]
context_len = 2048
weight_format = "nvfp4"
precision = "linear-quantized"
routing = "uniform"
measure = "auto"       # "auto": a short MoE-layer sweep on this machine's CUDA GPU when it has one; False: never
guide_gpu = "rtx-pro-6000"   # the decision guide's GPU: rtx-pro-6000 | rtx-5090 | dgx-spark

# %%
cfg = get_model(model)
plan = precision_plan(precision, weight_format)
gpu_specs = load_gpus()                      # datasheets + the recorded bench ceilings (H200)
pub = lesson.published_vs_ceiling(load_published(), gpu_specs, weight_format=weight_format, context=context_len,
                                  routing=routing)
seed = lesson.seed_rows(pub)
seed_spec = gpu_specs["rtx-pro-6000"]
seed_ceiling = lesson.ceiling_table(cfg, plan, gpu_specs, ["rtx-pro-6000"], tp=2, pp=2, batches=[1, 4, 64],
                                    context=context_len)
files = bench_files()
newest = lesson.newest_bench_file(files, model=cfg.name)
recorded_gpu = load_gpus(measurements=False)
efficiency = {T: lesson.kernel_efficiency(newest, tokens=T, gpu=gpu_specs["h200"]) for T in (1, 4)} if newest else {}
# The decision guide's one answer for guide_gpu (its default setup): the ceiling it states counts the
# checkpoint's own FP4/16-bit split and the cited PCIe all-reduce latency; every headline below uses it.
guide = recommend.answer(guide_gpu)
gs = guide.setup
prediction = {T: lesson.predict_with_kernel(get_model(gs.model), gpu_specs[guide_gpu], guide.ceiling.precision,
                                            eff["eta"], tp=gs.tp, pp=gs.pp, batch=T, context=gs.context,
                                            collective_latency_us=guide.ceiling.latency_us)
              for T, eff in efficiency.items() if eff}

# Measure here: a short sweep on this machine's GPU, written into this run's folder (never into data/).
run_dir = results.results_dir()
sweep_path = (run_dir.parent if run_dir else Path(".")) / "bench_live.json"
live, live_why = (None, "measure=False") if not measure else lesson.live_sweep(
    sweep_path, model=model, command="notebooks/04_throughput (measure)")

marlin1, fi1, fi1a = (lesson.seed_value(seed, b, 1, "tok_s") for b in
                      ("Marlin", "FlashInfer CUTLASS 120f", "FlashInfer CUTLASS 120a"))
ceil1 = guide.ceiling.per_user_tok_s
at64 = seed_ceiling.iloc[-1]
setup_name = f"{gs.n_gpus}x {guide_gpu}, {gs.model}, TP{gs.tp} PP{gs.pp}, {gs.users} user(s)"
box = [
    Answer("what to run (the decision guide's do-this block)", guide.block.serve_line, Status.info,
           f"{guide.block.install}; verify: {guide.block.verify}"),
    Answer(f"decode ceiling of {setup_name}", f"{ceil1:.0f} tok/s", Status.info,
           f"{guide.ceiling.counted}; {guide.ceiling.ceiling.bound}-bound; all-reduce latency "
           f"{guide.ceiling.latency_us:g} us each (without it: {guide.ceiling.without_latency.per_user_tok_s:.0f} tok/s)"),
    Answer("the seed's backends, as a share of that ceiling",
           f"Marlin {marlin1:.1f} = {100 * marlin1 / ceil1:.0f}%, FlashInfer CUTLASS 120f {fi1:.1f} = "
           f"{100 * fi1 / ceil1:.0f}%, 120a {fi1a:.2f} = {100 * fi1a / ceil1:.0f}%", Status.warn,
           "published per-user tok/s (flashinfer#2723) over the guide's ceiling; section 4"),
    Answer(f"{cfg.name} {weight_format} fits on 4x RTX PRO 6000 TP2 PP2", "yes" if at64["fits"] else "NO",
           Status.ok if at64["fits"] else Status.bad,
           f"{at64['GB_held_per_gpu']:.1f} GB of {at64['mem_GB']:g} GB per GPU at 64 users x {context_len} tokens "
           f"(weights {at64['weights_GB_per_gpu']:.1f} GB + KV cache + linear state + activations)"),
]
if live is not None:
    live_t1 = [r for r in live["rows"] if r.get("op") == "moe" and r["T"] == 1 and r.get("us_median")]
    best = min(live_t1, key=lambda r: r["us_median"]) if live_t1 else None
    box.append(Answer(f"one {cfg.name} MoE layer measured on this GPU ({live['env']['gpu'].get('name')}), T=1",
                      f"{best['us_median']:.1f} us ({best['contender']})" if best else "no T=1 row",
                      Status.info if best else Status.bad, f"short sweep written to {sweep_path.name} in this run"))
else:
    box.append(Answer(f"one {cfg.name} MoE layer measured on this machine", "not run", Status.not_run,
                      f"{live_why}; the recorded H200 sweep is shown in section 6, not recorded as this run's"))
if prediction:
    p1, e1 = prediction[1], efficiency[1]
    box.append(Answer(f"prediction: {setup_name} with this project's Triton MoE kernel",
                      f"{p1['predicted_tok_s']:.0f} tok/s = {p1['pct_of_ceiling']:.0f}% of the ceiling "
                      f"(Marlin: {100 * marlin1 / ceil1:.0f}%)", Status.info,
                      f"PREDICTION, unverified on SM120 hardware: MoE layers at the {100 * e1['eta']:.0f}% of their "
                      f"floor that {e1['contender']} reached on the H200 ({e1['file']}), the rest at its ceiling"))
else:
    box.append(Answer("prediction with this project's Triton MoE kernel", "not run", Status.not_run,
                      "no recorded MoE-layer sweep in data/bench/"))
answer.show(box)
_ = answer.record(box, "04_throughput")

# %% [markdown]
# ## 1. What one decoded token costs
#
# The weight groups are stored as the precision plan says. `linear-quantized` (default):
# routed experts, shared expert and softmax-attention projections in the expert format;
# Gated DeltaNet projections, router, lm_head and embeddings in bf16, the coverage RedHat's
# Qwen3.5-family NVFP4 cards state. `experts-only`: only routed experts quantized. The exact
# per-module coverage of `nvidia/Qwen3.5-397B-A17B-NVFP4` was not verified here, so section 4
# shows both. KV cache FP8 (the seed's `--kv-cache-dtype`), linear-attention state fp32 (the
# `mamba_ssm_dtype` of the Qwen3.5 configs).

# %%
# NBVAL_CHECK_OUTPUT
print(f"{cfg.name}: {cfg.n_layers} layers ({cfg.n_full_attn_layers} full attention, "
      f"{cfg.n_sliding_attn_layers} sliding, {cfg.n_linear_attn_layers} Gated DeltaNet), "
      f"E={cfg.n_experts} top-{cfg.top_k}, H={cfg.hidden}, I={cfg.moe_intermediate}, vocab {cfg.vocab}")
print(f"parameters: {cfg.total_params() / 1e9:.1f} B total, {cfg.active_params() / 1e9:.2f} B active per token")
print(f"precision plan '{precision}': {PRECISION_PLANS[precision]}")
per_step = pd.DataFrame({f"B={B}": {**{k: v / 1e9 for k, v in step_cost(cfg, plan, B, context_len).bytes.items()},
                                    "TOTAL": step_cost(cfg, plan, B, context_len).total_bytes / 1e9}
                         for B in (1, 4, max(concurrency))})
print("GB read per decode step (whole model):")
print(per_step.to_string(float_format=lambda x: f"{x:.3f}"))
print("distinct routed experts per layer:",
      {f"B={B}": round(step_cost(cfg, plan, B, context_len).distinct_experts, 1) for B in (1, 4, max(concurrency))})
c1 = step_cost(cfg, plan, 1, context_len)
print(f"B=1: {c1.total_flops / 1e9:.1f} GFLOP per token, {c1.total_flops / c1.total_bytes:.2f} FLOP/byte "
      "(a GPU needs hundreds of FLOP/byte to be compute-bound: decode is bandwidth-bound)")

# %% [markdown]
# Sources of the model shape:

# %%
# NBVAL_CHECK_OUTPUT
for s in cfg.sources:
    print("-", s)
if cfg.notes:
    print("note:", cfg.notes)

# %% [markdown]
# ## 2. The GPUs
#
# Datasheet values and measurements are separate. `derived` marks a dense rate computed from a
# published sparse one (2:4 sparsity doubles the headline); `unsourced` marks a value no
# datasheet in reach gave (only tensor rates, which do not bind at decode). The only measured
# values are the H200's, read from the recorded bench run's ceilings.

# %%
# NBVAL_CHECK_OUTPUT
hw = load_hardware_table()
table = hw[["gpu", "compute_capability", "mem_bw_GBps", "mem_GB", "smem_per_block_bytes", "pcie_GBps_per_dir",
            "nvlink_GBps_per_dir"]].copy()
for col, src in (("bf16_dense_TFLOPs", "bf16_source"), ("fp8_dense_TFLOPs", "fp8_source"),
                 ("fp4_dense_TFLOPs", "fp4_source")):
    table[col.replace("_dense_TFLOPs", " TFLOP/s")] = [
        ("-" if pd.isna(v) else f"{v:g}") + (" (unsourced)" if str(s).startswith("UNSOURCED")
                                             else " (derived)" if str(s).startswith("derived") else "")
        for v, s in zip(hw[col], hw[src])]
print(table.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:g}"))

# %%
# NBVAL_IGNORE_OUTPUT
h200 = gpu_specs["h200"]
print(f"measured on the H200: copy {h200.measured_copy_GBps:,.0f} GB/s "
      f"({100 * h200.measured_copy_GBps / h200.mem_bw_GBps:.0f}% of the datasheet {h200.mem_bw_GBps:g}), "
      f"bf16 matmul {h200.measured_bf16_TFLOPs:,.0f} TFLOP/s; from {h200.measured_source}")

# %% [markdown]
# ## 3. The ceiling per GPU
#
# For each GPU in `gpus`, `tp` x `pp` copies, each concurrency in `concurrency`: the per-user
# ceiling (datasheet bandwidth; PCIe where there is no NVLink), and whether weights + KV cache +
# linear state + activations fit in each GPU's memory.

# %%
# NBVAL_CHECK_OUTPUT
ceil_table = lesson.ceiling_table(cfg, plan, gpu_specs, gpus, tp=tp, pp=pp, batches=concurrency, context=context_len,
                                  routing=routing)
print(f"{cfg.name}, {weight_format} '{precision}', TP{tp} x PP{pp}, context {context_len}, {routing} routing")
print("per-user ceiling, tok/s (rows: GPU; columns: concurrent users B):")
ok_rows = ceil_table[ceil_table["B"].notna()].astype({"B": int})
print(ok_rows.pivot(index="gpu", columns="B", values="per_user_tok_s").reindex(
    [g for g in gpus if g in set(ok_rows["gpu"])]).to_string(float_format=lambda x: f"{x:.1f}"))
print(f"\nmemory held per GPU at B={max(concurrency)} (weights + KV cache + linear state + activations):")
last = ok_rows[ok_rows["B"] == max(concurrency)]
for _, r in last.iterrows():
    print(f"  {r['gpu']:<13} {r['GB_held_per_gpu']:7.1f} GB of {r['mem_GB']:g} GB: "
          f"{'fits' if r['fits'] else 'does NOT fit'}; bound: {r['bound']}")
for _, r in ceil_table[ceil_table["B"].isna()].iterrows():
    print(f"  {r['gpu']:<13} no ceiling: {r['note']}")

# %%
fig, ax = plt.subplots(figsize=(8, 4))
for (g, grp), marker in zip(ok_rows.groupby("gpu", sort=False), "osD^v"):
    fits = grp["fits"].all()
    ax.plot(grp["B"], grp["per_user_tok_s"], marker=marker, ls="-" if fits else ":", mfc="none" if fits else None,
            label=g + ("" if fits else " (does not fit: dotted)"))
ax.set_xscale("log", base=2)
ax.set_xticks(concurrency, [str(b) for b in concurrency])
ax.set_xlabel("concurrent users B")
ax.set_ylabel("per-user ceiling, tok/s")
ax.set_title(f"{cfg.name} on {tp * pp} GPUs (TP{tp} PP{pp}): decode ceiling per user")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The H200 at its measured copy bandwidth (the recorded bench run): the number the measured MoE
# sweeps of section 6 are set against.

# %%
# NBVAL_IGNORE_OUTPUT
if h200.measured_copy_GBps and "h200" in gpus:
    meas = lesson.ceiling_table(cfg, plan, gpu_specs, ["h200"], tp=tp, pp=pp, batches=concurrency, context=context_len,
                                routing=routing, bandwidth="measured")
    print(f"h200 at the measured {h200.measured_copy_GBps:,.0f} GB/s ({h200.measured_source}):")
    print(meas[["B", "per_user_tok_s", "aggregate_tok_s", "bound", "bandwidth"]].to_string(index=False))
else:
    print("no measured H200 ceilings recorded in data/bench/: datasheet values only")

# %% [markdown]
# ## 4. The seed's table against the ceiling
#
# Each published row is compared with the ceiling of its own configuration (GPU, TP, PP,
# model and concurrency from its CSV row). The seed ran `nvidia/Qwen3.5-397B-A17B-NVFP4` on
# 4x RTX PRO 6000 (PCIe) at TP2 PP2. Rows that produced garbage or crashed have no tok/s.

# %%
# NBVAL_CHECK_OUTPUT
print(f"per-user tok/s and ceilings for 4x RTX PRO 6000 TP2 PP2 (datasheet {seed_spec.mem_bw_GBps:g} GB/s, "
      f"PCIe {seed_spec.pcie_GBps_per_dir:g} GB/s per direction); % = share of the ceiling")
cols = {"backend": "backend", "cuda": "CUDA", "concurrency": "users", "tok_s": "tok/s",
        "correct_output": "correct", "ceiling_linear-quantized": "ceiling", "pct_linear-quantized": "%",
        "ceiling_experts-only": "ceiling (experts-only)", "pct_experts-only": "% (experts-only)"}
print(seed[list(cols)].rename(columns=cols).to_string(index=False, float_format=lambda x: f"{x:.1f}", na_rep="-"))

# %%
# the guide's ceiling (checkpoint formats + all-reduce latency) of each row's own setup
seed_guide = with_guide_ceiling(seed, "rtx-pro-6000")
print(seed_guide[["backend", "concurrency", "tok_s", "ceiling_guide", "pct_guide"]].to_string(
    index=False, float_format=lambda x: f"{x:.1f}", na_rep="-"))
fig = lesson.plot_published(seed_guide, prediction, plan="guide",
                            title="4x RTX PRO 6000 TP2 PP2: published tok/s, % = share of the guide's ceiling",
                            xlabel="backend (seed report, flashinfer#2723; last: this project's Triton MoE kernel, "
                                   "section 7)")
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
cs = np.unique(np.concatenate([np.array(concurrency), np.geomspace(1, 64, 25).round()])).astype(int)
panels, unmatched = lesson.ceiling_curves(pub, gpu_specs, precision=precision, weight_format=weight_format,
                                          context=context_len, routing=routing, batches=cs)
for gpu_name, m, ptp, ppp, grp, curve in panels:
    print(f"ceiling {m.name} on {ptp * ppp}x {gpu_name} TP{ptp} PP{ppp}: per user {curve[0].per_user_tok_s:.1f} "
          f"tok/s at B=1, aggregate {curve[-1].aggregate_tok_s:.0f} tok/s at B={cs[-1]}")
    for _, r in grp.iterrows():
        print(f"    {r['backend']}, c={r['concurrency']}: {r['per_user_tok_s']:.1f} tok/s per user = "
              f"{r[f'pct_{precision}']:.0f}% of the ceiling ({r['source_url']})")
for (model_name, url), grp in unmatched.groupby(["model", "source_url"]):
    print(f"no ceiling for {len(grp)} published rows: model '{model_name}' is not a preset ({grp['hardware'].iloc[0]}; "
          f"{url})")

# %%
fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
for ax, (gpu_name, m, ptp, ppp, grp, curve) in zip(axes[0], panels):
    ax.plot(cs, [c.per_user_tok_s for c in curve], "k-", label="ceiling, per user")
    ax.plot(cs, [c.aggregate_tok_s for c in curve], "k--", label="ceiling, aggregate")
    for i, (backend, g2) in enumerate(grp.groupby("backend")):
        ax.plot(g2["concurrency"], g2["per_user_tok_s"], "o", color=f"C{i}", label=f"{backend} (per user)")
        ax.plot(g2["concurrency"], g2["aggregate_tok_s"], "s", mfc="none", color=f"C{i}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent sequences")
    ax.set_ylabel("tok/s (circles: per user, squares: aggregate)")
    ax.set_title(f"{m.name}, {ptp * ppp}x {gpu_name} TP{ptp} PP{ppp}", fontsize=10)
    ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# Real routers are not uniform. With Zipf-skewed expert popularity (weight ∝ 1/rank^s, top-k
# drawn without replacement; inclusion probabilities by Monte Carlo, then the exact sum
# Σ 1-(1-π_e)^B) a batch touches fewer distinct experts, so the multi-user ceiling is higher.

# %%
# NBVAL_IGNORE_OUTPUT
skew = lesson.zipf_skew_table(cfg, seed_spec, plan, batches=concurrency, context=context_len)
print(f"{cfg.name} on 4x rtx-pro-6000 TP2 PP2 (s=0 is uniform routing); per-user ceiling by skew:")
print(skew.pivot(index="B", columns="zipf_s", values=["distinct_experts", "per_user_tok_s"])
      .to_string(float_format=lambda x: f"{x:.1f}"))

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
if live is not None:
    live_tab = pd.DataFrame([r for r in live["rows"] if r.get("op") == "moe"])
    print(f"this machine ({live['env']['gpu'].get('name')}), MoE layer us by contender and T:")
    print(live_tab.pivot_table(index=["contender", "timing"], columns="T", values="us_median").to_string())
    _ = results.record_bench("04_throughput", lesson.bench_figures(live))
else:
    print(f"no MoE layer measured on this machine: {live_why}")

# %%
# NBVAL_IGNORE_OUTPUT
moe_tab = lesson.moe_layer_vs_floor([newest], cfg, h200.bandwidth_GBps("measured")) if newest else None
if moe_tab is None or moe_tab.empty:
    print("no recorded MoE-layer sweep for this model in data/bench/")
else:
    bw = h200.bandwidth_GBps("measured")
    print(f"recorded: data/bench/{newest.name} ({moe_tab['gpu'].iloc[0]}); floor at the measured copy bandwidth "
          f"{bw:,.0f} GB/s; {cfg.n_layers} MoE layers per decode step")
    print("\nMoE layer time, us:")
    print(moe_tab.pivot_table(index=["contender", "timing"], columns="T", values="us_median").to_string())
    print("\n% of the memory floor reached:")
    print(moe_tab.pivot_table(index=["contender", "timing"], columns="T", values="pct_of_floor").to_string())
    act = pd.DataFrame(measured_active_experts([newest]))
    if not act.empty:
        act["E[distinct] formula"] = [expected_distinct_uniform(int(r.E), int(r.k), int(r.T)) for r in act.itertuples()]
        print("\ndistinct experts the benchmark's uniform routings touched vs E(1-(1-k/E)^T):")
        print(act[["T", "active_experts", "E[distinct] formula"]].to_string(index=False, float_format=lambda x: f"{x:.2f}"))

# %%
if moe_tab is not None and not moe_tab.empty:
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for (contender, timing), g in moe_tab.groupby(["contender", "timing"]):
        ax.plot(g["T"], g["moe_only_per_user_tok_s"], "o-", label=f"{contender} [{timing}]")
    Ts = np.array(sorted(moe_tab["T"].unique()))
    ax.plot(Ts, [1e6 / (cfg.n_layers * moe_layer_floor_us(cfg, T, bw, weight_format=weight_format)) for T in Ts],
            "k--", label=f"MoE-layer memory floor at {bw:,.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step (T = concurrent users)")
    ax.set_ylabel("tok/s per user, MoE layers only")
    ax.set_title(f"recorded H200 MoE layer, {cfg.name}: MoE-layer-only tok/s")
    ax.legend(fontsize=7)
    plt.tight_layout()
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
# Set beside it Marlin's recorded share of the ceiling.

# %%
# NBVAL_IGNORE_OUTPUT
if prediction:
    for T, p in prediction.items():
        e = efficiency[T]
        marlin = lesson.seed_value(seed, "Marlin", T, "tok_s")
        ceil = lesson.seed_value(seed, "Marlin", T, "ceiling_linear-quantized")
        print(f"{T} user{'s' if T > 1 else ''}: {e['contender']} reached {100 * e['eta']:.1f}% of its floor on the H200 "
              f"({e['us_median']:.1f} us vs {e['floor_us']:.1f} us at {gpu_specs['h200'].mem_bw_GBps:g} GB/s, {e['file']})")
        print(f"   ceiling {p['ceiling_tok_s']:.0f} tok/s -> predicted {p['predicted_tok_s']:.0f} tok/s per user "
              f"({p['pct_of_ceiling']:.0f}% of the ceiling); Marlin recorded {marlin:.1f} = {100 * marlin / ceil:.0f}%")
else:
    print("no recorded Triton MoE-layer sweep in data/bench/: no prediction")

# %% [markdown]
# ## 8. What the gap means
#
# The paragraph below is computed from the tables above (published CSV rows and the ceiling), so
# it changes if a row or a parameter does.

# %%
# NBVAL_CHECK_OUTPUT
print(textwrap.fill(lesson.gap_paragraph(seed, cfg, plan, context_len, guide_ceiling=ceil1), 110))

# %%
_ = results.record("04_throughput", {
    "params": {"model": model, "gpus": gpus, "tp": tp, "pp": pp, "concurrency": concurrency,
               "context_len": context_len, "weight_format": weight_format, "precision": precision,
               "routing": routing},
    "ceiling_table": ceil_table.replace({np.nan: None}).to_dict("records"),
    "published_vs_ceiling": pub[["source_url", "hardware", "model", "backend", "cuda", "concurrency",
                                 "tok_s", "tok_s_basis", "correct_output", "ceiling_linear-quantized",
                                 "pct_linear-quantized", "ceiling_experts-only", "pct_experts-only"]]
    .replace({np.nan: None}).to_dict("records"),
    # a prediction from recorded data (which file, which contender), not a timing of this machine
    "prediction_triton_on_seed_setup": {str(T): {**p, "contender": efficiency[T]["contender"],
                                                 "from": efficiency[T]["file"]} for T, p in prediction.items()},
    "measured_here": None if live is None else sweep_path.name,
})


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
