"""The tables, texts and verdict box notebook 03 shows, computed from one
:class:`~sm120lab.moe.harness.CheckResult` (every backend on one MoE problem against the exact
reference), the activation-quantizer diffs (:mod:`.quantizer_diff`) and the recorded GPU runs
(``data/correctness/h200_*.json``). The figures are in :mod:`.plots`.

Numbers are the harness's own: ``rel err = ||out - ref||_F / ||ref||_F``, cosine between the
flattened outputs, per (token, expert) cell the deviation from the backend's expected numerics
(:mod:`.metrics`, :mod:`.verdict`); nothing here judges anything again.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: the reason a GPU backend gives on a CPU-only machine, said once for all of them in the box
NO_GPU = "no CUDA GPU on this machine"


def fmt_err(v) -> str:
    """An error for a table: 3 significant digits each on its own (``f"{v:.3g}"``, no shared exponent),
    ``nan`` / ``inf`` spelled, ``>1000`` beyond 1000 in magnitude; strings unchanged.

    Args:
        v: a float (or a string already formatted).

    Returns:
        The formatted text.
    """
    if isinstance(v, str):
        return v
    return "nan" if v != v else ("inf" if v == float("inf") else (">1000" if abs(v) > 1e3 else f"{v:.3g}"))


def split_reports(result) -> tuple[dict, dict]:
    """``(real, planted)``: the result's reports of real backends and of planted faults (named ``fault-*``)."""
    real = {n: r for n, r in result.reports.items() if not n.startswith("fault-")}
    planted = {n: r for n, r in result.reports.items() if n.startswith("fault-")}
    return real, planted


def why_not_run(rep, device: str) -> str:
    """One short reason a backend did not run: on a CPU-only run every GPU backend's reason
    ("running on cpu") becomes :data:`NO_GPU`, said once; else the first clause of its reason (110 chars)."""
    if device == "cpu" and "running on cpu" in rep.reason:
        return NO_GPU
    return rep.reason.split(";")[0][:110]


def headline_rows(result, faults: list, problem, device: str) -> list[tuple[str, str, str, str]]:
    """Notebook 03's verdict box as ``(claim, value, verdict, why)`` rows; ``verdict`` is a
    :class:`~sm120lab.moe.verdict.Verdict` value that the run folder turns into the box's status
    (:func:`sm120lab.runs.answer.status_of_verdict`).

    Rows: each real backend that ran (its verdict, rel err and cosine, the experts it was flagged on) or
    did not (``skipped`` and why); one row for every backend that needs a GPU this machine lacks
    (``skipped``); one row for the planted faults, each judged on what it broke
    (:func:`sm120lab.moe.faults.judge_fault`): ``correct`` when every applicable fault was caught and
    localized, else ``garbage`` (the harness itself missed one). A fault that changes nothing the harness
    can resolve on this problem is not applicable.

    Args:
        result: :func:`sm120lab.moe.harness.check` on ``problem``.
        faults: the planted fault backends that were run (:func:`sm120lab.moe.faults.all_faults`), or [].
        problem: the MoE problem.
        device: where it ran (``"cpu"`` or ``"cuda"``).

    Returns:
        The rows in display order.
    """
    from .faults import judge_fault

    real, planted = split_reports(result)
    rows = []
    no_gpu = [n for n, r in real.items() if r.diff is None and why_not_run(r, device) == NO_GPU]
    for name, rep in real.items():
        if name in no_gpu or name == "reference":
            continue
        if rep.diff is None:
            rows.append((f"{name} on this machine", str(rep.verdict or rep.status), str(rep.verdict or "skipped"),
                         why_not_run(rep, device)))
        else:
            rows.append((f"{name} on this machine ({device})", str(rep.verdict), str(rep.verdict),
                         f"rel err {rep.diff.rel_fro:.3g}, cosine {rep.diff.cosine:.3f}"
                         + (f", flagged experts {rep.flagged_experts[:8]}" if rep.flagged_experts else "")))
    if no_gpu:
        rows.append((", ".join(no_gpu), "not run", "skipped",
                     "this machine has no CUDA GPU: run this notebook (or `sm120lab check`) on the GPU box"))
    if planted:
        outcome = {f.name: judge_fault(f, problem, planted[f.name]) for f in faults if f.name in planted}
        applicable = [n for n, o in outcome.items() if o.applicable]
        caught = [n for n in applicable if outcome[n].caught]
        localized = [n for n in applicable if outcome[n].localized]
        rows.append(("planted faults caught and localized by the harness", f"{len(localized)} of {len(applicable)}",
                     "correct" if len(localized) == len(caught) == len(applicable) else "garbage",
                     f"{len(caught)} caught; {len(planted) - len(applicable)} changed nothing the harness can "
                     "resolve on this problem (not applicable); missed: "
                     + (", ".join(n for n in applicable if n not in localized) or "none") + " (sections 3 and 4)"))
    return rows


