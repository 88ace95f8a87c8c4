"""The tables and verdict box notebook 07 shows: the Triton NVFP4 MoE kernel
(:func:`sm120lab.kernels.moe_layer.fused_moe_packed`) checked on this machine against the exact fp64
reference, and a recorded benchmark run (``data/bench/moe_*.json``, :mod:`.moe`) read against its targets.

Every check here calls the package's kernel as it is; nothing here launches a kernel of its own.
Relative error is :func:`sm120lab.nvfp4.quant_error.relative_error`,
``||out - ref||_F / ||ref||_F``; an output is *written* when every element is finite and none still
holds the poison value :data:`sm120lab.constants.SENTINEL`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from ..nvfp4.quant_error import relative_error
from .moe import _written, find_row

#: the contenders of section 4's table, in column order
TABLE_CONTENDERS = ("triton-w4a16", "vllm-marlin", "triton-w4a16-baseline", "torch-bf16-grouped",
                    "torch-fp8-grouped", "oai-matmul-ogs-mxfp4")
#: ours: the contender the targets are about
OURS = "triton-w4a16"


def packed_round_trip(w13, w2, packed) -> bool:
    """Whether ``unpack(prepack(w)) == w`` byte for byte: the E2M1 codes and the E4M3 scale bytes of both
    weights (:func:`sm120lab.kernels.prepack.unpack_moe_weights`).

    Args:
        w13, w2: the NVFP4 weights ``packed`` was prepared from (the 128x4-swizzled copies a checkpoint holds).
        packed: :func:`sm120lab.kernels.prepack.prepare_moe_weights` of them.

    Returns:
        True when every code and scale byte comes back unchanged.
    """
    from ..kernels.prepack import unpack_moe_weights

    u13, u2 = unpack_moe_weights(packed)
    return all(torch.equal(u.data, w.data) and torch.equal(u.scale.view(torch.uint8), w.scale.view(torch.uint8))
               for u, w in ((u13, w13), (u2, w2)))


def run_packed(problem, packed, ref: torch.Tensor, **path) -> dict:
    """One call of the kernel on a problem's tokens, into an output poisoned with ``SENTINEL``.

    Args:
        problem: a :class:`sm120lab.moe.problem.MoEProblem` (hidden states, routing).
        packed: its prepared weights (:func:`sm120lab.kernels.prepack.prepare_moe_weights`).
        ref: the exact reference output (:func:`sm120lab.moe.reference.moe_reference`, fp64).
        **path: the path switches ``fused_moe_packed`` takes (``frag``, ``decode``); none: its own choice.

    Returns:
        ``{"rel. error vs fp64": ||out - ref||_F / ||ref||_F, "all written": bool}``.
    """
    from ..constants import SENTINEL
    from ..kernels.moe_layer import fused_moe_packed

    out = torch.full((problem.tokens, problem.config.H), SENTINEL, dtype=torch.bfloat16, device=problem.hidden.device)
    fused_moe_packed(problem.hidden, problem.topk_ids, problem.topk_weights, packed, out=out, _poison=True, **path)
    return {"rel. error vs fp64": relative_error(ref, out), "all written": _written(out)}


def kernel_paths(device: torch.device) -> list[tuple[str, dict]]:
    """The kernel paths a device can run, as ``(name, fused_moe_packed switches)``: the fragment
    (tensor-core) kernel where :func:`sm120lab.kernels.moe_frag.frag_supported`, then the CUDA-core
    decode kernel and the MMA kernel everywhere."""
    from ..kernels.moe_frag import frag_supported

    paths = [("decode", {"frag": False, "decode": True}), ("mma", {"frag": False, "decode": False})]
    return ([("fragment", {"frag": True})] if frag_supported(device) else []) + paths


def path_table(problem, packed, ref: torch.Tensor):
    """Section 2: every path of :func:`kernel_paths` on this machine, :func:`run_packed` each.

    Returns:
        A DataFrame: ``path``, ``rel. error vs fp64``, ``all written``, one row per path.
    """
    import pandas as pd

    return pd.DataFrame([{"path": name, **run_packed(problem, packed, ref, **kw)}
                         for name, kw in kernel_paths(problem.hidden.device)])


def word_codes_table(word: int):
    """Section 1: the 8 E2M1 codes of one int32 word (code ``j`` in bits ``4j..4j+3``) and the E4M3 byte
    the decode kernel makes of each, ``s<<7 | m<<2`` for code ``s|m``, whose value is exactly
    ``e2m1 * 2**-6``.

    Args:
        word: the word as an unsigned 32-bit integer.

    Returns:
        A DataFrame indexed ``element 0..7``: the code bits, the E4M3 byte, and its value x 2**6.
    """
    import pandas as pd

    codes = [(word >> (4 * j)) & 0xF for j in range(8)]
    e4m3 = [((c & 8) << 4) | ((c & 7) << 2) for c in codes]
    vals = torch.tensor(e4m3, dtype=torch.uint8).view(torch.float8_e4m3fn).float() * 64
    return pd.DataFrame({"code (s|m)": [f"{c:04b}" for c in codes], "E4M3 byte": [f"0x{b:02x}" for b in e4m3],
                         "E4M3 value x 2**6 = E2M1": vals.tolist()}, index=[f"element {j}" for j in range(8)])


def per_t_text(d: Mapping[str, float | None], fmt: str) -> str:
    """``"T=1: <v>, T=4: <v>"`` over the measured T of a target's per-T numbers (None: not measured,
    left out), each value formatted with ``fmt`` (e.g. ``"{:.0f}%"``, ``"{:.2f}x"``)."""
    return ", ".join(f"T={t}: {fmt.format(v)}" for t, v in d.items() if v is not None)


def where_t(d: Mapping[str, float | None], ok: Callable[[float], bool], yes: str, no: str) -> str:
    """``'yes at every T'`` or ``'yes at T = a, b; no at T = c'`` over the measured T of ``d`` (``ok`` decides
    each value); unmeasured T are named as ``not measured``; ``'nothing measured'`` when ``d`` is empty."""
    groups = {yes: [t for t, v in d.items() if v is not None and ok(v)],
              no: [t for t, v in d.items() if v is not None and not ok(v)],
              "not measured": [t for t, v in d.items() if v is None]}
    parts = [f"{k} at {'every T' if len(ts) == len(d) else 'T = ' + ', '.join(ts)}" for k, ts in groups.items() if ts]
    return "; ".join(parts) or "nothing measured"


def _path_at(run: dict, t: int) -> str | None:
    return (find_row(run, t, OURS, "moe") or {}).get("path")


def headline_rows(run: dict, kernel: dict, *, round_trip: bool, where: str, fragment: bool) -> list[tuple[str, ...]]:
    """Notebook 07's verdict box as ``(claim, value, status, why)`` rows (status: a
    :class:`sm120lab.runs.answer.Status` value).

    Row 1: the kernel on this machine (ok when every output is written, the prepack round trip is
    exact and the relative error is below 1e-2); row 2: the recorded run's correctness checks; rows 3-6:
    the recorded run's targets (:func:`sm120lab.bench.moe.evaluate_targets`, under ``run["targets"]``);
    row 7: vLLM's Marlin NVFP4 MoE, the kernel SM120 owners serve with (``not_run`` when the run has no
    ``vllm-marlin`` rows); row 8: the triton_kernels ``matmul_ogs`` peer (bf16 x MXFP4, Hopper's wgmma: a
    reference row; ``not_run`` without peer rows); row 9: the SM120 build, compiled ahead of time only.

    Args:
        run: the recorded bench document (``data/bench/moe_*.json``) as a dict.
        kernel: :func:`run_packed` on this machine.
        round_trip: :func:`packed_round_trip`.
        where: where the kernel ran ("CPU interpreter" or the GPU's name).
        fragment: whether the fragment (tensor-core) kernel is this machine's path.

    Returns:
        Nine rows, in display order.
    """
    tg, gpu, checks = run["targets"], run["env"]["gpu"]["name"], run["checks"]
    rel, written = kernel["rel. error vs fp64"], kernel["all written"]
    bf16 = tg["speedup_vs_bf16_T4096"]
    peer = tg.get("speedup_vs_peer") or {}
    marlin = tg.get("speedup_vs_marlin") or {}
    vllm = (run.get("marlin") or {}).get("vllm")
    return [
        (f"{'Fragment (tensor-core)' if fragment else 'Decode'} kernel on prepared weights, this machine",
         f"rel. error {rel:.1e} vs fp64", "ok" if (written and round_trip and rel < 1e-2) else "bad",
         f"{where}; every output written; unpack(prepack(w)) == w: {round_trip}"),
        (f"Recorded run ({gpu}): correctness checks", "pass" if run.get("checks_ok") else "FAIL",
         "ok" if run.get("checks_ok") else "bad",
         f"{sum(c['ok'] for c in checks)}/{len(checks)} cases, seed {run['seed']}"),
        ("w13 GEMM >= 75% of copy bandwidth at T <= 16", per_t_text(tg["w13_pct_copy_bw"], "{:.0f}%"),
         "ok" if tg["w13_ge_75pct_copy_bw"] else "bad",
         "paths: " + ", ".join(f"T={t}: {_path_at(run, int(t))}" for t in tg["w13_pct_copy_bw"])),
        ("Layer within 1.35x of the NVFP4 byte floor at T <= 16", per_t_text(tg["layer_x_floor"], "{:.2f}x"),
         "ok" if tg["layer_within_1.35x_floor"] else "bad", "time / (active experts' NVFP4 bytes / copy BW)"),
        ("Faster than torch FP8 grouped GEMM at every T", per_t_text(tg["speedup_vs_fp8"], "{:.2f}x"),
         "ok" if tg["faster_than_fp8_every_T"] else "warn",
         where_t(tg["speedup_vs_fp8"], lambda v: v > 1.0, "faster", "slower")),
        (">= 1.0x torch bf16 grouped GEMM at T=4096", f"{bf16:.2f}x" if bf16 else "n/a",
         "ok" if tg["ge_1.0x_bf16_T4096"] else "bad", f"ours at T=4096: {_path_at(run, 4096)} path"),
        ("Faster than vLLM's Marlin NVFP4 MoE (what SM120 owners serve with) at every T",
         per_t_text(marlin, "{:.2f}x") if marlin else "not measured",
         "not_run" if not marlin else "ok" if tg.get("faster_than_marlin_every_T") else "bad",
         where_t(marlin, lambda v: v > 1.0, "faster", "slower") + f" (Marlin time / ours; vLLM {vllm}'s compiled "
         "Marlin from its wheel, same NVFP4 weights and routings)" if marlin else "the run has no vllm-marlin rows"),
        ("Faster than the triton_kernels peer (matmul_ogs, MXFP4, wgmma) at every T",
         per_t_text(peer, "{:.2f}x") if peer else "not measured",
         "not_run" if not peer else "ok" if tg.get("faster_than_peer_every_T") else "bad",
         where_t(peer, lambda v: v > 1.0, "faster", "slower") + " (peer time / ours; the peer moves ~6% fewer bytes)"
         if peer else "the run has no peer rows"),
        ("Same kernels on SM120", "compiled only", "not_run",
         "AOT for sm_120/121 (data/triton_aot/): fits 101,376 B; unverified on SM120 hardware"),
    ]


def bench_table(run: dict):
    """Section 4: per T of a recorded run, the median MoE-layer us of each of :data:`TABLE_CONTENDERS`
    (CUDA-graph timing), ours' path, ours' % of the NVFP4 weight-byte floor
    (:func:`sm120lab.bench.plot.pct_of_floor`) and its w13 GEMM's % of the copy bandwidth.

    Returns:
        A DataFrame, one row per T (ascending); None where a row was not recorded.
    """
    import pandas as pd

    from .plot import pct_of_floor

    pct = dict(pct_of_floor(run, OURS))
    table = []
    for t in sorted({r["T"] for r in run["rows"]}):
        line = {"T": t}
        for c in TABLE_CONTENDERS:
            r = find_row(run, t, c, "moe")
            line[f"{c} us"] = round(r["us_median"], 1) if r else None
        ours, w13 = find_row(run, t, OURS, "moe"), find_row(run, t, OURS, "w13")
        line["ours path"] = ours.get("path") if ours else None
        line["ours % floor"] = round(pct.get(t, float("nan")), 1)
        line["w13 % copy BW"] = round(w13["pct_copy_bw"], 1) if w13 else None
        table.append(line)
    return pd.DataFrame(table)


def profile_table(run: dict, tokens=(1, 4096)):
    """Where the layer's time goes: per T in ``tokens``, each profiled contender's kernels
    (:mod:`sm120lab.bench.profile`, under ``run["profile"]``), slowest first, with their share of the
    contender's timed median; the ``(gap)`` row is the timed median minus the kernels' sum.

    Returns:
        A DataFrame (T, contender, kernel, calls per layer, us per layer, % of timed), or None when the run
        was recorded without a profile.
    """
    import pandas as pd

    prof = run.get("profile") or {}
    lines = []
    for t in tokens:
        for contender, p in (prof.get(str(t)) or {}).items():
            timed = p["timed_us"]
            for k in p["kernels"]:
                lines.append({"T": t, "contender": contender, "kernel": k["kernel"][:60],
                              "calls per layer": round(k["calls_per_layer"], 2),
                              "us per layer": round(k["us_per_layer"], 1),
                              "% of timed": round(100 * k["us_per_layer"] / timed, 1)})
            lines.append({"T": t, "contender": contender, "kernel": "(gap)", "calls per layer": None,
                          "us per layer": round(p["gap_us"], 1), "% of timed": round(100 * p["gap_us"] / timed, 1)})
    return pd.DataFrame(lines) if lines else None


def live_run(tokens, *, enabled: bool = True) -> dict | None:
    """Section 5: the benchmark (:func:`sm120lab.bench.moe.run_moe_bench`, no tuning, with its checks) at
    ``tokens`` on this machine's CUDA GPU, written to a fresh temporary folder (never into ``data/``).

    Args:
        tokens: the T values to time.
        enabled: False (the notebook's ``live="off"``) runs nothing.

    Returns:
        The bench document, or None without a CUDA GPU or when not enabled.
    """
    if not (enabled and torch.cuda.is_available()):
        return None
    import tempfile
    from pathlib import Path

    from .moe import run_moe_bench

    return run_moe_bench(Path(tempfile.mkdtemp()) / "live_bench.json", tokens=tuple(tokens), tune=False, check=True,
                         command="notebook 07", log=lambda m: None)


def live_targets_text(doc: dict | None) -> str:
    """Section 5's text: the live run's targets (:func:`sm120lab.bench.moe.evaluate_targets`) as indented
    JSON, or that nothing ran here."""
    import json

    if doc is None:
        return "no CUDA GPU here (or live='off'): the figure above is the recorded H200 run"
    return "live targets: " + json.dumps(doc["targets"], indent=1)


def marlin_shapes(paths):
    """Marlin time / ours per shape (rows: each file's preset or shape) and T (columns) over recorded bench files
    with ``vllm-marlin`` rows (:func:`sm120lab.bench.records.ratios_vs`); above 1 ours is faster.

    Args:
        paths: bench files (``data/bench/moe_*.json``), one per preset or shape.

    Returns:
        A DataFrame of ratios, None where a T was not measured.
    """
    import pandas as pd

    from .records import load_bench, ratios_vs

    rows = {}
    for p in paths:
        d = load_bench(p)
        rows[d.model or f"shape {d.shape.get('H')},{d.shape.get('I')},{d.shape.get('E')},{d.shape.get('k')}"] = \
            ratios_vs(d, "vllm-marlin")
    return pd.DataFrame(rows).T.sort_index(axis=1)


def plot_marlin_shapes(table, ax=None, gpu: str = ""):
    """Draw :func:`marlin_shapes` as one line per shape against T, with the parity line at 1. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, row in table.iterrows():
        ts = [t for t in table.columns if row[t] == row[t]]
        ax.plot(ts, [row[t] for t in ts], marker="o", label=name)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="parity: as fast as Marlin")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens T")
    ax.set_ylabel("Marlin time / ours (above 1: ours faster)")
    ax.set_title(f"ours against vLLM's Marlin NVFP4 MoE, same weights and routings{' on ' + gpu if gpu else ''}",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def marlin_ranges(paths) -> dict[int, tuple[float, float]]:
    """Per T, the lowest and highest ``Marlin time / ours`` (:func:`sm120lab.bench.records.ratios_vs`) over the
    bench files ``paths`` (one per preset or shape, the same GPU): ``{T: (lo, hi)}``, only T measured in every
    file.

    Raises:
        ValueError: no path, or a file without ``vllm-marlin`` rows (``paths: ...``).
    """
    from .records import load_bench, ratios_vs

    per: dict[int, list[float]] = {}
    paths = list(paths)
    if not paths:
        raise ValueError("paths: expected at least one bench file with vllm-marlin rows")
    for p in paths:
        vs = ratios_vs(load_bench(p), "vllm-marlin")
        if not vs:
            raise ValueError(f"paths: {p} has no vllm-marlin rows")
        for t, v in vs.items():
            per.setdefault(t, []).append(v)
    return {t: (min(v), max(v)) for t, v in sorted(per.items()) if len(v) == len(paths)}


def marlin_range_text(ranges: dict[int, tuple[float, float]]) -> str:
    """One sentence from :func:`marlin_ranges`: where ours leads on every shape (lo > 1), where it trails on
    every shape (hi <= 1) and where that depends on the shape, each T with its range."""
    def join(ts):
        parts = [f"T={t} ({ranges[t][0]:.2f}-{ranges[t][1]:.2f}x)" for t in ts]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    ahead = [t for t, (lo, _) in ranges.items() if lo > 1.0]
    behind = [t for t, (_, hi) in ranges.items() if hi <= 1.0]
    mixed = [t for t in ranges if t not in ahead and t not in behind]
    out = []
    if ahead:
        out.append(f"ahead at {join(ahead)} on every shape")
    if behind:
        out.append(f"behind at {join(behind)} on every shape")
    if mixed:
        out.append(f"shape-dependent at {join(mixed)}")
    return "; ".join(out)
