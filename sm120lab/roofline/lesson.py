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

from ..bench.records import load_bench
from .ceiling import ceiling, moe_layer_floor_us
from .decode import Precision, precision_plan, step_cost
from .hardware import GPUSpec
from .measured import moe_layer_table
from .models import ModelConfig, get_model
from .routing import expected_distinct_from_inclusion, zipf_inclusion_probabilities

#: the seed report's rows in data/published/ (flashinfer-ai/flashinfer#2723)
SEED_SOURCE = "flashinfer/issues/2723"
PLANS = ("linear-quantized", "experts-only")


def ceiling_table(model: ModelConfig, plan: Precision, gpus: dict[str, GPUSpec], names: Iterable[str], *,
                  tp: int, pp: int, batches: Iterable[int], context: int, routing: str = "uniform",
                  bandwidth: str = "datasheet"):
    """One row per (GPU, B): per-user and aggregate ceiling tok/s, binding floor, memory held per GPU.

    A GPU without a GPU-GPU link in ``data/hardware.csv`` gets one row saying so when TP*PP > 1.
    """
    import pandas as pd

    rows = []
    for name in names:
        spec = gpus[name]
        if tp * pp > 1 and not spec.link_GBps():
            rows.append({"gpu": name, "B": None, "note": "no GPU-GPU link in data/hardware.csv"})
            continue
        for b in batches:
            ce = ceiling(model, spec, plan, tp=tp, pp=pp, batch=b, context=context, routing=routing,
                         bandwidth=bandwidth)
            rows.append({"gpu": name, "B": b, "per_user_tok_s": ce.per_user_tok_s,
                         "aggregate_tok_s": ce.aggregate_tok_s, "bound": ce.bound,
                         "GB_read_per_gpu_step": ce.bytes_per_gpu / 1e9,
                         "GB_held_per_gpu": ce.memory_per_gpu_GB, "weights_GB_per_gpu": ce.weights_per_gpu_GB,
                         "mem_GB": spec.mem_GB, "fits": ce.fits, "bandwidth": ce.bandwidth_source,
                         "note": "" if ce.fits else f"does not fit in {spec.mem_GB:g} GB"})
    return pd.DataFrame(rows)


def _row_ceiling(row, gpus: dict[str, GPUSpec], plan_name: str, weight_format: str, context: int,
                 routing: str) -> float:
    try:
        model = get_model(row["model"])
    except ValueError:
        return math.nan
    fmt = "mxfp4" if model.name == "gpt-oss-120b" else weight_format
    return ceiling(model, gpus[row["gpu"]], precision_plan(plan_name, fmt), tp=int(row["tp"]), pp=int(row["pp"]),
                   batch=int(row["concurrency"]), context=context, routing=routing).per_user_tok_s


def published_vs_ceiling(pub, gpus: dict[str, GPUSpec], *, weight_format: str = "nvfp4", context: int = 2048,
                         routing: str = "uniform"):
    """``pub`` (:func:`~sm120lab.roofline.published.load_published`) with ``ceiling_<plan>`` and
    ``pct_<plan>`` (per-user tok/s as % of the per-user ceiling of the row's own setup) for every
    precision plan; NaN where the row's model is not a preset."""
    out = pub.copy()
    for plan_name in PLANS:
        out[f"ceiling_{plan_name}"] = [_row_ceiling(r, gpus, plan_name, weight_format, context, routing)
                                       for _, r in out.iterrows()]
        out[f"pct_{plan_name}"] = 100 * out["per_user_tok_s"] / out[f"ceiling_{plan_name}"]
    return out


def seed_rows(pub):
    """The seed report's rows (4x RTX PRO 6000, TP2 PP2, Qwen3.5-397B-A17B NVFP4)."""
    return pub[pub["source_url"].str.contains(SEED_SOURCE, regex=False)].copy()