def problem_text(problem) -> str:
    """Section 1: the problem's shape and routing, the NVFP4 weight tensors (packed codes, linear and
    swizzled scales, per-expert global scales) and the (token, slot) pairs each expert received."""
    desc = problem.describe()
    w13 = problem.w13
    return "\n".join([
        str({k: desc[k] for k in ("preset", "E", "k", "H", "I", "tokens", "routing", "seed", "empty_experts")}),
        f"w13: {tuple(w13.shape)} data {tuple(w13.data.shape)} {w13.data.dtype} | linear scales "
        f"{tuple(w13.scale.shape)} | swizzled {tuple(problem.w13_swizzled.scale.shape)} | global scale "
        f"{tuple(w13.global_scale.shape)}",
        f"slots per expert: {problem.expert_counts().cpu().numpy().tolist()}",
    ])


def envelope_text(env) -> str:
    """Section 2: the error envelope's numbers (:class:`~sm120lab.moe.envelope.Envelope`), one per line, :func:`fmt_err`."""
    import pandas as pd

    return pd.Series(env.as_dict()).map(fmt_err).to_string()


def verdict_table(result, device: str):
    """Section 3: per backend its verdict, the experts the error was localized to, and why it did not run.

    Returns:
        A DataFrame: ``backend``, ``verdict``, ``flagged experts``, ``why not run``.
    """
    import pandas as pd

    return pd.DataFrame([{"backend": name, "verdict": rep.verdict or rep.status,
                          "flagged experts": str(rep.flagged_experts) if rep.diff is not None else "",
                          "why not run": "" if rep.diff is not None else why_not_run(rep, device)}
                         for name, rep in result.reports.items()])


def numbers_text(result) -> str:
    """Section 3: the harness's numbers (:meth:`~sm120lab.moe.harness.CheckResult.table`) of every backend
    that ran, errors through :func:`fmt_err`."""
    import pandas as pd

    numbers = pd.DataFrame([{k: v for k, v in row.items() if k not in ("flagged_experts", "reason")}
                            for row in result.table() if "rel_err" in row])
    return numbers.to_string(index=False, formatters={c: fmt_err for c in ("rel_err", "cosine", "max_cell_dev")})


def reasons_text(result) -> str:
    """Section 3: the reasons behind every ``garbage``, ``degraded`` or ``error`` verdict, indented under the backend."""
    lines = []
    for name, rep in result.reports.items():
        if rep.verdict in ("garbage", "degraded", "error"):
            lines.append(f"{name}: {rep.verdict}")
            lines += [f"   - {r}" for r in (rep.reasons or [rep.reason])]
    return "\n".join(lines)


def scale_bytes_text(problem, n: int = 8) -> str:
    """Section 5: expert 0's first ``n`` block-scale bytes of w13 in the linear and the 128x4-swizzled
    copies, and whether the swizzled copy (padding cut off) holds the same multiset of bytes."""
    lin = problem.w13.scale[0].view(torch.uint8).cpu().reshape(-1)
    swz = problem.w13_swizzled.scale[0].view(torch.uint8).cpu().reshape(-1)
    same = bool(torch.equal(torch.sort(lin).values, torch.sort(swz[:lin.numel()]).values))
    return "\n".join([f"expert 0, first {n} scale bytes, linear  : {lin[:n].tolist()}",
                      f"expert 0, first {n} scale bytes, swizzled: {swz[:n].tolist()}",
                      f"same multiset of bytes: {same}"])


