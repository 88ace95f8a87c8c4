"""The tables notebook 04 reads from: ceilings per GPU, published figures against their ceilings,
measured MoE layers against their memory floor, and a prediction for the seed's setup.

Every function here is arithmetic on :mod:`~sm120lab.roofline.ceiling` and the recorded data
(``data/hardware.csv``, ``data/published/*.csv``, ``data/bench/moe_*.json``); the notebook only
shows what they return.

The prediction (:func:`predict_with_kernel`), per pipeline stage i of the ceiling:

    t_i' = t_i + t_moe_i * (1/eta - 1),    t_moe_i = routed-expert bytes of stage i per GPU / BW

i.e. the MoE layers run at ``eta`` of their memory floor and everything else stays at its ceiling,
and ``eta = floor_us(T) / us_median(T)`` is the fraction of its datasheet-bandwidth floor a
measured MoE layer reached (:func:`kernel_efficiency`). It is an upper bound for that kernel, not
a measurement, and for SM120 parts unverified on SM120 hardware.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

from ..bench.records import Timing, bench_doc, load_bench
from .basis import Basis, plan_basis
from .ceiling import ceiling, moe_layer_floor_us
from .decode import Precision, step_cost
from .hardware import GPUSpec
from .measured import moe_layer_table
from .models import ModelConfig, get_model
from .routing import expected_distinct_from_inclusion, zipf_inclusion_probabilities

#: the seed report's rows in data/published/ (flashinfer-ai/flashinfer#2723)
SEED_SOURCE = "flashinfer/issues/2723"
PLANS = ("linear-quantized", "experts-only")


def ceiling_table(model: ModelConfig, basis: Basis, gpus: dict[str, GPUSpec], names: Iterable[str], *,
                  tp: int, pp: int, batches: Iterable[int], context: int, routing: str = "uniform",
                  bandwidth: str = "datasheet"):
    """One row per (GPU, B): per-user and aggregate ceiling tok/s on ``basis``, binding floor, memory
    held per GPU, and the ``basis`` label of the row (:meth:`~.basis.Basis.label_for`).

    A GPU without a GPU-GPU link in ``data/hardware.csv`` gets one row saying so when TP*PP > 1.
    """
    import pandas as pd

    rows = []
    for name in names:
        spec = gpus[name]
        if tp * pp > 1 and not spec.link_GBps():
            rows.append({"gpu": name, "B": None, "note": "no GPU-GPU link in data/hardware.csv"})
            continue
        label = basis.label_for(spec, tp * pp)
        for b in batches:
            ce = basis.ceiling(model, spec, tp=tp, pp=pp, batch=b, context=context, routing=routing,
                               bandwidth=bandwidth)
            rows.append({"gpu": name, "B": b, "basis": label, "per_user_tok_s": ce.per_user_tok_s,
                         "aggregate_tok_s": ce.aggregate_tok_s, "bound": ce.bound,
                         "GB_read_per_gpu_step": ce.bytes_per_gpu / 1e9,
                         "GB_held_per_gpu": ce.memory_per_gpu_GB, "weights_GB_per_gpu": ce.weights_per_gpu_GB,
                         "mem_GB": spec.mem_GB, "fits": ce.fits, "bandwidth": ce.bandwidth_source,
                         "note": "" if ce.fits else f"does not fit in {spec.mem_GB:g} GB"})
    return pd.DataFrame(rows)


def _row_ceiling(row, gpus: dict[str, GPUSpec], basis: Basis, context: int, routing: str) -> tuple[float, str]:
    """(per-user ceiling, basis label) of one published row's own setup; (NaN, "") when its model is
    not a preset."""
    try:
        model = get_model(row["model"])
    except ValueError:
        return math.nan, ""
    spec, tp, pp = gpus[row["gpu"]], int(row["tp"]), int(row["pp"])
    return (basis.ceiling(model, spec, tp=tp, pp=pp, batch=int(row["concurrency"]), context=context,
                          routing=routing).per_user_tok_s, basis.label_for(spec, tp * pp))


#: the seed report's setup (flashinfer#2723): GPU, TP, PP, and the concurrencies its table and the fit check use
SEED_SETUP = {"gpu": "rtx-pro-6000", "tp": 2, "pp": 2, "batches": (1, 4, 64)}


def seed_ceiling(model: ModelConfig, basis: Basis, gpus: dict[str, GPUSpec], *, context: int):
    """:func:`ceiling_table` of the seed report's own setup (:data:`SEED_SETUP`: 4x RTX PRO 6000, TP2 PP2)
    at 1, 4 and 64 users, uniform routing: the per-user ceiling and whether weights + KV cache + state fit.

    Args:
        model, basis: the model and what its ceiling counts (:mod:`~.basis`).
        gpus: the GPU specs (:func:`sm120lab.roofline.load_gpus`).
        context: tokens of context per sequence.

    Returns:
        The ceiling table, one row per concurrency, last row 64 users.
    """
    return ceiling_table(model, basis, gpus, [SEED_SETUP["gpu"]], tp=SEED_SETUP["tp"], pp=SEED_SETUP["pp"],
                         batches=list(SEED_SETUP["batches"]), context=context)


def published_vs_ceiling(pub, gpus: dict[str, GPUSpec], basis: Basis, *, weight_format: str = "nvfp4",
                         context: int = 2048, routing: str = "uniform", others: Iterable[str] = PLANS):
    """``pub`` (:func:`~sm120lab.roofline.published.load_published`) against the per-user ceiling of
    each row's own setup: ``ceiling``, ``pct`` (per-user tok/s as % of it) and ``basis`` (its label) on
    ``basis``, and ``ceiling_<plan>`` / ``pct_<plan>`` on each precision plan of ``others``
    (:func:`~.basis.plan_basis`, bandwidth only), whose labels :func:`other_basis_labels` gives;
    NaN where the row's model is not a preset."""
    out = pub.copy()
    main = [_row_ceiling(r, gpus, basis, context, routing) for _, r in out.iterrows()]
    out["ceiling"] = [c for c, _ in main]
    out["basis"] = [label for _, label in main]
    out["pct"] = 100 * out["per_user_tok_s"] / out["ceiling"]
    for plan_name in others:
        alt = plan_basis(plan_name, weight_format)
        out[f"ceiling_{plan_name}"] = [_row_ceiling(r, gpus, alt, context, routing)[0] for _, r in out.iterrows()]
        out[f"pct_{plan_name}"] = 100 * out["per_user_tok_s"] / out[f"ceiling_{plan_name}"]
    return out


def other_basis_labels(weight_format: str = "nvfp4", plans: Iterable[str] = PLANS) -> dict[str, str]:
    """``{plan: label}`` of the other bases :func:`published_vs_ceiling` adds as ``ceiling_<plan>``."""
    return {p: plan_basis(p, weight_format).label for p in plans}


def seed_rows(pub):
    """The seed report's rows (4x RTX PRO 6000, TP2 PP2, Qwen3.5-397B-A17B NVFP4)."""
    return pub[pub["source_url"].str.contains(SEED_SOURCE, regex=False)].copy()


def seed_value(seed, backend: str, concurrency: int, column: str) -> float:
    """One number of the seed table; a one-line error naming the row when it is missing."""
    return float(_seed_row(seed, backend, concurrency)[column])


