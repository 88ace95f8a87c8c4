"""The false-alarm sweep: many random problems, correct-but-different backends and planted faults.

For every preset and routing family, ``problems`` fresh problems (seeds ``seed, seed+1, ...``,
recorded) go through :func:`sm120lab.moe.harness.check` with

- the correct backends (``reference``, ``emulated-w4a4``, ``torch-bf16``) and the
  correct-but-different variants of :mod:`.variants` (bf16 accumulation, reversed expert order,
  FP8-rowwise weights, bf16 weights, and the legitimate activation-quantizer variants: block
  scales rounded up / down, per-expert / per-token / power-of-two global scales): any ``garbage``
  is a FALSE ALARM; the saturating percentile calibration and the weight quantizers in no member of the
  envelope's weight-format family (``WEIGHT_OUT_OF_FAMILY``) are recorded beside them, not held to it;
- the planted faults of :mod:`.faults`, judged by :func:`sm120lab.moe.faults.judge_fault`: each
  required fault (``FAULTS``) must be ``garbage`` and flag exactly its expected experts ("all
  experts" faults: every routed expert and the shared flag) and only expected tokens, at least
  ``TOKEN_RECALL`` of them (``localized_exactly`` counts exact token sets); a routing fault that
  moves no token beyond the mixing resolution on a problem is counted ``not_applicable`` and must
  flag nothing; the envelope-judged faults (``SUBTLE_FAULTS``: gate/up swap in every expert,
  32-element activation blocks) must never be pinned on a subset of the experts.

The record also holds the rule thresholds (``rules``) and, per backend, the extremes of the
statistics they threshold (``statistics``: the largest value each correct backend reached, the
smallest margin each caught fault had), which is what ``notes/correctness.md`` sets them from.

Routing families are the routings of :data:`sm120lab.moe.ROUTINGS` at the preset's default T,
plus ``mostly-empty``: sparse routing at T = 1..3, so nearly every expert is empty.

:func:`false_alarm_sweep` returns a JSON-ready dict (totals, every failure with a replay command,
and one compact line per problem); ``sm120lab check --sweep N`` runs it and writes it.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import numpy as np
import torch

from . import verdict as rules
from .faults import FAULTS, SUBTLE_FAULTS, TOKEN_RECALL, judge_fault
from .harness import check, one_thread_for_small, replay_command
from .problem import ROUTINGS, make_moe_problem
from .variants import (
    ACT_FAMILY_VARIANTS,
    SATURATING_VARIANTS,
    WEIGHT_OUT_OF_FAMILY,
    WEIGHT_QUANTIZER_VARIANTS,
    all_variants,
)
from .verdict import Verdict, pooled_deviation

__all__ = ["CORRECT_BACKENDS", "FAMILIES", "TOKEN_RECALL", "false_alarm_sweep", "merge_sweeps", "problem_of", "sweep_problem"]

CORRECT_BACKENDS = ("reference", "emulated-w4a4", "torch-bf16")
#: routing families: every routing kind, plus mostly-empty (sparse routing at T = 1..3)
FAMILIES = (*ROUTINGS, "mostly-empty")
_LETTER = {Verdict.CORRECT: "c", Verdict.DEGRADED: "d", Verdict.GARBAGE: "g", Verdict.SKIPPED: "s", Verdict.ERROR: "e"}


def problem_of(preset: str, family: str, seed: int, device="cpu"):
    """The sweep's problem for (preset, family, seed): replayable from these three values."""
    if family == "mostly-empty":
        return make_moe_problem(preset, tokens=1 + seed % 3, routing="sparse", seed=seed, device=device)
    if family not in ROUTINGS:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return make_moe_problem(preset, routing=family, seed=seed, device=device)