def fault_summary_text(result, name: str = "fault-linear-as-swizzled") -> str:
    """Section 5: one planted fault's rel err, cosine, verdict and flagged experts, or that faults did not run."""
    from .plots import output_pair

    pair = output_pair(result, name)
    if pair is None:
        return "fault backends not run (with_faults=False)"
    rep = pair[0]
    return (f"rel err {rep.diff.rel_fro:.3g}, cosine {rep.diff.cosine:.3f}: {rep.verdict}, "
            f"flagged experts {rep.flagged_experts}")


def quantizer_demo_text(diffs: list) -> str:
    """Section 6: one line per :class:`~sm120lab.moe.quantizer_diff.QuantizerDiff`: name, layout, verdict, silent."""
    return "\n".join(f"{d.name:18s} {d.layout:9s} verdict={d.verdict:8s} silent={d.silent}" for d in diffs)


def quantizer_gpu_text(diffs: list, device: str) -> str:
    """Section 6: the GPU quantizer diffs that ran (FlashInfer's ``fp4_quantize``, the workbook's Triton
    quantizer: matching bytes, codes, scales), then one line per distinct reason naming the ones that did not
    (:data:`NO_GPU` on a CPU-only run)."""
    lines = [f"{d.name} {d.layout}: {d.verdict} (bytes {d.byte_match:.4f}, codes {d.code_match:.4f}, "
             f"scales {d.scale_match:.4f}) silent={d.silent} {d.note}" for d in diffs if d.status == "ran"]
    not_run: dict[str, list[str]] = {}
    for d in diffs:
        if d.status != "ran":
            names = not_run.setdefault(NO_GPU if device == "cpu" else d.reason, [])
            if d.name not in names:
                names.append(d.name)
    lines += [f"{', '.join(names)}: not run ({why})" for why, names in not_run.items()]
    return "\n".join(lines)


def recorded_gpu_runs_text(data: Path | None = None) -> str:
    """Section 7: the recorded GPU correctness runs (``correctness/h200_*.json`` under ``data``, default
    :func:`sm120lab.paths.data_dir`): per file its GPU, per run the tokens, ``e_a`` and each backend's
    verdict (rel err), and each ``fp4_quantize`` diff."""
    from ..paths import data_dir

    data = data_dir() if data is None else data
    recorded = {p.name: json.loads(p.read_text()) for p in sorted((data / "correctness").glob("h200_*.json"))}
    if not recorded:
        return "no recorded GPU runs in data/correctness/"
    lines = []
    for name, d in recorded.items():
        gpu = d.get("env", {}).get("gpu") or {}
        lines.append(f"{name}: {gpu.get('name', gpu) if isinstance(gpu, dict) else gpu}")
        for run in d.get("runs", []):
            p = run["problem"]
            lines.append(f"   T={p['tokens']:5d}  e_a={run['envelope']['e_a']:.4g}  " + "  ".join(
                f"{b['backend']}={b['verdict']}" + (f"({b['rel_fro']:.3g})" if "rel_fro" in b else "")
                for b in run["backends"] if b["verdict"] != "skipped"))
        for q in d.get("diffs", []):
            lines.append(f"   fp4_quantize {q['layout']}: {q['verdict'] or q['status']}, matching bytes "
                         f"{q['byte_match']:.4f}, codes {q['code_match']:.4f}, scales {q['scale_match']:.4f}, "
                         f"silent={q['silent']}")
    return "\n".join(lines)


MARLIN_RUN_GLOB = "correctness/marlin_h200_*"