def _seed_row(seed, backend: str, concurrency: int):
    row = seed[(seed["backend"] == backend) & (seed["concurrency"] == concurrency)]
    if row.empty:
        raise ValueError(f"no seed row for backend {backend!r} at concurrency {concurrency} in data/published/")
    return row.iloc[0]


def seed_reported(seed, backend: str, concurrency: int) -> str:
    """The seed's published tok/s as reported (:func:`~.published.reported_tok_s`: "46-49 (midpoint 47.5)"
    for a range, "39" for one number)."""
    from .published import reported_tok_s

    r = _seed_row(seed, backend, concurrency)
    return reported_tok_s(r["tok_s_low"], r["tok_s_high"])


def ceiling_curves(pub, gpus: dict[str, GPUSpec], basis: Basis, *, context: int, routing: str,
                   batches: Iterable[int]):
    """Per published (gpu, model, TP, PP) group: the ceiling on ``basis`` at every B of ``batches``.

    Returns:
        (panels, unmatched): panels are ``(gpu, model, tp, pp, rows, [Ceiling per B], basis label)``,
        the rows with ``ceiling_here`` (the ceiling at the row's own concurrency);
        unmatched are the rows whose model is not a preset (no ceiling possible).
    """
    panels, unmatched = [], []
    batches = list(batches)
    for (gpu, model_name, tp, pp), group in pub[pub["tok_s"].notna()].groupby(["gpu", "model", "tp", "pp"]):
        try:
            model = get_model(model_name)
        except ValueError:
            unmatched.append(group)
            continue
        def at(b, spec=gpus[gpu], m=model, t=int(tp), p=int(pp)):
            return basis.ceiling(m, spec, tp=t, pp=p, batch=int(b), context=context, routing=routing)

        curve = [at(b) for b in batches]
        group = group.assign(ceiling_here=[at(c).per_user_tok_s for c in group["concurrency"]])
        panels.append((gpu, model, int(tp), int(pp), group, curve, basis.label_for(gpus[gpu], int(tp) * int(pp))))
    import pandas as pd

    return panels, (pd.concat(unmatched) if unmatched else pub.iloc[:0])


def zipf_skew_table(model: ModelConfig, spec: GPUSpec, basis: Basis, *, batches: Iterable[int], context: int,
                    exponents: Iterable[float] = (0.0, 0.5, 1.0), tp: int = 2, pp: int = 2, samples: int = 20000,
                    seed: int = 0):
    """Distinct experts and per-user ceiling on ``basis`` for Zipf-skewed routing (s = 0 is uniform)."""
    import pandas as pd

    rows = []
    for s in exponents:
        pi = zipf_inclusion_probabilities(model.n_experts, model.top_k, s, samples=samples, seed=seed)
        for b in batches:
            ce = basis.ceiling(model, spec, tp=tp, pp=pp, batch=b, context=context, routing="zipf", zipf_s=s)
            rows.append({"zipf_s": s, "B": b, "distinct_experts": expected_distinct_from_inclusion(pi, b),
                         "per_user_tok_s": ce.per_user_tok_s})
    return pd.DataFrame(rows)


def moe_layer_vs_floor(files: list[Path], model: ModelConfig, bandwidth_GBps: float, *, weight_format: str = "nvfp4"):
    """Measured MoE-layer rows (:func:`~sm120lab.roofline.measured.moe_layer_table`) with the
    layer's memory floor at ``bandwidth_GBps`` and the % of it reached."""
    table = moe_layer_table(files, {model.name: model.n_layers}) if files else None
    if table is None or table.empty:
        return table
    table["floor_us"] = [moe_layer_floor_us(model, t, bandwidth_GBps, weight_format=weight_format) for t in table["T"]]
    table["pct_of_floor"] = 100 * table["floor_us"] / table["us_median"]
    return table


def kernel_efficiency(bench_file: Path, *, tokens: int, gpu: GPUSpec, prefix: str = "triton",
                      weight_format: str = "nvfp4") -> dict | None:
    """The fastest CUDA-graph MoE layer of a contender named ``prefix*`` at ``tokens`` in a bench file,
    as the fraction ``eta`` of its floor at the datasheet bandwidth of the GPU it ran on.

    Returns:
        ``{"contender", "T", "us_median", "floor_us", "eta", "file", "gpu"}``, or None when the file
        has no such row.
    """
    doc = load_bench(bench_file)
    model = get_model(doc.model)
    rows = [r for r in doc.rows_for(op="moe", timing="cuda_graph", T=tokens)
            if r.contender.startswith(prefix) and r.us_median]
    if not rows:
        return None
    best = min(rows, key=lambda r: r.us_median)
    floor = moe_layer_floor_us(model, tokens, gpu.mem_bw_GBps, weight_format=weight_format)
    return {"contender": best.contender, "T": tokens, "us_median": best.us_median, "floor_us": floor,
            "eta": floor / best.us_median, "file": f"data/bench/{Path(bench_file).name}",
            "gpu": gpu.gpu}


def recorded_kernel_efficiency(model: ModelConfig, gpu: GPUSpec, *, tokens: Iterable[int] = (1, 4),
                               files: list[Path] | None = None, prefix: str = "triton") -> tuple[Path | None, dict]:
    """The newest recorded MoE-layer sweep of ``model`` (:func:`newest_bench_file`) and, per T in ``tokens``,
    the fraction of its datasheet-bandwidth floor the fastest Triton layer reached there,
    ``eta = floor_us(T) / us_median(T)`` (:func:`kernel_efficiency`).

    Args:
        model: the model preset; only sweeps recorded for it count.
        gpu: the GPU the sweeps ran on (its datasheet bandwidth sets the floor).
        tokens: the T values (concurrent users) to read.
        files: the bench files to choose from (default: ``data/bench/moe_*.json``).
        prefix: the contenders that count (``"triton"``: ours; ``"vllm-marlin"``: vLLM's Marlin).

    Returns:
        ``(file, {T: efficiency dict or None})``; ``(None, {})`` when no sweep is recorded for the model.
    """
    from .measured import bench_files

    newest = newest_bench_file(bench_files() if files is None else files, model=model.name)
    if newest is None:
        return None, {}
    return newest, {T: kernel_efficiency(newest, tokens=T, gpu=gpu, prefix=prefix) for T in tokens}


def predict_with_kernel(model: ModelConfig, spec: GPUSpec, plan: Precision, eta: float, *, tp: int, pp: int,
                        batch: int, context: int, routing: str = "uniform", collective_latency_us: float = 0.0) -> dict:
    """Per-user tok/s of ``model`` on TP x PP ``spec`` if its MoE layers ran at ``eta`` of their floor
    (module docstring). Returns the ceiling, the prediction and the prediction as % of the ceiling.
    ``collective_latency_us``: per all-reduce and pipeline hop, as in :func:`~sm120lab.roofline.ceiling`."""
    if not 0 < eta <= 1:
        raise ValueError(f"eta must be in (0, 1], got {eta}")
    ce = ceiling(model, spec, plan, tp=tp, pp=pp, batch=batch, context=context, routing=routing,
                 collective_latency_us=collective_latency_us)
    micro = ce.micro_batches
    cost = step_cost(model, plan, batch / micro, context, routing=routing)
    t_moe = cost.bytes["routed_experts"] / (tp * pp) / (ce.bandwidth_GBps * 1e9)
    stages = [t + t_moe * (1 / eta - 1) for t in ce.stage_times_s]
    period = max(micro * max(stages), sum(stages))
    return {"B": batch, "ceiling_tok_s": ce.per_user_tok_s, "predicted_tok_s": 1 / period,
            "pct_of_ceiling": 100 * (1 / period) / ce.per_user_tok_s,
            "moe_floor_ms_per_micro_batch": t_moe * pp * 1e3}