def _stats(rep, env) -> dict:
    """The numbers the verdict rules threshold, for one report (their extremes go into the record)."""
    out = {"rel_over_e_a": min([rep.diff.rel_fro] + [x.rel_fro for x in (rep.diff_twin, rep.diff_alt) if x is not None])
           / env.e_a}
    if rep.mixing is not None:
        fin = rep.mixing[np.isfinite(rep.mixing)]
        out["mixing"] = float(fin.max()) if fin.size else 0.0
    if rep.cells is not None:
        out["cell_dev"] = float(np.max(rep.cells.dev))
        pooled = pooled_deviation(rep)
        out["expert_pooled"] = float(np.nanmax(pooled))
        routed = np.flatnonzero(np.isfinite(pooled))
        if routed.size > 1 and rep.numerics != "w4a4":
            out["expert_ratio"] = float(max(
                pooled[e] / max(rules.ROUNDING_FLOOR, float(np.median(pooled[np.setdiff1d(routed, [e])])))
                for e in routed))
        if rep.expert_band is not None and rep.numerics == "w4a4":
            # the leave-one-out ratios that set the W4A4 Z's: deviation / the null family's band (the backend itself
            # left out when it is a member), cells and tokens where they also exceed DEV_GARBAGE (the rules need both)
            band = np.maximum(rep.cell_band, rep.expert_band[rep.cells.ids])
            z = rep.cells.dev / np.maximum(band, 1e-12)
            out["cell_z_all"] = float(np.max(z))
            out["cell_z"] = float(np.max(np.where(rep.cells.dev > rules.DEV_GARBAGE, z, 0.0)))
            out["expert_z"] = float(np.nanmax(pooled / np.maximum(rep.expert_band, 1e-12)))
            if rep.token_dev is not None and rep.token_band is not None:
                tz = rep.token_dev.dev / np.maximum(rep.token_band, 1e-12)
                out["token_z"] = float(np.max(np.where(rep.token_dev.dev > rules.DEV_GARBAGE, tz, 0.0)))
            if rep.layer_band:
                near = min([rep.diff.rel_fro] + [x.rel_fro for x in (rep.diff_twin,) if x is not None])
                out["layer_z"] = near / rep.layer_band
    return {k: v for k, v in out.items() if np.isfinite(v)}


def _fault_margin(fault, problem, rep) -> dict:
    """How far a caught fault sat beyond its rule: the broken expert's pooled deviation, the broken
    tokens' mixing deviation (their minimum over the problem)."""
    out = {}
    want_e = fault.expected_experts(problem)
    if rep.cells is not None and want_e and not fault.shared:
        pooled = pooled_deviation(rep)
        out["target_pooled"] = float(min(pooled[e] for e in want_e))
    if rep.mixing is not None and not want_e and fault.expected_tokens(problem):
        out["token_mixing"] = float(min(rep.mixing[t] for t in fault.expected_tokens(problem)))
    return out


def _extremes(acc: dict, name: str, stats: dict, worst) -> None:
    slot = acc.setdefault(name, {})
    for k, v in stats.items():
        slot[k] = v if k not in slot else worst(slot[k], v)


def _backends():
    """(correct names, variants, recorded-not-held variants (saturating calibrations, weight quantizers in no
    family member), required faults, envelope-judged faults), built fresh (in each worker)."""
    variants = all_variants()
    correct = list(CORRECT_BACKENDS) + [v.name for v in variants]
    return correct, variants, [cls() for cls in SATURATING_VARIANTS + WEIGHT_OUT_OF_FAMILY], \
        [cls() for cls in FAULTS], [cls() for cls in SUBTLE_FAULTS]


def sweep_problem(job: tuple) -> dict:
    """One problem of the sweep, ``job = (preset, family, seed, device)``: its verdict letters, the verdict of
    every backend, each fault's outcome, the failures, and the statistics the rules threshold (a picklable
    dict: :func:`false_alarm_sweep` runs it in worker processes too)."""
    preset, family, s, device = job
    correct, variants, recorded, required, subtle = _backends()
    faults = required + subtle
    order = correct + [v.name for v in recorded] + [f.name for f in faults]
    prob = problem_of(preset, family, s, device)
    res = check(prob, list(CORRECT_BACKENDS) + variants + recorded + faults, keep_output=False)
    where = {"preset": preset, "family": family, "seed": s, "tokens": prob.tokens, "replay": replay_command(prob)}
    out = {"verdicts": {n: str(res.reports[n].verdict) for n in order}, "faults": {}, "failures": [], "highs": {},
           "lows": {}}
    for name in correct + [v.name for v in recorded]:
        rep = res.reports[name]
        if rep.diff is not None:
            out["highs"][name] = _stats(rep, res.envelope)
        if name in correct and rep.verdict in (Verdict.GARBAGE, Verdict.ERROR):
            out["failures"].append({**where, "backend": name, "kind": f"false {rep.verdict}",
                                    "reasons": rep.reasons or [rep.reason]})
    for f in faults:
        rep = res.reports[f.name]
        o = judge_fault(f, prob, rep)
        out["faults"][f.name] = (bool(o.applicable), bool(o.caught), bool(o.localized), bool(o.exact))
        if o.applicable and o.caught:
            out["lows"][f.name] = _fault_margin(f, prob, rep)
        if not o.localized:
            out["failures"].append({**where, "replay": f"{where['replay']} --faults --backend {f.name}",
                                    "backend": f.name, "kind": "missed" if not o.caught else "mislocalized",
                                    "verdict": str(rep.verdict), "shared": rep.shared,
                                    "experts": {"expected": sorted(f.expected_experts(prob)),
                                                "flagged": rep.flagged_experts},
                                    "tokens": {"expected": sorted(f.expected_tokens(prob)),
                                               "flagged": rep.flagged_tokens}})
    out["row"] = [preset, family, prob.tokens, s, "".join(_LETTER.get(Verdict(out["verdicts"][n]), "?") for n in order)]
    return out