def recorded_marlin(data: Path | None = None):
    """Section 8: vLLM's Marlin through ``sm120lab check`` on the recorded GPU run (the newest
    ``correctness/marlin_h200_*/`` under ``data``): one row per check report (``check_*.json``).

    Returns:
        ``(folder, DataFrame)``: per report the preset, T, routing, Marlin's verdict, its relative
        error vs the exact reference, the envelope's correct limit for a W4A16 backend, their ratio, the
        largest (token, expert) cell deviation, and for ``--faults`` runs how many planted faults were
        judged garbage out of how many ran; ``(None, None)`` when no run is recorded.
    """
    import pandas as pd

    from ..paths import data_dir

    data = data_dir() if data is None else data
    runs = sorted(data.glob(MARLIN_RUN_GLOB))
    if not runs:
        return None, None
    folder = runs[-1]
    rows = []
    for f in sorted(folder.glob("check_*.json")):
        d = json.loads(f.read_text())
        rep = {b["backend"]: b for b in d["backends"]}
        m = rep.get("vllm-marlin") or {}
        faults = [b for name, b in rep.items() if name.startswith("fault-")]
        limit = d["envelope"].get("correct_rel")
        rel = m.get("rel_fro")
        rows.append({"preset": d["problem"]["preset"], "T": d["problem"]["tokens"], "routing": d["problem"]["routing"],
                     "verdict": m.get("verdict", m.get("status")), "rel vs exact": rel, "correct limit": limit,
                     "rel / limit": rel / limit if rel is not None and limit else None,
                     "max cell dev": m.get("max_cell_dev"),
                     "faults garbage": f"{sum(b['verdict'] == 'garbage' for b in faults)}/{len(faults)}" if faults else ""})
    order = {name: i for i, name in enumerate(("tiny", "small", "qwen3.5-397b-a17b", "qwen3-next-80b-a3b",
                                               "qwen3-235b-a22b", "gpt-oss-120b"))}
    df = pd.DataFrame(rows)
    df = df.sort_values(by=["preset", "T"], key=lambda c: c.map(lambda v: order.get(v, 99)) if c.name == "preset"
                        else c).reset_index(drop=True)
    return folder, df


def marlin_envelope_text(folder: Path, df) -> str:
    """Section 8's reading: Marlin's error range against the exact reference and against the limit, and where
    its extra error over ours comes from (ours' error from the same run's GPU test log)."""
    import re

    ours = []
    for log in folder.glob("gpu_tests_marlin_*.txt"):
        ours += [float(x) for x in re.findall(r"ours vs fp64 ([0-9.e-]+)", log.read_text())]
    ran = df[df["verdict"] == "correct"]
    text = (f"vLLM's Marlin: {len(ran)}/{len(df)} reports correct; rel. error vs the exact reference "
            f"{df['rel vs exact'].min():.1e}-{df['rel vs exact'].max():.1e}, at most "
            f"{df['rel / limit'].max():.0%} of the W4A16 correct limit.")
    if ours:
        text += (f" Ours on the same GPU's test problems: {min(ours):.1e}-{max(ours):.1e}. Marlin's extra error is two "
                 "bf16 roundings ours does not make (read in vLLM 0.26.0's fused_moe/experts/marlin_moe.py): the w13 "
                 "GEMM writes its output in the activations' dtype (bf16) before SiLU-and-mul, and the w2 GEMM "
                 "multiplies the router weight inside the GEMM (mul_topk_weights) before its bf16 output. Both are "
                 "legitimate W4A16 numerics, well inside the "
                 "envelope, so the harness calls it correct; a layout or scale bug moves the error by orders of "
                 "magnitude (the planted faults in the same runs).")
    return text + " Recorded on an H200 (SM90); unverified on SM120 hardware."


def results_record(result, device: str, demo: list, gpu_diffs: list) -> dict:
    """What notebook 03 records: the device, the problem, the envelope, every backend's verdict, the
    flagged experts of those that ran, and the quantizer diffs."""
    return {
        "device": device,
        "problem": result.problem.describe(),
        "envelope": result.envelope.as_dict(),
        "verdicts": {name: rep.verdict or rep.status for name, rep in result.reports.items()},
        "flagged_experts": {name: rep.flagged_experts for name, rep in result.reports.items() if rep.diff is not None},
        "quantizer_demo": [d.as_dict() for d in demo],
        "quantizer_gpu": [d.as_dict() for d in gpu_diffs],
    }