def plot_published(seed, prediction: dict | None = None, *, title: str = "", xlabel: str = "", ax=None,
                   wrap: int = 14, plan: str = ""):
    """Bar chart of the seed's published per-user tok/s (1 and 4 users, whiskers: the reported range,
    bar: its midpoint) against the ceiling of each concurrency (dashed), each bar labelled with its
    share of the ceiling.

    Bar heights: ``tok_s``; labels: ``pct`` = 100 * tok_s / ceiling (the basis of
    :func:`published_vs_ceiling`, which the caller names in ``title``). Layout: the
    legend sits below the axes (never over a bar), tick labels are wrapped to ``wrap`` characters
    (never overlapping), and the y axis leaves room for the labels above the tallest bar or line.

    Args:
        seed: :func:`seed_rows` of :func:`published_vs_ceiling`.
        prediction: ``{users: predict_with_kernel(...)}``; drawn as a hatched last group, labelled a
            prediction unverified on SM120 hardware. None or empty: no such group.
        title: axes title.
        xlabel: x-axis label.
        ax: the axes to draw into (a new 10 x 4.8 in figure when None).
        wrap: tick-label width in characters.
        plan: which ceiling columns to draw: "" for ``ceiling`` / ``pct`` (the basis of
            :func:`published_vs_ceiling`), a plan name for ``ceiling_<plan>`` / ``pct_<plan>``.

    Returns:
        The figure.
    """
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(10, 4.8))
    ceil_col, pct_col = (f"ceiling_{plan}", f"pct_{plan}") if plan else ("ceiling", "pct")
    ok = seed[seed["tok_s"].notna()]
    names = list(dict.fromkeys(ok["backend"]))
    prediction = prediction or {}
    width, top = 0.38, 0.0
    for j, c in enumerate((1, 4)):
        sub = ok[ok["concurrency"] == c].set_index("backend").reindex(names)
        users = f"{c} user{'s' if c > 1 else ''}"
        x = np.arange(len(names)) + (j - 0.5) * width
        ax.bar(x, sub["tok_s"], width, color=f"C{j}", label=f"{users} (per user)")
        for xi, (_, r) in zip(x, sub.iterrows()):
            if pd.notna(r["tok_s"]):
                ax.errorbar(xi, r["tok_s"], yerr=[[r["tok_s"] - r["tok_s_low"]], [r["tok_s_high"] - r["tok_s"]]],
                            color="k", capsize=3, lw=1)
                ax.annotate(f"{r[pct_col]:.0f}%", (xi, r["tok_s_high"]), ha="center", va="bottom",
                            fontsize=9, xytext=(0, 2), textcoords="offset points")
                top = max(top, r["tok_s_high"])
        ceil = ok[ok["concurrency"] == c][ceil_col]
        if len(ceil):
            ax.axhline(ceil.iloc[0], ls="--", lw=1, color=f"C{j}", label=f"ceiling, {users}: {ceil.iloc[0]:.0f} tok/s")
            top = max(top, ceil.iloc[0])
        if c in prediction:
            xi, val = len(names) + (j - 0.5) * width, prediction[c]["predicted_tok_s"]
            ax.bar(xi, val, width, color=f"C{j}", alpha=0.45, hatch="//", edgecolor="k",
                   label="prediction, unverified on SM120 hardware" if not j or 1 not in prediction else None)
            ax.annotate(f"{prediction[c]['pct_of_ceiling']:.0f}%", (xi, val), ha="center", va="bottom", fontsize=9,
                        xytext=(0, 2), textcoords="offset points")
            top = max(top, val)
    labels = [textwrap.fill(n, wrap) for n in names] + (["Triton kernel\n(PREDICTION)"] if prediction else [])
    ax.set_xticks(np.arange(len(labels)), labels, fontsize=9)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tok/s per user")
    ax.set_title(title)
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda i: (names[i].startswith("ceiling"), names[i].startswith("prediction")))
    ax.legend([handles[i] for i in order], [names[i] for i in order], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.22 if xlabel else -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def gap_paragraph(seed, model: ModelConfig, basis: Basis, context: int, width: int | None = None) -> str:
    """What the seed table says against the ceiling, in words, every number computed from ``seed``
    (:func:`published_vs_ceiling` rows of :func:`seed_rows`, whose ``ceiling`` is on ``basis``) and the
    model; the bandwidth-only ceilings of the precision plans are quoted once, each with its label.
    ``width``: wrap the paragraph into lines of at most that many characters (None: one line)."""
    import textwrap

    text = _gap_text(seed, model, basis, context)
    return text if width is None else textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def _gap_text(seed, model: ModelConfig, basis: Basis, context: int) -> str:
    marlin1, fi1 = seed_value(seed, "Marlin", 1, "tok_s"), seed_value(seed, "FlashInfer CUTLASS 120f", 1, "tok_s")
    fi1a = seed_value(seed, "FlashInfer CUTLASS 120a", 1, "tok_s")
    marlin4, fi4 = seed_value(seed, "Marlin", 4, "tok_s"), seed_value(seed, "FlashInfer CUTLASS 120f", 4, "tok_s")
    ceil1, ceil4 = seed_value(seed, "Marlin", 1, "ceiling"), seed_value(seed, "Marlin", 4, "ceiling")
    label = str(_seed_row(seed, "Marlin", 1)["basis"])
    alt = {p: seed_value(seed, "Marlin", 1, f"ceiling_{p}") for p in PLANS if f"ceiling_{p}" in seed}
    labels = other_basis_labels(plans=alt)
    plan = basis.precision_for(model)
    c1, c4 = step_cost(model, plan, 1, context), step_cost(model, plan, 4, context)
    return (
        f"At one user the 4x RTX PRO 6000 TP2 PP2 setup could at most decode {ceil1:.0f} tok/s ({label}): every "
        f"token must stream its share of the {c1.total_bytes / 1e9:.1f} GB it touches through each GPU's memory, "
        f"and PP2 does not shorten that chain"
        + (" (on other bases: " + ", ".join(f"{v:.0f} tok/s on the {labels[p]}" for p, v in alt.items()) + ")"
           if alt else "") + ". "
        f"Marlin's {seed_reported(seed, 'Marlin', 1)} tok/s is {100 * marlin1 / ceil1:.0f}% of the {ceil1:.0f}, "
        f"FlashInfer CUTLASS 120f's {seed_reported(seed, 'FlashInfer CUTLASS 120f', 1)} is "
        f"{100 * fi1 / ceil1:.0f}%, and 120a's {seed_reported(seed, 'FlashInfer CUTLASS 120a', 1)} is "
        f"{100 * fi1a / ceil1:.0f}%: every backend is far from the "
        f"memory floor, so what separates them is time spent outside the weight reads: launch overhead (many "
        f"small kernels per token at batch 1, in two pipeline stages), per-token activation quantization in W4A4 "
        f"paths, and slower tactics chosen by the autotuner. With four users the ceiling per user falls to "
        f"{ceil4:.0f} tok/s ({100 * (1 - ceil4 / ceil1):.0f}% lower, same basis: the batch touches "
        f"{c4.distinct_experts:.1f} distinct experts instead of {model.top_k}); Marlin falls "
        f"{100 * (1 - marlin4 / marlin1):.0f}%, close to "
        f"that, but 120f falls {100 * (1 - fi4 / fi1):.0f}%, more than the bytes explain: something on that path "
        f"costs more per extra sequence than the weights do. Decode here is bandwidth-bound by a wide margin "
        f"({c1.total_flops / c1.total_bytes:.1f} FLOP/byte), so faster FP4 arithmetic alone cannot close the gap; "
        f"fewer, fused, better-tuned kernels can.")


def newest_bench_file(files: list[Path], model: str | None = None) -> Path | None:
    """The newest ``data/bench/moe_*.json``: by the date in its name, then by the time its run recorded
    (``env.timestamp_utc``; two runs of one day), then by name; with ``model``, only files recorded for
    that model preset (their ``model`` field)."""

    def read(p: Path) -> dict:
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}

    docs = {p: read(p) for p in files}
    if model is not None:
        files = [p for p in files if docs[p].get("model") == model]

    def key(p: Path):
        env = docs[p].get("env")
        stamp = env.get("timestamp_utc") if isinstance(env, dict) else None
        return (p.stem.split("_")[2] if p.stem.count("_") >= 2 else "", str(stamp or ""), p.name)

    return sorted(files, key=key)[-1] if files else None