def seed_value(seed, backend: str, concurrency: int, column: str) -> float:
    """One number of the seed table; a one-line error naming the row when it is missing."""
    row = seed[(seed["backend"] == backend) & (seed["concurrency"] == concurrency)]
    if row.empty:
        raise ValueError(f"no seed row for backend {backend!r} at concurrency {concurrency} in data/published/")
    return float(row[column].iloc[0])


def ceiling_curves(pub, gpus: dict[str, GPUSpec], *, precision: str, weight_format: str, context: int,
                   routing: str, batches: Iterable[int]):
    """Per published (gpu, model, TP, PP) group: the ceiling at every B of ``batches``.

    Returns:
        (panels, unmatched): panels are ``(gpu, model, tp, pp, rows, [Ceiling per B])``;
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
        plan = precision_plan(precision, "mxfp4" if model.name == "gpt-oss-120b" else weight_format)
        curve = [ceiling(model, gpus[gpu], plan, tp=int(tp), pp=int(pp), batch=int(b), context=context,
                         routing=routing) for b in batches]
        panels.append((gpu, model, int(tp), int(pp), group, curve))
    import pandas as pd

    return panels, (pd.concat(unmatched) if unmatched else pub.iloc[:0])


def zipf_skew_table(model: ModelConfig, spec: GPUSpec, plan: Precision, *, batches: Iterable[int], context: int,
                    exponents: Iterable[float] = (0.0, 0.5, 1.0), tp: int = 2, pp: int = 2, samples: int = 20000,
                    seed: int = 0):
    """Distinct experts and per-user ceiling for Zipf-skewed routing (s = 0 is uniform)."""
    import pandas as pd

    rows = []
    for s in exponents:
        pi = zipf_inclusion_probabilities(model.n_experts, model.top_k, s, samples=samples, seed=seed)
        for b in batches:
            ce = ceiling(model, spec, plan, tp=tp, pp=pp, batch=b, context=context, routing="zipf", zipf_s=s)
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
                   wrap: int = 14, plan: str = "linear-quantized"):
    """Bar chart of the seed's published per-user tok/s (1 and 4 users, p10-p90 whiskers) against the
    ceiling of each concurrency (dashed), each bar labelled with its share of the ceiling.

    Bar heights: ``tok_s``; labels: ``pct_linear-quantized`` = 100 * tok_s / ceiling. Layout: the
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
        plan: which ceiling columns to draw (``ceiling_<plan>``, ``pct_<plan>``); ``guide`` for the
            decision guide's (``sm120lab.recommend.facts.with_guide_ceiling``).

    Returns:
        The figure.
    """
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(10, 4.8))
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
                ax.annotate(f"{r[f'pct_{plan}']:.0f}%", (xi, r["tok_s_high"]), ha="center", va="bottom",
                            fontsize=9, xytext=(0, 2), textcoords="offset points")
                top = max(top, r["tok_s_high"])
        ceil = ok[ok["concurrency"] == c][f"ceiling_{plan}"]
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


def gap_paragraph(seed, model: ModelConfig, plan: Precision, context: int, guide_ceiling: float | None = None) -> str:
    """What the seed table says against the ceiling, in words, every number computed from ``seed``
    (:func:`published_vs_ceiling` rows of :func:`seed_rows`) and the model. ``guide_ceiling``: the
    decision guide's ceiling for the same setup (checkpoint formats and all-reduce latency counted),
    quoted beside the bandwidth-only floor of ``plan``."""
    marlin1, fi1 = seed_value(seed, "Marlin", 1, "tok_s"), seed_value(seed, "FlashInfer CUTLASS 120f", 1, "tok_s")
    fi1a = seed_value(seed, "FlashInfer CUTLASS 120a", 1, "tok_s")
    marlin4, fi4 = seed_value(seed, "Marlin", 4, "tok_s"), seed_value(seed, "FlashInfer CUTLASS 120f", 4, "tok_s")
    ceil1 = seed_value(seed, "Marlin", 1, "ceiling_linear-quantized")
    ceil4 = seed_value(seed, "Marlin", 4, "ceiling_linear-quantized")
    ceil1_eo = seed_value(seed, "Marlin", 1, "ceiling_experts-only")
    c1, c4 = step_cost(model, plan, 1, context), step_cost(model, plan, 4, context)
    return (
        f"On memory and link bandwidth alone, at one user the 4x RTX PRO 6000 TP2 PP2 setup could at most decode "
        f"{ceil1:.0f} tok/s ({ceil1_eo:.0f} if only the experts are 4-bit)"
        + (f"; the decision guide's ceiling, which counts the checkpoint's own formats and each all-reduce's "
           f"latency, is {guide_ceiling:.0f} tok/s" if guide_ceiling else "") + ": every token must stream its share of the "
        f"{c1.total_bytes / 1e9:.1f} GB it touches through each GPU's memory, and PP2 does not shorten that chain. "
        f"Marlin's {marlin1:.1f} tok/s is {100 * marlin1 / ceil1:.0f}% of it, FlashInfer CUTLASS 120f's {fi1:.1f} is "
        f"{100 * fi1 / ceil1:.0f}%, and 120a's {fi1a:.2f} is {100 * fi1a / ceil1:.0f}%: every backend is far from the "
        f"memory floor, so what separates them is time spent outside the weight reads: launch overhead (many "
        f"small kernels per token at batch 1, in two pipeline stages), per-token activation quantization in W4A4 "
        f"paths, and slower tactics chosen by the autotuner. With four users the ceiling per user falls to "
        f"{ceil4:.0f} tok/s ({100 * (1 - ceil4 / ceil1):.0f}% lower: the batch touches {c4.distinct_experts:.1f} "
        f"distinct experts instead of {model.top_k}); Marlin falls {100 * (1 - marlin4 / marlin1):.0f}%, close to "
        f"that, but 120f falls {100 * (1 - fi4 / fi1):.0f}%, more than the bytes explain: something on that path "
        f"costs more per extra sequence than the weights do. Decode here is bandwidth-bound by a wide margin "
        f"({c1.total_flops / c1.total_bytes:.1f} FLOP/byte), so faster FP4 arithmetic alone cannot close the gap; "
        f"fewer, fused, better-tuned kernels can.")


def newest_bench_file(files: list[Path], model: str | None = None) -> Path | None:
    """The newest ``data/bench/moe_*.json`` by the date in its name (then by name); with ``model``,
    only files recorded for that model preset (their ``model`` field)."""

    if model is not None:
        def of_model(p: Path) -> bool:
            try:
                return json.loads(p.read_text()).get("model") == model
            except (OSError, ValueError, AttributeError):
                return False

        files = [p for p in files if of_model(p)]
    return sorted(files, key=lambda p: (p.stem.split("_")[2] if p.stem.count("_") >= 2 else "", p.name))[-1] \
        if files else None


def bench_figures(doc: dict) -> dict[str, dict]:
    """The rows of a bench document as ``sm120lab compare`` bench figures (one per op/contender/timing/T)."""
    out = {}
    for r in doc.get("rows", []):
        if not r.get("us_median"):
            continue
        timing = "graph" if str(r.get("timing", "")).startswith("cuda_graph") else (r.get("timing") or "eager")
        spread = (r["us_p90"] - r["us_p10"]) / r["us_median"] if r.get("us_p90") and r.get("us_p10") else None
        out[f"{r['op']}_us:{r['contender']}:{timing}:T{r['T']}"] = {
            "value": float(r["us_median"]), "unit": "us", "lower_is_better": True, "spread": spread}
    return out


def live_sweep(out_path: Path, *, model: str, tokens=(1, 4, 16, 64), contenders=("triton-w4a16", "torch-bf16-grouped"),
               budget_s: float = 240.0, command: str = "") -> tuple[dict | None, str]:
    """A short MoE-layer sweep on this machine's CUDA GPU (``sm120lab.bench.moe``), written to ``out_path``.

    T values not started within ``budget_s`` seconds are skipped (the bench records which).

    Returns:
        (document, "") after a sweep; (None, one-line reason) when this machine cannot run one.
    """
    import time

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