def _worker_init() -> None:
    torch.set_num_threads(1)


def false_alarm_sweep(presets=("tiny",), families=FAMILIES, problems: int = 100, seed: int = 0, device="cpu", *,
                      progress=None, jobs: int = 1) -> dict:
    """Run the sweep (module docstring) and return its record.

    Args:
        presets: preset names. families: routing families (:data:`FAMILIES`).
        problems: problems per (preset, family); seeds ``seed .. seed + problems - 1``.
        device: where problems are drawn and run.
        progress: optional callable wrapping the iterable of per-problem results (e.g. tqdm).
        jobs: worker processes (CPU: one torch thread each); the record is the same for any number.

    Returns:
        ``{"totals": {...}, "failures": [...], "problems": [...], ...}``: ``totals.false_garbage`` counts
        garbage verdicts of correct backends/variants; ``totals.faults[name]`` caught/localized counts.
    """
    if isinstance(problems, bool) or not isinstance(problems, int) or problems < 1:
        raise ValueError(f"problems must be a positive int, got {problems!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"families must be among {FAMILIES}, got {bad}")
    if not list(presets) or not list(families):  # 0 problems would read as a clean sweep
        raise ValueError(f"presets and families must each name at least one, got {list(presets)} x {list(families)}")
    correct, _, recorded, required, subtle = _backends()
    faults = required + subtle
    order = correct + [v.name for v in recorded] + [f.name for f in faults]
    verdicts: dict[str, Counter] = {name: Counter() for name in order}
    fault_stats = {f.name: {"caught": 0, "localized": 0, "localized_exactly": 0, "not_applicable": 0, "of": 0,
                            "required": f in required, "envelope_judged": f.envelope_judged, "shared": f.shared}
                   for f in faults}
    failures, rows = [], []
    highs: dict[str, dict] = {}   # per backend: the largest value of each thresholded statistic
    lows: dict[str, dict] = {}    # per fault: the smallest detection margin
    jobs_list = [(p, fam, seed + i, str(device)) for p in presets for fam in families for i in range(problems)]
    with contextlib.ExitStack() as stack:
        if jobs > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            pool = stack.enter_context(ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"),
                                                           initializer=_worker_init))
            results = pool.map(sweep_problem, jobs_list, chunksize=4)
        else:
            stack.enter_context(one_thread_for_small(device))
            results = map(sweep_problem, jobs_list)
        for r in (progress(results) if progress is not None else results):
            for name, v in r["verdicts"].items():
                verdicts[name][v] += 1
            for name, st in r["highs"].items():
                _extremes(highs, name, st, max)
            for name, st in r["lows"].items():
                _extremes(lows, name, st, min)
            for name, (applicable, caught, localized, exact) in r["faults"].items():
                st = fault_stats[name]
                st["of"] += 1
                st["not_applicable"] += not applicable
                st["caught"] += caught
                st["localized"] += localized
                st["localized_exactly"] += exact
            failures += r["failures"]
            rows.append(r["row"])
    false_garbage = sum(verdicts[n][str(Verdict.GARBAGE)] for n in correct)
    required_missed = sum(st["of"] - st["localized"] for st in fault_stats.values())
    return {
        "presets": list(presets), "families": list(families), "problems_per_family": problems,
        "seeds": {"first": seed, "last": seed + problems - 1, "rule": "problem_of(preset, family, seed)"},
        "device": str(device), "torch_threads": 1 if torch.device(device).type == "cpu" else None,
        "workers": jobs,
        "backends": {"correct": correct,
                     "saturating": [v.name for v in recorded if type(v) in SATURATING_VARIANTS],
                     "recorded_not_held": [v.name for v in recorded],
                     "faults_required": [f.name for f in required],
                     "faults_envelope_judged": [f.name for f in subtle],
                     "act_family": [cls().name for cls in ACT_FAMILY_VARIANTS],
                     "weight_family": ["unquantized"] + [cls().name for cls in WEIGHT_QUANTIZER_VARIANTS]},
        "token_recall": TOKEN_RECALL,
        "rules": {k: getattr(rules, k) for k in rules.__all__ if k.isupper()},
        "statistics": {"correct_backends_max": highs, "faults_min_margin": lows},
        "totals": {"problems": len(jobs_list), "false_garbage": false_garbage,
                   "false_errors": sum(verdicts[n][str(Verdict.ERROR)] for n in correct),
                   "required_faults_not_localized": required_missed,
                   "verdicts": {n: dict(c) for n, c in verdicts.items()}, "faults": fault_stats},
        "failures": failures,
        "problem_columns": ["preset", "family", "tokens", "seed", "verdict letters (c/d/g/s/e) in backend order: "
                            + ", ".join(order)],
        "problems": rows,
    }