def bench_figures(doc) -> dict[str, dict]:
    """The rows of a bench document as ``sm120lab compare`` bench figures (one per op/contender/timing/T)."""
    out = {}
    for r in bench_doc(doc).rows_for(op=None, timing=None):
        if not r.us_median:
            continue
        timing = "graph" if r.timing is Timing.CUDA_GRAPH else "eager"
        spread = (r.us_p90 - r.us_p10) / r.us_median if r.us_p90 and r.us_p10 else None
        out[f"{r.op.value}_us:{r.contender}:{timing}:T{r.T}"] = {
            "value": r.us_median, "unit": "us", "lower_is_better": True, "spread": spread}
    return out


def live_sweep_path(run_dir: Path | None) -> Path:
    """Where notebook 04's live sweep is written: ``<run folder>/bench_live.json`` beside the run's
    ``results/`` folder (``run_dir``, :func:`sm120lab.runs.results.results_dir`), or ``./bench_live.json``
    outside a run; never into ``data/``."""
    return (run_dir.parent if run_dir else Path(".")) / "bench_live.json"


def live_sweep(out_path: Path, *, model: str, tokens=(1, 4, 16, 64), contenders=("triton-w4a16", "torch-bf16-grouped"),
               budget_s: float = 240.0, command: str = "notebooks/04_throughput (measure)",
               enabled: bool = True) -> tuple[dict | None, str]:
    """A short MoE-layer sweep on this machine's CUDA GPU (``sm120lab.bench.moe``), written to ``out_path``.

    T values not started within ``budget_s`` seconds are skipped (the bench records which).
    ``enabled=False`` (the notebook's ``measure=False``) runs nothing.

    Returns:
        (document, "") after a sweep; (None, one-line reason) when this machine cannot run one.
    """
    import time

    if not enabled:
        return None, "measure=False"

    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU on this machine"
    try:
        from sm120lab.bench.moe import run_moe_bench
    except ImportError as exc:
        return None, f"sm120lab.bench.moe cannot be imported ({exc})"
    try:
        doc = run_moe_bench(out_path, model=model, tokens=tokens, contenders=contenders, tune=False, eager=False,
                            command=command, log=lambda s: None, deadline=time.time() + budget_s)
    except Exception as exc:  # noqa: BLE001 - a failed sweep is reported in one line
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return doc, ""



# ---- notebook 04's tables and figures, as text and matplotlib figures --------------------------------------------


def _fmt1(x) -> str:
    return f"{x:.1f}"


def _fmt1k(x) -> str:
    """One decimal with thousands separators (the tables of measured microseconds and tok/s)."""
    return f"{x:,.1f}"


def formats_text(plan: Precision) -> str:
    """The weight formats of a precision, grouped: ``nvfp4: routed experts, attention; bf16: ...``."""
    groups: dict[str, list[str]] = {}
    for name, field in (("routed experts", "experts"), ("shared expert", "shared"), ("attention", "attention"),
                        ("linear attention", "linear_attention"), ("router", "router"), ("lm_head", "lm_head"),
                        ("KV cache", "kv_cache")):
        groups.setdefault(getattr(plan, field), []).append(name)
    return "; ".join(f"{fmt}: {', '.join(names)}" for fmt, names in groups.items())


def step_cost_text(model: ModelConfig, basis: Basis, context: int, batches: Iterable[int]) -> str:
    """Section 1: the model's shape, parameters, the weight formats of ``basis``, the GB read per decode
    step by weight group at each batch in ``batches``, the distinct experts per layer and the B=1
    arithmetic intensity (FLOP/byte)."""
    import pandas as pd

    batches = list(batches)
    cfg = model
    plan = basis.precision_for(cfg)
    lines = [f"{cfg.name}: {cfg.n_layers} layers ({cfg.n_full_attn_layers} full attention, "
             f"{cfg.n_sliding_attn_layers} sliding, {cfg.n_linear_attn_layers} Gated DeltaNet), "
             f"E={cfg.n_experts} top-{cfg.top_k}, H={cfg.hidden}, I={cfg.moe_intermediate}, vocab {cfg.vocab}",
             f"parameters: {cfg.total_params() / 1e9:.1f} B total, {cfg.active_params() / 1e9:.2f} B active per token",
             f"weight formats ({basis.label}): {formats_text(plan)}"]
    costs = {b: step_cost(cfg, plan, b, context) for b in batches}
    per_step = pd.DataFrame({f"B={b}": {**{k: v / 1e9 for k, v in c.bytes.items()}, "TOTAL": c.total_bytes / 1e9}
                             for b, c in costs.items()})
    lines += ["GB read per decode step (whole model):", per_step.to_string(float_format=lambda x: f"{x:.3f}"),
              f"distinct routed experts per layer: { {f'B={b}': round(c.distinct_experts, 1) for b, c in costs.items()} }"]
    c1 = step_cost(cfg, plan, 1, context)
    lines.append(f"B=1: {c1.total_flops / 1e9:.1f} GFLOP per token, {c1.total_flops / c1.total_bytes:.2f} FLOP/byte "
                 "(a GPU needs hundreds of FLOP/byte to be compute-bound: decode is bandwidth-bound)")
    return "\n".join(lines)


