# %% [markdown]
# # 04 · tok/s against the physical ceiling
#
# Users pick an NVFP4 MoE backend by tok/s. The seed report's table (Marlin 46-49 tok/s,
# FlashInfer CUTLASS 120f 39.0, 120a 14.6, and the 4-user figures) says nothing about how far
# any of them is from what the hardware allows. This notebook puts every number on one page
# against a **ceiling**: for one decode step, the bytes every GPU must read (weights of the
# experts the batch touches, attention and linear-attention weights, lm_head, KV cache,
# linear-attention state) over its memory bandwidth, or the FLOPs over its tensor rate,
# whichever is larger, plus the tensor-parallel all-reduces and pipeline hops on the link.
#
# Sources: published figures in `data/published/*.csv` (one row per number, link in each row),
# GPU specifications in `data/hardware.csv` (every value with its source; derived or unsourced
# values say so), model shapes in `sm120lab.roofline.models` (public model cards, listed below),
# our own H200 MoE-layer sweeps in `data/bench/moe_*.json` when present.
# The formulas are in the docstrings of `sm120lab/roofline/*.py`; `tests/test_roofline_*.py`
# check them on hand-computed cases. The SM120 ceilings are arithmetic on datasheets,
# **unverified on SM120 hardware**. Runs on a CPU in seconds.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sm120lab import results
from sm120lab.roofline import (PRECISION_PLANS, apply_bench_ceilings, ceiling, get_model, load_gpus,
                               load_hardware_table, moe_layer_floor_us, precision_plan, step_cost)
from sm120lab.roofline.measured import bench_files, measured_active_experts, moe_layer_table
from sm120lab.roofline.routing import expected_distinct_uniform
from sm120lab.roofline.published import load_published

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
measure = False

# %% [markdown]
# ## 1. What one decoded token costs
#
# The weight groups are stored as the precision plan says. `linear-quantized` (default):
# routed experts, shared expert and softmax-attention projections in the expert format;
# Gated DeltaNet projections, router, lm_head and embeddings in bf16, the coverage RedHat's
# Qwen3.5-family NVFP4 cards state. `experts-only`: only routed experts quantized. The exact
# per-module coverage of `nvidia/Qwen3.5-397B-A17B-NVFP4` was not verified here, so section 3
# shows both. KV cache FP8 (the seed's `--kv-cache-dtype`), linear-attention state fp32 (the
# `mamba_ssm_dtype` of the Qwen3.5 configs).

# %%
# NBVAL_CHECK_OUTPUT
cfg = get_model(model)
plan = precision_plan(precision, weight_format)
print(f"{cfg.name}: {cfg.n_layers} layers ({cfg.n_full_attn_layers} full attention, "
      f"{cfg.n_sliding_attn_layers} sliding, {cfg.n_linear_attn_layers} Gated DeltaNet), "
      f"E={cfg.n_experts} top-{cfg.top_k}, H={cfg.hidden}, I={cfg.moe_intermediate}, vocab {cfg.vocab}")
print(f"parameters: {cfg.total_params() / 1e9:.1f} B total, {cfg.active_params() / 1e9:.2f} B active per token")
print(f"precision plan '{precision}': {PRECISION_PLANS[precision]}")
rows = {}
for B in (1, 4, max(concurrency)):
    c = step_cost(cfg, plan, B, context_len, routing=routing)
    rows[f"B={B} GB/step"] = {k: v / 1e9 for k, v in c.bytes.items()} | {"TOTAL": c.total_bytes / 1e9}
    rows[f"B={B} distinct experts"] = {"routed_experts": c.distinct_experts}
per_step = pd.DataFrame(rows)
print(per_step.to_string(float_format=lambda x: f"{x:.3f}", na_rep=""))
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
# Datasheet values and our own measurements are separate columns. `derived` marks a dense
# rate computed from a published sparse one (2:4 sparsity doubles the headline);
# `UNSOURCED` marks a value no datasheet in reach gave (only tensor rates, which do not bind
# at decode). The H200 measured values come from `data/bench/moe_*.json` ceilings when such
# a file exists, else from the earlier session recorded in KINDS.md.