def merge_sweeps(records: list[dict], names: list[str] | None = None) -> dict:
    """One record from sweep records run apart (other seeds, families, presets or machines) with the same rules
    and backends: verdict and fault counts summed, failures and problem lines joined, the statistics' extremes
    taken, and each part's command and environment kept under ``parts``.

    Raises:
        ValueError: fewer than two records, or records whose rules or backend lists differ (one line).
    """
    if len(records) < 2:
        raise ValueError(f"expected at least two sweep records to merge, got {len(records)}")
    names = names or [f"part {i}" for i in range(len(records))]
    first = records[0]
    for name, r in zip(names, records):
        missing = [k for k in ("rules", "backends", "totals", "statistics", "problems") if k not in r]
        if missing:
            raise ValueError(f"{name}: not a sweep record (no {', '.join(missing)})")
        for key in ("rules", "backends", "token_recall", "problem_columns"):
            if r.get(key) != first.get(key):
                raise ValueError(f"{name}: its {key} differ from those of {names[0]}; merge only records of the same code")
    verdicts: dict[str, Counter] = {}
    faults: dict[str, dict] = {}
    highs: dict[str, dict] = {}
    lows: dict[str, dict] = {}
    totals = Counter()
    for r in records:
        t = r["totals"]
        for key in ("problems", "false_garbage", "false_errors", "required_faults_not_localized"):
            totals[key] += t[key]
        for name, c in t["verdicts"].items():
            verdicts.setdefault(name, Counter()).update(c)
        for name, st in t["faults"].items():
            acc = faults.setdefault(name, {k: (0 if isinstance(v, int) and not isinstance(v, bool) else v)
                                           for k, v in st.items()})
            for k, v in st.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    acc[k] += v
        for name, st in r["statistics"]["correct_backends_max"].items():
            _extremes(highs, name, st, max)
        for name, st in r["statistics"]["faults_min_margin"].items():
            _extremes(lows, name, st, min)
    return {
        "presets": sorted({p for r in records for p in r["presets"]}),
        "families": sorted({f for r in records for f in r["families"]}),
        "parts": [{"name": n, "presets": r["presets"], "families": r["families"], "seeds": r["seeds"],
                   "problems": r["totals"]["problems"], "device": r.get("device"), "workers": r.get("workers"),
                   "command": r.get("command"), "env": r.get("env")} for n, r in zip(names, records)],
        "backends": first["backends"], "token_recall": first["token_recall"], "rules": first["rules"],
        "statistics": {"correct_backends_max": highs, "faults_min_margin": lows},
        "totals": {**dict(totals), "verdicts": {n: dict(c) for n, c in verdicts.items()}, "faults": faults},
        "failures": [f for r in records for f in r["failures"]],
        "problem_columns": first["problem_columns"],
        "problems": [row for r in records for row in r["problems"]],
    }