def gpu_table(hw):
    """Section 2: the hardware table's columns, each tensor rate marked ``(derived)`` (from a sparse
    headline) or ``(unsourced)`` as its source column says."""
    import pandas as pd

    table = hw[["gpu", "compute_capability", "mem_bw_GBps", "mem_GB", "smem_per_block_bytes", "pcie_GBps_per_dir",
                "nvlink_GBps_per_dir"]].copy()
    for col, src in (("bf16_dense_TFLOPs", "bf16_source"), ("fp8_dense_TFLOPs", "fp8_source"),
                     ("fp4_dense_TFLOPs", "fp4_source")):
        table[col.replace("_dense_TFLOPs", " TFLOP/s")] = [
            ("-" if pd.isna(v) else f"{v:g}") + (" (unsourced)" if str(s).startswith("UNSOURCED")
                                                 else " (derived)" if str(s).startswith("derived") else "")
            for v, s in zip(hw[col], hw[src])]
    return table


def _finish(ax, xlabel: str, ylabel: str, title: str, *, logy: bool = False, legend_size: int = 7,
            title_size: int | None = None) -> None:
    """The axes of notebook 04's figures: log2 x (users or tokens), optional log y, labels, title, legend."""
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, **({"fontsize": title_size} if title_size else {}))
    ax.legend(fontsize=legend_size)


def _fitting_rows(ceil_table):
    return ceil_table[ceil_table["B"].notna()].astype({"B": int})


def ceiling_report(ceil_table, model: ModelConfig, *, gpus: list[str], tp: int, pp: int, context: int, routing: str,
                   batches: list[int]) -> str:
    """Section 3: per-user ceiling by GPU and users B (:func:`ceiling_table`), the basis of each GPU's
    row, then the memory held per GPU at the largest B and the GPUs that have no ceiling."""
    ok_rows = _fitting_rows(ceil_table)
    order = [g for g in gpus if g in set(ok_rows["gpu"])]
    labels = ok_rows.groupby("gpu", sort=False)["basis"].first().reindex(order)
    main = labels.mode().iloc[0] if len(labels) else ""
    lines = [f"{model.name}, TP{tp} x PP{pp}, context {context}, {routing} routing",
             f"per-user ceiling, tok/s (rows: GPU; columns: concurrent users B); basis: {main}"
             + ("; except as marked *" if (labels != main).any() else "") + ":"]
    table = ok_rows.pivot(index="gpu", columns="B", values="per_user_tok_s").reindex(order)
    table.index = [g + (" *" if labels[g] != main else "") for g in order]
    lines.append(table.to_string(float_format=_fmt1))
    for g in order:
        if labels[g] != main:
            lines.append(f"  * {g}: {labels[g]}")
    lines.append(f"\nmemory held per GPU at B={max(batches)} (weights + KV cache + linear state + activations):")
    for _, r in ok_rows[ok_rows["B"] == max(batches)].iterrows():
        lines.append(f"  {r['gpu']:<13} {r['GB_held_per_gpu']:7.1f} GB of {r['mem_GB']:g} GB: "
                     f"{'fits' if r['fits'] else 'does NOT fit'}; bound: {r['bound']}")
    for _, r in ceil_table[ceil_table["B"].isna()].iterrows():
        lines.append(f"  {r['gpu']:<13} no ceiling: {r['note']}")
    return "\n".join(lines)


def plot_ceilings(ceil_table, model: ModelConfig, *, tp: int, pp: int, batches: list[int]):
    """Section 3's figure: per-user ceiling vs users B per GPU (dotted where the model does not fit); the
    title names the basis, and a GPU on another basis (no cited latency) says so in its legend entry."""
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.4))
    rows = _fitting_rows(ceil_table)
    main = rows["basis"].mode().iloc[0] if len(rows) else ""
    for (g, grp), marker in zip(rows.groupby("gpu", sort=False), "osD^v"):
        fits = grp["fits"].all()
        other = grp["basis"].iloc[0] != main
        ax.plot(grp["B"], grp["per_user_tok_s"], marker=marker, ls="-" if fits else ":", mfc="none" if fits else None,
                label=g + ("" if fits else " (does not fit: dotted)") + (" (no cited all-reduce latency)" if other else ""))
    _finish(ax, "concurrent users B", "per-user ceiling, tok/s",
            f"{model.name} on {tp * pp} GPUs (TP{tp} PP{pp}): decode ceiling per user\n"
            + textwrap.fill(main, 90), legend_size=8, title_size=9)
    ax.set_xticks(batches, [str(b) for b in batches])
    plt.tight_layout()
    return fig


def measured_ceiling_text(model: ModelConfig, basis: Basis, gpus: dict[str, GPUSpec], names: list[str], *,
                          tp: int, pp: int, batches: list[int], context: int, routing: str) -> str:
    """The H200's ceiling on ``basis`` at its measured copy bandwidth (the recorded bench run), when it has one."""
    h200 = gpus["h200"]
    if not (h200.measured_copy_GBps and "h200" in names):
        return "no measured H200 ceilings recorded in data/bench/: datasheet values only"
    meas = ceiling_table(model, basis, gpus, ["h200"], tp=tp, pp=pp, batches=batches, context=context,
                         routing=routing, bandwidth="measured")
    return (f"h200 at the measured {h200.measured_copy_GBps:,.0f} GB/s ({h200.measured_source}); "
            f"basis: {meas['basis'].iloc[0]}:\n"
            + meas[["B", "per_user_tok_s", "aggregate_tok_s", "bound", "bandwidth"]].to_string(index=False,
                                                                                             float_format=_fmt1k))


#: section 4's columns of :func:`seed_rows` and their printed names
SEED_COLUMNS = {"backend": "backend", "cuda": "CUDA", "concurrency": "users", "reported": "reported tok/s",
                "tok_s": "midpoint", "correct_output": "correct", "ceiling": "ceiling", "pct": "%"}
#: the other bases' columns, short names (their labels are printed above the table)
OTHER_COLUMNS = {"linear-quantized": "LQ", "experts-only": "EO"}


def seed_table_text(seed, spec: GPUSpec, weight_format: str = "nvfp4") -> str:
    """Section 4: the seed's rows (the reported range and its midpoint) against the ceiling of each
    row's own setup on the basis of :func:`published_vs_ceiling` (``ceiling``, ``%``), then on each
    other basis it added (``ceiling LQ``, ...), every basis named above the table."""
    from .published import reported_tok_s

    tab = seed.copy()
    tab["reported"] = [reported_tok_s(lo, hi, midpoint=False) for lo, hi in zip(tab["tok_s_low"], tab["tok_s_high"])]
    cols = dict(SEED_COLUMNS)
    labels = other_basis_labels(weight_format, [p for p in OTHER_COLUMNS if f"ceiling_{p}" in tab])
    lines = [f"per-user tok/s for 4x RTX PRO 6000 TP2 PP2 (datasheet {spec.mem_bw_GBps:g} GB/s, PCIe "
             f"{spec.pcie_GBps_per_dir:g} GB/s per direction) against the ceiling of each row's setup; "
             "% = midpoint / ceiling",
             f"  ceiling, %: {tab['basis'].iloc[0]}"]
    for p, label in labels.items():
        short = OTHER_COLUMNS[p]
        cols[f"ceiling_{p}"], cols[f"pct_{p}"] = f"ceiling {short}", f"% {short}"
        lines.append(f"  ceiling {short}, % {short}: {label}")
    lines.append(tab[list(cols)].rename(columns=cols).to_string(index=False, float_format=_fmt1, na_rep="-"))
    return "\n".join(lines)


