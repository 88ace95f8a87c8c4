"""The false-alarm sweep: many random problems, correct-but-different backends and planted faults.

For every preset and routing family, ``problems`` fresh problems (seeds ``seed, seed+1, ...``,
recorded) go through :func:`sm120lab.moe.harness.check` with

- the correct backends (``reference``, ``emulated-w4a4``, ``torch-bf16``) and the
  correct-but-different variants of :mod:`.variants` (bf16 accumulation, reversed expert order,
  FP8-rowwise weights, bf16 weights, and the legitimate activation-quantizer variants: block
  scales rounded up / down, per-expert / per-token / power-of-two global scales): any ``garbage``
  is a FALSE ALARM; the saturating percentile calibration is recorded beside them, not held to it;
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

from collections import Counter

import numpy as np
import torch

from . import verdict as rules
from .faults import FAULTS, SUBTLE_FAULTS, TOKEN_RECALL, judge_fault
from .harness import check, one_thread_for_small, replay_command
from .problem import ROUTINGS, make_moe_problem
from .variants import SATURATING_VARIANTS, all_variants
from .verdict import Verdict, pooled_deviation

__all__ = ["CORRECT_BACKENDS", "FAMILIES", "TOKEN_RECALL", "false_alarm_sweep", "problem_of"]

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
            band = np.maximum(rep.cell_band, rep.expert_band[rep.cells.ids])
            out["cell_z"] = float(np.max(rep.cells.dev / np.maximum(band, 1e-12)))
            out["expert_z"] = float(np.nanmax(pooled / np.maximum(rep.expert_band, 1e-12)))
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


def false_alarm_sweep(presets=("tiny",), families=FAMILIES, problems: int = 100, seed: int = 0, device="cpu", *,
                      progress=None) -> dict:
    """Run the sweep (module docstring) and return its record.

    Args:
        presets: preset names. families: routing families (:data:`FAMILIES`).
        problems: problems per (preset, family); seeds ``seed .. seed + problems - 1``.
        device: where problems are drawn and run.
        progress: optional callable wrapping the iterable of (preset, family, seed) (e.g. tqdm).

    Returns:
        ``{"totals": {...}, "failures": [...], "problems": [...], ...}``: ``totals.false_garbage`` counts
        garbage verdicts of correct backends/variants; ``totals.faults[name]`` caught/localized counts.
    """
    if isinstance(problems, bool) or not isinstance(problems, int) or problems < 1:
        raise ValueError(f"problems must be a positive int, got {problems!r}")
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"families must be among {FAMILIES}, got {bad}")
    if not list(presets) or not list(families):  # 0 problems would read as a clean sweep
        raise ValueError(f"presets and families must each name at least one, got {list(presets)} x {list(families)}")
    variants = all_variants()
    correct = list(CORRECT_BACKENDS) + [v.name for v in variants]
    saturating = [cls() for cls in SATURATING_VARIANTS]
    required = [cls() for cls in FAULTS]
    subtle = [cls() for cls in SUBTLE_FAULTS]
    faults = required + subtle
    order = correct + [v.name for v in saturating] + [f.name for f in faults]
    verdicts: dict[str, Counter] = {name: Counter() for name in order}
    fault_stats = {f.name: {"caught": 0, "localized": 0, "localized_exactly": 0, "not_applicable": 0, "of": 0,
                            "required": f in required, "envelope_judged": f.envelope_judged, "shared": f.shared}
                   for f in faults}
    failures, rows = [], []
    highs: dict[str, dict] = {}   # per backend: the largest value of each thresholded statistic
    lows: dict[str, dict] = {}    # per fault: the smallest detection margin
    jobs = [(p, fam, seed + i) for p in presets for fam in families for i in range(problems)]
    with one_thread_for_small(device):
        for preset, family, s in (progress(jobs) if progress is not None else jobs):
            prob = problem_of(preset, family, s, device)
            res = check(prob, list(CORRECT_BACKENDS) + variants + saturating + faults, keep_output=False)
            where = {"preset": preset, "family": family, "seed": s, "tokens": prob.tokens,
                     "replay": replay_command(prob)}
            for name in correct:
                if res.reports[name].diff is not None:
                    _extremes(highs, name, _stats(res.reports[name], res.envelope), max)
                v = res.reports[name].verdict
                verdicts[name][str(v)] += 1
                if v in (Verdict.GARBAGE, Verdict.ERROR):
                    failures.append({**where, "backend": name, "kind": f"false {v}",
                                     "reasons": res.reports[name].reasons or [res.reports[name].reason]})
            for v in saturating:
                verdicts[v.name][str(res.reports[v.name].verdict)] += 1
                if res.reports[v.name].diff is not None:
                    _extremes(highs, v.name, _stats(res.reports[v.name], res.envelope), max)
            for f in faults:
                rep = res.reports[f.name]
                verdicts[f.name][str(rep.verdict)] += 1
                st = fault_stats[f.name]
                out = judge_fault(f, prob, rep)
                if out.applicable and out.caught:
                    _extremes(lows, f.name, _fault_margin(f, prob, rep), min)
                st["of"] += 1
                st["not_applicable"] += not out.applicable
                st["caught"] += out.caught
                st["localized"] += out.localized
                st["localized_exactly"] += out.exact
                if not out.localized:
                    failures.append({**where, "replay": f"{where['replay']} --faults --backend {f.name}",
                                     "backend": f.name, "kind": "missed" if not out.caught else "mislocalized",
                                     "verdict": str(rep.verdict), "shared": rep.shared,
                                     "experts": {"expected": sorted(f.expected_experts(prob)),
                                                 "flagged": rep.flagged_experts},
                                     "tokens": {"expected": sorted(f.expected_tokens(prob)),
                                                "flagged": rep.flagged_tokens}})
            rows.append([preset, family, prob.tokens, s,
                         "".join(_LETTER.get(res.reports[n].verdict, "?") for n in order)])
    false_garbage = sum(verdicts[n][str(Verdict.GARBAGE)] for n in correct)
    required_missed = sum(st["of"] - st["localized"] for st in fault_stats.values())
    return {
        "presets": list(presets), "families": list(families), "problems_per_family": problems,
        "seeds": {"first": seed, "last": seed + problems - 1, "rule": "problem_of(preset, family, seed)"},
        "device": str(device), "torch_threads": 1 if torch.device(device).type == "cpu" else None,
        "backends": {"correct": correct, "saturating": [v.name for v in saturating],
                     "faults_required": [f.name for f in required],
                     "faults_envelope_judged": [f.name for f in subtle]},
        "token_recall": TOKEN_RECALL,
        "rules": {k: getattr(rules, k) for k in rules.__all__ if k.isupper()},
        "statistics": {"correct_backends_max": highs, "faults_min_margin": lows},
        "totals": {"problems": len(jobs), "false_garbage": false_garbage,
                   "false_errors": sum(verdicts[n][str(Verdict.ERROR)] for n in correct),
                   "required_faults_not_localized": required_missed,
                   "verdicts": {n: dict(c) for n, c in verdicts.items()}, "faults": fault_stats},
        "failures": failures,
        "problem_columns": ["preset", "family", "tokens", "seed", "verdict letters (c/d/g/s/e) in backend order: "
                            + ", ".join(order)],
        "problems": rows,
    }