# %%
# NBVAL_IGNORE_OUTPUT
hw_files = bench_files()
gpu_specs, ceiling_file = apply_bench_ceilings(load_gpus(), hw_files)
print("H200 measured ceilings from:", ceiling_file or gpu_specs["h200"].measured_source)

# %%
# NBVAL_CHECK_OUTPUT
hw = load_hardware_table()
show = hw[["gpu", "compute_capability", "mem_bw_GBps", "mem_GB", "bf16_dense_TFLOPs", "fp8_dense_TFLOPs",
           "fp4_dense_TFLOPs", "smem_per_block_bytes", "pcie_GBps_per_dir", "nvlink_GBps_per_dir"]].copy()
for col, src in (("bf16_dense_TFLOPs", "bf16_source"), ("fp8_dense_TFLOPs", "fp8_source"),
                 ("fp4_dense_TFLOPs", "fp4_source")):
    show[col] = [("" if pd.isna(v) else f"{v:g}") + (" (unsourced)" if str(s).startswith("UNSOURCED")
                 else " (derived)" if str(s).startswith("derived") else "") for v, s in zip(hw[col], hw[src])]
print(show.to_string(index=False, na_rep="-"))
print("\nmeasured (datasheet-free) columns, data/hardware.csv:")
print(hw[["gpu", "measured_copy_GBps", "measured_bf16_TFLOPs"]].dropna().to_string(index=False))

# %% [markdown]
# ## 3. The ceiling table
#
# For each GPU in `gpus`, `tp` x `pp` copies, each concurrency in `concurrency`: the per-user
# and aggregate ceiling (datasheet bandwidth; PCIe where there is no NVLink), which floor binds,
# and whether the weights fit in memory at all.

# %%
# NBVAL_CHECK_OUTPUT
def ceiling_rows(cfg, plan, gpu_names, tp, pp, batches, context, bandwidth="datasheet"):
    out = []
    for g in gpu_names:
        spec = gpu_specs[g]
        if tp * pp > 1 and not spec.link_GBps():
            out.append({"gpu": g, "tp": tp, "pp": pp, "B": "-", "note": "no GPU-GPU link in hardware.csv"})
            continue
        for B in batches:
            ce = ceiling(cfg, spec, plan, tp=tp, pp=pp, batch=B, context=context, routing=routing,
                         bandwidth=bandwidth)
            out.append({"gpu": g, "tp": tp, "pp": pp, "B": B, "per_user_tok_s": ce.per_user_tok_s,
                        "aggregate_tok_s": ce.aggregate_tok_s, "bound": ce.bound,
                        "GB_per_gpu_step": ce.bytes_per_gpu / 1e9, "link_ms": ce.link_time_s * 1e3,
                        "bubble": ce.bubble, "weights_GB_per_gpu": ce.weights_per_gpu_GB,
                        "note": "" if ce.fits else f"weights do not fit ({spec.mem_GB:g} GB)"})
    return pd.DataFrame(out)


ceil_table = ceiling_rows(cfg, plan, gpus, tp, pp, concurrency, context_len)
print(f"{cfg.name}, {weight_format} '{precision}', TP{tp} x PP{pp}, context {context_len}, {routing} routing")
print(ceil_table.to_string(index=False, float_format=lambda x: f"{x:.1f}", na_rep=""))

# %% [markdown]
# The H200 also has a measured copy bandwidth (our runs): its ceiling at that bandwidth, the
# number the measured MoE sweeps of section 6 should be set against.