def concurrency_grid(batches: Iterable[int], top: int = 64, n: int = 25):
    """The users B of section 5's curves: ``batches`` and ``n`` log-spaced points up to ``top``."""
    import numpy as np

    return np.unique(np.concatenate([np.array(list(batches)), np.geomspace(1, top, n).round()])).astype(int)


def ceiling_curves_text(panels, unmatched, basis: Basis, *, batches) -> str:
    """Section 5: each :func:`ceiling_curves` panel's ceiling on ``basis`` at B=1 and at the largest B
    (its label on the panel's line), and every published point on it as a share of that ceiling (the
    reported range, and the midpoint the share is computed from); then the rows without a ceiling."""
    from .published import reported_tok_s

    lines = []
    for gpu_name, m, ptp, ppp, grp, curve, label in panels:
        lines.append(f"ceiling {m.name} on {ptp * ppp}x {gpu_name} TP{ptp} PP{ppp} ({label}): per user "
                     f"{curve[0].per_user_tok_s:.1f} tok/s at B=1, aggregate {curve[-1].aggregate_tok_s:.0f} tok/s at "
                     f"B={batches[-1]}")
        for _, r in grp.iterrows():
            said = reported_tok_s(r["tok_s_low"], r["tok_s_high"])
            said = (f"{said} tok/s per user" if r["tok_s_basis"] == "per_user"
                    else f"{said} tok/s aggregate = {r['per_user_tok_s']:.1f} per user")
            lines.append(f"    {r['backend']}, c={r['concurrency']}: {said} = "
                         f"{100 * r['per_user_tok_s'] / r['ceiling_here']:.0f}% of that ceiling ({r['source_url']})")
    for (model_name, url), grp in unmatched.groupby(["model", "source_url"]):
        lines.append(f"no ceiling for {len(grp)} published rows: model '{model_name}' is not a preset "
                     f"({grp['hardware'].iloc[0]}; {url})")
    return "\n".join(lines)


def plot_ceiling_curves(panels, batches):
    """Section 5's figure: per panel the per-user and aggregate ceiling vs users, published points on it;
    each panel's title names the basis of its ceiling."""
    import textwrap

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (gpu_name, m, ptp, ppp, grp, curve, label) in zip(axes[0], panels):
        ax.plot(batches, [c.per_user_tok_s for c in curve], "k-", label=f"ceiling, per user ({label.split(':')[0]})")
        ax.plot(batches, [c.aggregate_tok_s for c in curve], "k--", label="ceiling, aggregate (same basis)")
        for i, (backend, g2) in enumerate(grp.groupby("backend")):
            ax.plot(g2["concurrency"], g2["per_user_tok_s"], "o", color=f"C{i}", label=f"{backend} (per user)")
            ax.plot(g2["concurrency"], g2["aggregate_tok_s"], "s", mfc="none", color=f"C{i}")
        _finish(ax, "concurrent sequences", "tok/s (circles: per user, squares: aggregate)",
                f"{m.name}, {ptp * ppp}x {gpu_name} TP{ptp} PP{ppp}\n" + textwrap.fill(f"ceiling: {label}", 64),
                logy=True, title_size=9)
    plt.tight_layout()
    return fig


def zipf_skew_text(skew, model: ModelConfig, label: str) -> str:
    """Section 5: :func:`zipf_skew_table` pivoted by users B and skew s; ``label``: the basis of its ceilings."""
    return (f"{model.name} on 4x rtx-pro-6000 TP2 PP2 (s=0 is uniform routing); per-user ceiling by skew "
            f"({label}):\n"
            + skew.pivot(index="B", columns="zipf_s", values=["distinct_experts", "per_user_tok_s"])
            .to_string(float_format=_fmt1))


def live_table_text(doc, why: str = "") -> str:
    """Section 6: this machine's short sweep (:func:`live_sweep`), MoE-layer us by contender, timing and T;
    with no sweep (``doc`` None), ``why`` (:func:`live_sweep`'s reason)."""
    import pandas as pd

    if doc is None:
        return f"no MoE layer measured on this machine: {why}"
    doc = bench_doc(doc)
    tab = pd.DataFrame([r.as_dict() for r in doc.rows_for(op="moe", timing=None)])
    return (f"this machine ({doc.gpu}), MoE layer us by contender and T:\n"
            + tab.pivot_table(index=["contender", "timing"], columns="T", values="us_median").to_string(float_format=_fmt1k))


def best_moe_row(doc, tokens: int = 1):
    """The fastest MoE-layer row (any timing) at ``tokens`` of a bench document, or None."""
    rows = [r for r in bench_doc(doc).rows_for(op="moe", timing=None, T=tokens) if r.us_median]
    return min(rows, key=lambda r: r.us_median) if rows else None


def recorded_moe_text(moe_tab, bench_file: Path | None, model: ModelConfig, bandwidth_GBps: float) -> str:
    """Section 6: the recorded sweep's MoE-layer us and % of the memory floor (:func:`moe_layer_vs_floor`),
    and the distinct experts its routings touched against E(1-(1-k/E)^T); with no sweep for the model
    (``moe_tab`` None or empty), a line saying so."""
    import pandas as pd

    from .measured import measured_active_experts
    from .routing import expected_distinct_uniform

    if moe_tab is None or moe_tab.empty:
        return "no recorded MoE-layer sweep for this model in data/bench/"
    lines = [f"recorded: data/bench/{bench_file.name} ({moe_tab['gpu'].iloc[0]}); floor at the measured copy "
             f"bandwidth {bandwidth_GBps:,.0f} GB/s; {model.n_layers} MoE layers per decode step",
             "\nMoE layer time, us:",
             moe_tab.pivot_table(index=["contender", "timing"], columns="T", values="us_median").to_string(float_format=_fmt1k),
             "\n% of the memory floor reached:",
             moe_tab.pivot_table(index=["contender", "timing"], columns="T", values="pct_of_floor").to_string(float_format=_fmt1k)]
    act = pd.DataFrame(measured_active_experts([bench_file]))
    if not act.empty:
        act["E[distinct] formula"] = [expected_distinct_uniform(int(r.E), int(r.k), int(r.T)) for r in act.itertuples()]
        lines += ["\ndistinct experts the benchmark's uniform routings touched vs E(1-(1-k/E)^T):",
                  act[["T", "active_experts", "E[distinct] formula"]].to_string(index=False,
                                                                                float_format=lambda x: f"{x:.2f}")]
    return "\n".join(lines)


def plot_moe_only(moe_tab, model: ModelConfig, bandwidth_GBps: float, *, weight_format: str = "nvfp4"):
    """Section 6's figure: MoE-layer-only tok/s per user, ``1e6 / (n_layers x us)``, vs T per contender,
    against the memory floor ``1e6 / (n_layers x floor_us(T))``; None when ``moe_tab`` is None or empty."""
    import matplotlib.pyplot as plt
    import numpy as np

    if moe_tab is None or moe_tab.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for (contender, timing), g in moe_tab.groupby(["contender", "timing"]):
        ax.plot(g["T"], g["moe_only_per_user_tok_s"], "o-", label=f"{contender} [{timing}]")
    Ts = np.array(sorted(moe_tab["T"].unique()))
    ax.plot(Ts, [1e6 / (model.n_layers * moe_layer_floor_us(model, T, bandwidth_GBps, weight_format=weight_format))
                 for T in Ts], "k--", label=f"MoE-layer memory floor at {bandwidth_GBps:,.0f} GB/s")
    _finish(ax, "tokens per step (T = concurrent users)", "tok/s per user, MoE layers only",
            f"recorded H200 MoE layer, {model.name}: MoE-layer-only tok/s", logy=True)
    plt.tight_layout()
    return fig


def prediction_text(prediction: dict, efficiency: dict, seed, h200: GPUSpec) -> str:
    """Section 7: per users T, the kernel's share of its floor on the H200 and the predicted tok/s
    (:func:`predict_with_kernel`) beside Marlin's recorded share of the same ceiling (the prediction's own,
    ``ceiling_tok_s``)."""
    if not prediction:
        return "no recorded Triton MoE-layer sweep in data/bench/: no prediction"
    lines = []
    for T, p in prediction.items():
        e = efficiency[T]
        marlin = seed_value(seed, "Marlin", T, "tok_s")
        ceil = p["ceiling_tok_s"]
        lines.append(f"{T} user{'s' if T > 1 else ''}: {e['contender']} reached {100 * e['eta']:.1f}% of its floor on "
                     f"the H200 ({e['us_median']:.1f} us vs {e['floor_us']:.1f} us at {h200.mem_bw_GBps:g} GB/s, "
                     f"{e['file']})")
        lines.append(f"   ceiling {p['ceiling_tok_s']:.0f} tok/s -> predicted {p['predicted_tok_s']:.0f} tok/s per "
                     f"user ({p['pct_of_ceiling']:.0f}% of the ceiling); Marlin recorded "
                     f"{seed_reported(seed, 'Marlin', T)} = {100 * marlin / ceil:.0f}% of the same ceiling")
    return "\n".join(lines)


#: the published columns notebook 04 records (``results/04_throughput.json``, ``published_vs_ceiling``)
RECORDED_PUBLISHED = ["source_url", "hardware", "model", "backend", "cuda", "concurrency", "tok_s_low", "tok_s_high",
                      "tok_s", "tok_s_basis", "correct_output", "ceiling", "pct", "basis", "ceiling_linear-quantized",
                      "pct_linear-quantized", "ceiling_experts-only", "pct_experts-only"]


def results_record(params: dict, ceil_table, pub, prediction: dict, efficiency: dict, measured_here: str | None,
                   basis: Basis | None = None) -> dict:
    """What notebook 04 records: its parameters, the basis of its ceilings and the other bases' labels,
    the ceiling table, the published rows against their ceilings (``tok_s`` is the midpoint of
    ``tok_s_low``-``tok_s_high``), the prediction (with the contender and file it came from) and the
    live sweep's file."""
    import numpy as np

    return {
        "params": params,
        "basis": None if basis is None else basis.label,
        "other_bases": {f"ceiling_{p}": label for p, label in other_basis_labels(params.get("weight_format", "nvfp4")).items()},
        "ceiling_table": ceil_table.replace({np.nan: None}).to_dict("records"),
        "published_vs_ceiling": pub[[c for c in RECORDED_PUBLISHED if c in pub]].replace({np.nan: None}).to_dict("records"),
        # a prediction from recorded data (which file, which contender), not a timing of this machine
        "prediction_triton_on_seed_setup": {str(T): {**p, "contender": efficiency[T]["contender"],
                                                     "from": efficiency[T]["file"]} for T, p in prediction.items()},
        "measured_here": measured_here,
    }


def guide_prediction(guide, spec: GPUSpec, efficiency: dict) -> dict:
    """Per users T: :func:`predict_with_kernel` for the decision guide's own setup (``guide`` is
    :func:`sm120lab.recommend.answer`'s result: its model, TP, PP, context, the precision and all-reduce
    latency its ceiling counts) at the ``eta`` the kernel reached (``efficiency[T]``, :func:`kernel_efficiency`)."""
    gs = guide.setup
    return {T: predict_with_kernel(get_model(gs.model), spec, guide.ceiling.precision, eff["eta"], tp=gs.tp, pp=gs.pp,
                                   batch=T, context=gs.context, collective_latency_us=guide.ceiling.latency_us)
            for T, eff in efficiency.items() if eff}


def like_for_like(prediction: dict, marlin_prediction: dict, seed) -> dict:
    """The same tok/s model (:func:`predict_with_kernel`) fed ours' and Marlin's measured layer times (the
    same H200 run), calibrated on Marlin's published per-user tok/s at the same users (the seed report):

        c = published Marlin / model(Marlin)       (a range: the report's low and high)
        ours, calibrated = c x model(ours)

    Returns:
        ``{T: {"ours_model", "marlin_model", "marlin_published": (lo, hi), "c": (lo, hi),
        "ours_calibrated": (lo, hi), "model_ratio"}}`` for each T both predictions and a published Marlin
        row have; ``model_ratio`` = model(ours) / model(Marlin).
    """
    out = {}
    for T, p in prediction.items():
        m = marlin_prediction.get(T)
        try:
            lo, hi = seed_value(seed, "Marlin", T, "tok_s_low"), seed_value(seed, "Marlin", T, "tok_s_high")
        except ValueError:
            continue
        if m is None:
            continue
        c = (lo / m["predicted_tok_s"], hi / m["predicted_tok_s"])
        out[T] = {"ours_model": p["predicted_tok_s"], "marlin_model": m["predicted_tok_s"], "marlin_published": (lo, hi),
                  "c": c, "ours_calibrated": (c[0] * p["predicted_tok_s"], c[1] * p["predicted_tok_s"]),
                  "model_ratio": p["predicted_tok_s"] / m["predicted_tok_s"]}
    return out


def _span(lo: float, hi: float, fmt: str) -> str:
    """``lo-hi`` formatted with ``fmt``, or one number when both print the same."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}-{b}"


def like_for_like_text(lfl: dict, efficiency: dict, marlin_efficiency: dict) -> str:
    """Section 7's like-for-like lines: per T, both measured layers' share of their floor, the model's tok/s for
    each, the calibration factor from Marlin's published number and ours calibrated by it."""
    if not lfl:
        return "no recorded run with both ours and vLLM's Marlin: no like-for-like prediction"
    lines = []
    for T, r in lfl.items():
        e, m = efficiency[T], marlin_efficiency[T]
        lo, hi = r["marlin_published"]
        lines.append(f"{T} user{'s' if T > 1 else ''}: measured on the H200 ({e['file']}): ours {e['us_median']:.1f} us "
                     f"({100 * e['eta']:.0f}% of its floor), vLLM's Marlin {m['us_median']:.1f} us ({100 * m['eta']:.0f}%)")
        lines.append(f"   the model: ours {r['ours_model']:.0f} tok/s, Marlin {r['marlin_model']:.0f} tok/s "
                     f"(ours / Marlin {r['model_ratio']:.2f}x); Marlin published {_span(lo, hi, 'g')} tok/s, so the "
                     f"model overstates Marlin by {_span(1 / r['c'][1], 1 / r['c'][0], '.2f')}x (what it leaves out: attention, "
                     f"the dense layers, the sampler and the engine, each off its ceiling)")
        lines.append(f"   ours with the same calibration: {_span(*r['ours_calibrated'], '.0f')} "
                     f"tok/s per user (a PREDICTION, unverified on SM120 hardware; it assumes the H200 layer times' "
                     f"ratio carries over to SM120)")
    return "\n".join(lines)