# %%
# NBVAL_IGNORE_OUTPUT
if "h200" in gpus and gpu_specs["h200"].measured_copy_GBps:
    h = gpu_specs["h200"]
    meas = ceiling_rows(cfg, plan, ["h200"], tp, pp, concurrency, context_len, bandwidth="measured")
    print(f"h200 at the measured {h.measured_copy_GBps:.0f} GB/s and {h.measured_bf16_TFLOPs:.0f} TFLOP/s "
          f"({ceiling_file or h.measured_source[:60]}):")
    print(meas[["B", "per_user_tok_s", "aggregate_tok_s", "bound"]].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
else:
    print("no measured H200 ceilings: only datasheet values above")

# %% [markdown]
# ## 4. The seed's table against the ceiling
#
# Each published row is compared with the ceiling of its own configuration (GPU, TP, PP,
# model and concurrency from its CSV row). The seed ran `nvidia/Qwen3.5-397B-A17B-NVFP4` on
# 4x RTX PRO 6000 (PCIe) at TP2 PP2. Rows that produced garbage or crashed have no bar.

# %%
# NBVAL_CHECK_OUTPUT
pub = load_published()
plans = {"linear-quantized": precision_plan("linear-quantized", weight_format),
         "experts-only": precision_plan("experts-only", weight_format)}


def row_ceiling(r, plan_name):
    try:
        m = get_model(r["model"])
    except ValueError:
        return np.nan
    spec = gpu_specs[r["gpu"]]
    fmt = "mxfp4" if m.name == "gpt-oss-120b" else weight_format
    p = precision_plan(plan_name, fmt)
    return ceiling(m, spec, p, tp=int(r["tp"]), pp=int(r["pp"]), batch=int(r["concurrency"]),
                   context=context_len, routing=routing).per_user_tok_s


for name in plans:
    pub[f"ceiling_{name}"] = [row_ceiling(r, name) for _, r in pub.iterrows()]
    pub[f"pct_{name}"] = 100 * pub["per_user_tok_s"] / pub[f"ceiling_{name}"]
seed = pub[pub["source_url"].str.contains("flashinfer/issues/2723")].copy()
cols = ["backend", "cuda", "concurrency", "tok_s", "correct_output", "ceiling_linear-quantized",
        "pct_linear-quantized", "ceiling_experts-only", "pct_experts-only"]
print("per-user tok/s; ceilings per user for 4x RTX PRO 6000 TP2 PP2 (datasheet 1792 GB/s, PCIe 63 GB/s)")
print(seed[cols].to_string(index=False, float_format=lambda x: f"{x:.1f}", na_rep="-"))

# %%
# NBVAL_IGNORE_OUTPUT
ok = seed[seed["tok_s"].notna()]
backends = list(dict.fromkeys(ok["backend"]))
fig, ax = plt.subplots(figsize=(10, 4.5))
width = 0.38
for j, c in enumerate((1, 4)):
    sub = ok[ok["concurrency"] == c].set_index("backend").reindex(backends)
    x = np.arange(len(backends)) + (j - 0.5) * width
    bars = ax.bar(x, sub["tok_s"], width, label=f"{c} user{'s' if c > 1 else ''} (per user)")
    for xi, (_, r) in zip(x, sub.iterrows()):
        if pd.notna(r["tok_s"]):
            ax.errorbar(xi, r["tok_s"], yerr=[[r["tok_s"] - r["tok_s_low"]], [r["tok_s_high"] - r["tok_s"]]],
                        color="k", capsize=3, lw=1)
            ax.annotate(f"{r['pct_linear-quantized']:.0f}%", (xi, r["tok_s_high"]), ha="center",
                        va="bottom", fontsize=9, xytext=(0, 2), textcoords="offset points")
for j, c in enumerate((1, 4)):
    cval = ok[ok["concurrency"] == c]["ceiling_linear-quantized"].iloc[0]
    ax.axhline(cval, ls="--", lw=1, color=f"C{j}", label=f"ceiling, {c} user{'s' if c > 1 else ''}: {cval:.0f} tok/s")
ax.set_xticks(np.arange(len(backends)), backends, rotation=12)
ax.set_ylabel("tok/s per user")
ax.set_title("Seed report (flashinfer#2723), 4x RTX PRO 6000 TP2 PP2: % = share of the ceiling")
ax.legend(fontsize=8, loc="upper right")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. tok/s vs concurrency: published points against the ceiling curve
#
# Per-user tok/s falls with concurrency even at the ceiling: a batch of B tokens touches
# E(1-(1-k/E)^B) distinct experts (38.8 of 512 for B=4 instead of 10), and each sequence adds
# its KV cache and linear-attention state. Aggregate tok/s rises. Published points whose model
# is not one of our presets (or is not stated) cannot get a ceiling and are listed instead.

# %%
# NBVAL_CHECK_OUTPUT
cs = np.unique(np.concatenate([np.array(concurrency), np.geomspace(1, 64, 25).round()])).astype(int)
panels = []
for (gpu_name, m_name, ptp, ppp), grp in pub[pub["tok_s"].notna()].groupby(["gpu", "model", "tp", "pp"]):
    try:
        m = get_model(m_name)
    except ValueError:
        for _, r in grp.iterrows():
            print(f"no ceiling (model '{m_name}' is not a preset): {r['hardware']}, {r['backend']}, "
                  f"c={r['concurrency']}: {r['tok_s']:g} tok/s {r['tok_s_basis']} ({r['source_url']})")
        continue
    p = precision_plan(precision, "mxfp4" if m.name == "gpt-oss-120b" else weight_format)
    curve = [ceiling(m, gpu_specs[gpu_name], p, tp=int(ptp), pp=int(ppp), batch=int(b), context=context_len,
                     routing=routing) for b in cs]
    panels.append((gpu_name, m, int(ptp), int(ppp), grp, curve))
    print(f"ceiling {m.name} on {int(ptp * ppp)}x {gpu_name} TP{int(ptp)} PP{int(ppp)}: per user "
          f"{curve[0].per_user_tok_s:.1f} tok/s at B=1, aggregate {curve[-1].aggregate_tok_s:.0f} tok/s at B={cs[-1]}")
    for _, r in grp.iterrows():
        print(f"    {r['backend']}, c={r['concurrency']}: {r['per_user_tok_s']:.1f} tok/s per user = "
              f"{r[f'pct_{precision}']:.0f}% of the ceiling ({r['source_url']})")

# %%
# NBVAL_IGNORE_OUTPUT
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
from sm120lab.roofline.routing import expected_distinct_from_inclusion, zipf_inclusion_probabilities

seed_spec = gpu_specs["rtx-pro-6000"]
skew = []
for s_exp in (0.0, 0.5, 1.0):
    pi = zipf_inclusion_probabilities(cfg.n_experts, cfg.top_k, s_exp, samples=20000, seed=0)
    for B in concurrency:
        d = expected_distinct_from_inclusion(pi, B)
        ce = ceiling(cfg, seed_spec, plan, tp=2, pp=2, batch=B, context=context_len, routing="zipf", zipf_s=s_exp)
        skew.append({"zipf_s": s_exp, "B": B, "distinct_experts": d, "per_user_tok_s": ce.per_user_tok_s})
print(f"{cfg.name} on 4x rtx-pro-6000 TP2 PP2 (s=0 is uniform routing); per-user ceiling by skew:")
print(pd.DataFrame(skew).pivot(index="B", columns="zipf_s", values=["distinct_experts", "per_user_tok_s"])
      .to_string(float_format=lambda x: f"{x:.1f}"))

# %% [markdown]
# ## 6. Our measured MoE-layer sweeps (H200), MoE-layer-only
#
# The kernel benchmark writes `data/bench/moe_<gpu>_<date>.json`. A row with `op == "moe"`
# is one full MoE layer for T tokens. A decode step with T concurrent sequences runs
# `n_layers` such layers, so the MoE layers **alone** would allow 1/(n_layers x us) tok/s per
# user and T times that in aggregate. This is **MoE-layer-only**: attention, linear attention,
# lm_head, collectives and launch gaps are not in it, so it is an upper bound on what that
# kernel permits, to set beside the MoE-layer memory floor at the measured copy bandwidth.

# %%
# NBVAL_IGNORE_OUTPUT
files = bench_files()
moe_tab = moe_layer_table(files, {cfg.name: cfg.n_layers}) if files else pd.DataFrame()
if moe_tab.empty:
    print("no measured MoE-layer sweep for this model yet (data/bench/moe_*.json with op='moe' rows): "
          "section 6 is empty until the kernel benchmark writes one")
else:
    h200 = gpu_specs["h200"]
    bw = h200.bandwidth_GBps("measured")
    moe_tab["floor_us"] = [moe_layer_floor_us(cfg, T, bw, weight_format=weight_format) for T in moe_tab["T"]]
    moe_tab["pct_of_floor"] = 100 * moe_tab["floor_us"] / moe_tab["us_median"]
    print(f"MoE-layer-only, {cfg.n_layers} layers per step; floor at the measured copy bandwidth {bw:.0f} GB/s")
    print(moe_tab[["file", "contender", "timing", "T", "us_median", "floor_us", "pct_of_floor", "moe_us_per_token",
                   "moe_only_per_user_tok_s", "moe_only_aggregate_tok_s"]].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    act = pd.DataFrame(measured_active_experts(files))
    if not act.empty:
        act["E[distinct] formula"] = [expected_distinct_uniform(int(r.E), int(r.k), int(r.T)) for r in act.itertuples()]
        print("\ndistinct experts the benchmark's uniform routings touched vs E(1-(1-k/E)^T):")
        print(act[["file", "T", "active_experts", "E[distinct] formula"]].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    fig, ax = plt.subplots(figsize=(7, 4))
    for (contender, timing), g in moe_tab.groupby(["contender", "timing"]):
        ax.plot(g["T"], g["moe_only_per_user_tok_s"], "o-", label=f"{contender} [{timing}] (MoE-layer-only)")
    Ts = np.array(sorted(moe_tab["T"].unique()))
    ax.plot(Ts, [1e6 / (cfg.n_layers * moe_layer_floor_us(cfg, T, bw, weight_format=weight_format)) for T in Ts],
            "k--", label=f"MoE-layer memory floor at {bw:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step (T)")
    ax.set_ylabel("tok/s per user, MoE layers only")
    ax.set_title(f"H200 measured MoE layer, {cfg.name}: MoE-layer-only tok/s")
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# With `measure=True` on a machine with a GPU, a short fresh sweep (T = 1, 4, 16, 64; Triton
# W4A16 and the torch bf16 grouped GEMM) runs through `sm120lab.bench.moe` and lands in
# `data/bench/`; re-run the notebook to include it.

# %%
# NBVAL_IGNORE_OUTPUT
def fresh_sweep():
    if not measure:
        return "measure=False: using recorded data only"
    try:
        import torch
    except ImportError:
        return "measure=True but torch is not installed: no sweep"
    if not torch.cuda.is_available():
        return "measure=True but no CUDA GPU is visible: no sweep"
    try:
        from sm120lab.bench.moe import default_out_path, run_moe_bench
    except ImportError as exc:
        return f"measure=True but sm120lab.bench.moe cannot be imported ({exc}): no sweep"
    from sm120lab.paths import data_dir

    out = default_out_path(data_dir() / "bench")
    run_moe_bench(out, model=model, tokens=(1, 4, 16, 64), contenders=("triton-w4a16", "torch-bf16-grouped"),
                  reps=20, sweep=False, command="notebooks/04_throughput measure=True (short sweep)",
                  log=lambda s: None)
    return f"short sweep written to {out}: re-run the notebook to include it in section 6"


print(fresh_sweep())

# %%
# Benchmark figures of the newest sweep, in the schema `sm120lab compare` diffs across runs.
import json as _json  # noqa: E402
from pathlib import Path  # noqa: E402

_latest = sorted(bench_files())[-1:] if bench_files() else []
if _latest:
    _rows = _json.loads(Path(_latest[0]).read_text())["rows"]
    results.record_bench("04_throughput", {
        f"{r['op']}_us:{r['contender']}:T{r['T']}": {
            "value": r["us_median"], "unit": "us", "lower_is_better": True,
            "spread": (r["us_p90"] - r["us_p10"]) / r["us_median"] if r.get("us_p90") else None}
        for r in _rows if r.get("us_median")})

# %% [markdown]
# ## 7. What the gap means
#
# The numbers in the paragraph below are computed from the tables above (published CSV rows
# and the ceiling), so they change if a row or a parameter does.

# %%
# NBVAL_CHECK_OUTPUT
def seed_val(backend, c, col):
    r = seed[(seed["backend"] == backend) & (seed["concurrency"] == c)]
    return float(r[col].iloc[0])


marlin1, fi1 = seed_val("Marlin", 1, "tok_s"), seed_val("FlashInfer CUTLASS 120f", 1, "tok_s")
fi1a = seed_val("FlashInfer CUTLASS 120a", 1, "tok_s")
marlin4, fi4 = seed_val("Marlin", 4, "tok_s"), seed_val("FlashInfer CUTLASS 120f", 4, "tok_s")
ceil1, ceil4 = seed_val("Marlin", 1, "ceiling_linear-quantized"), seed_val("Marlin", 4, "ceiling_linear-quantized")
ceil1_eo = seed_val("Marlin", 1, "ceiling_experts-only")
d4 = step_cost(cfg, plan, 4, context_len).distinct_experts
text = (
    f"At one user the 4x RTX PRO 6000 TP2 PP2 setup could at most decode {ceil1:.0f} tok/s "
    f"({ceil1_eo:.0f} if only the experts are 4-bit): every token must stream its share of the "
    f"{c1.total_bytes / 1e9:.1f} GB it touches through 1792 GB/s per GPU, and PP2 does not shorten that chain. "
    f"Marlin's {marlin1:.1f} tok/s is {100 * marlin1 / ceil1:.0f}% of it, FlashInfer CUTLASS 120f's {fi1:.1f} is "
    f"{100 * fi1 / ceil1:.0f}%, and 120a's {fi1a:.2f} is {100 * fi1a / ceil1:.0f}%: the backends are far from the "
    f"memory floor, so the difference between them is not bandwidth but time spent elsewhere, which is what "
    f"launch overhead (many small kernels per token at batch 1, in two pipeline stages), per-token "
    f"activation quantization in W4A4 paths, and autotuner fallbacks to slow tactics (the 120a run lost the "
    f"TMA warp-specialized grouped GEMMs, landscape.md) produce. With four users the ceiling "
    f"per user falls to {ceil4:.0f} tok/s ({100 * (1 - ceil4 / ceil1):.0f}% lower: the batch touches {d4:.1f} "
    f"distinct experts instead of {cfg.top_k}); Marlin falls {100 * (1 - marlin4 / marlin1):.0f}%, close to that, "
    f"but 120f falls {100 * (1 - fi4 / fi1):.0f}%, more than the bytes explain: something on that path (tactic "
    f"choice at small M, activation quantization per token) costs more per extra sequence than the weights do. Decode here is bandwidth-bound by a wide margin "
    f"({c1.total_flops / c1.total_bytes:.1f} FLOP/byte), so faster FP4 arithmetic alone cannot close the gap; "
    f"fewer, fused, better-tuned kernels can."
)
import textwrap

print(textwrap.fill(text, 110))

# %%
# NBVAL_IGNORE_OUTPUT
results.record("04_throughput", {
    "params": {"model": model, "gpus": gpus, "tp": tp, "pp": pp, "concurrency": concurrency,
               "context_len": context_len, "weight_format": weight_format, "precision": precision,
               "routing": routing},
    "ceiling_table": ceil_table.replace({np.nan: None}).to_dict("records"),
    "published_vs_ceiling": pub[["source_url", "hardware", "model", "backend", "cuda", "concurrency",
                                 "tok_s", "tok_s_basis", "correct_output", "ceiling_linear-quantized",
                                 "pct_linear-quantized", "ceiling_experts-only", "pct_experts-only"]]
    .replace({np.nan: None}).to_dict("records"),
    "measured_moe_layer_only": [] if moe_tab.empty else moe_tab.replace({np.nan: None}).to_dict("records"),
    "h200_measured_ceilings_from": ceiling_file or gpu_specs["h200"].measured_source,
})
print("recorded")