def headline_rows(guide, guide_gpu: str, seed, seed_ceiling, model: ModelConfig, *, weight_format: str, context: int,
                  live, live_why: str, live_file: str, prediction: dict, efficiency: dict,
                  lfl: dict | None = None) -> list[tuple[str, ...]]:
    """Notebook 04's verdict box as ``(claim, value, status, why)`` rows (status: a
    :class:`sm120lab.runs.answer.Status` value): the guide's do-this line, its decode ceiling for its own
    setup, the seed's backends as shares of that ceiling, whether the model fits at 64 users, this
    machine's T=1 MoE layer, and the prediction for the guide's setup with this project's kernel."""
    marlin1, fi1, fi1a = (seed_value(seed, b, 1, "tok_s") for b in
                          ("Marlin", "FlashInfer CUTLASS 120f", "FlashInfer CUTLASS 120a"))
    gs, ceil = guide.setup, guide.ceiling
    ceil1 = ceil.per_user_tok_s
    at64 = seed_ceiling.iloc[-1]
    setup_name = f"{gs.n_gpus}x {guide_gpu}, {gs.model}, TP{gs.tp} PP{gs.pp}, {gs.users} user(s)"
    rows = [
        ("what to run (the decision guide's do-this block)", guide.block.serve_line, "info",
         f"{guide.block.install}; verify: {guide.block.verify}"),
        (f"decode ceiling of {setup_name}", f"{ceil1:.0f} tok/s", "info",
         f"the one ceiling of this notebook (every number on another basis says so); {ceil.counted}; "
         f"{ceil.ceiling.bound}-bound; all-reduce latency "
         f"{ceil.latency_us:g} us each (without it: {ceil.without_latency.per_user_tok_s:.0f} tok/s)"),
        ("the seed's backends, as a share of that ceiling",
         f"Marlin {seed_reported(seed, 'Marlin', 1)} = {100 * marlin1 / ceil1:.0f}%, FlashInfer CUTLASS 120f "
         f"{seed_reported(seed, 'FlashInfer CUTLASS 120f', 1)} = {100 * fi1 / ceil1:.0f}%, 120a "
         f"{seed_reported(seed, 'FlashInfer CUTLASS 120a', 1)} = {100 * fi1a / ceil1:.0f}%", "warn",
         "published per-user tok/s (flashinfer#2723) over the guide's ceiling; section 4"),
        (f"{model.name} {weight_format} fits on 4x RTX PRO 6000 TP2 PP2", "yes" if at64["fits"] else "NO",
         "ok" if at64["fits"] else "bad",
         f"{at64['GB_held_per_gpu']:.1f} GB of {at64['mem_GB']:g} GB per GPU at 64 users x {context} tokens "
         f"(weights {at64['weights_GB_per_gpu']:.1f} GB + KV cache + linear state + activations)"),
    ]
    if live is not None:
        best = best_moe_row(live, tokens=1)
        rows.append((f"one {model.name} MoE layer measured on this GPU ({bench_doc(live).gpu}), T=1",
                     f"{best.us_median:.1f} us ({best.contender})" if best else "no T=1 row",
                     "info" if best else "bad", f"short sweep written to {live_file} in this run"))
    else:
        rows.append((f"one {model.name} MoE layer measured on this machine", "not run", "not_run",
                     f"{live_why}; the recorded H200 sweep is shown in section 6, not recorded as this run's"))
    if lfl and 1 in lfl:
        r = lfl[1]
        lo, hi = r["marlin_published"]
        rows.append((f"prediction: {setup_name} with this project's Triton MoE kernel",
                     f"{_span(*r['ours_calibrated'], '.0f')} tok/s (Marlin published {_span(lo, hi, 'g')})",
                     "info",
                     f"PREDICTION, unverified on SM120 hardware: one model fed both kernels' H200 layer times "
                     f"({efficiency[1]['file']}) gives ours {r['ours_model']:.0f} and Marlin {r['marlin_model']:.0f} tok/s "
                     f"({r['model_ratio']:.2f}x); scaled by Marlin's published / modelled ratio"))
    elif prediction:
        p1, e1 = prediction[1], efficiency[1]
        rows.append((f"prediction: {setup_name} with this project's Triton MoE kernel",
                     f"{p1['predicted_tok_s']:.0f} tok/s = {p1['pct_of_ceiling']:.0f}% of the ceiling "
                     f"(Marlin: {100 * marlin1 / ceil1:.0f}%)", "info",
                     f"PREDICTION, unverified on SM120 hardware: MoE layers at the {100 * e1['eta']:.0f}% of their "
                     f"floor that {e1['contender']} reached on the H200 ({e1['file']}), the rest at its ceiling"))
    else:
        rows.append(("prediction with this project's Triton MoE kernel", "not run", "not_run",
                     "no recorded MoE-layer sweep in data/bench/"))
    return rows


def model_sources_text(model: ModelConfig) -> str:
    """The model card links a preset's shape comes from, one per line, and its note."""
    return "\n".join([f"- {s}" for s in model.sources] + ([f"note: {model.notes}"] if model.notes else []))


def measured_gpu_text(spec: GPUSpec) -> str:
    """What the recorded bench run measured on a GPU: copy bandwidth (and its share of the datasheet), bf16 rate."""
    return (f"measured on the H200: copy {spec.measured_copy_GBps:,.0f} GB/s "
            f"({100 * spec.measured_copy_GBps / spec.mem_bw_GBps:.0f}% of the datasheet {spec.mem_bw_GBps:g}), "
            f"bf16 matmul {spec.measured_bf16_TFLOPs:,.0f} TFLOP/s; from {spec.measured_source}")


def plot_seed_vs_guide(seed, prediction: dict | None = None):
    """Section 4's figure: :func:`plot_published` of the seed's rows (:func:`seed_rows` of
    :func:`published_vs_ceiling`) against the ceiling of each row's own setup on its basis (named in the
    title), ``% = 100 x midpoint / ceiling``, with the kernel ``prediction`` as the last group."""
    import textwrap

    label = str(seed["basis"].iloc[0]) if len(seed) else ""
    return plot_published(seed, prediction,
                          title="4x RTX PRO 6000 TP2 PP2: published tok/s, % = share of the ceiling\n"
                                + textwrap.fill(f"ceiling: {label}", 100),
                          xlabel="backend (seed report, flashinfer#2723; last: this project's Triton MoE kernel, "
                                 "section 7)")
