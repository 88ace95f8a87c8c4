"""The false-alarm sweep: many random problems, correct-but-different backends and planted faults.

For every preset and routing family, ``problems`` fresh problems (seeds ``seed, seed+1, ...``,
recorded) go through :func:`sm120lab.moe.harness.check` with

- the correct backends (``reference``, ``emulated-w4a4``, ``torch-bf16``) and the
  correct-but-different variants of :mod:`.variants` (bf16 accumulation, reversed expert order,
  FP8-rowwise weights, bf16 weights): any ``garbage`` is a FALSE ALARM;
- the planted faults of :mod:`.faults`: each required fault must be ``garbage``, flag exactly its
  expected experts, and flag only expected tokens, at least ``TOKEN_RECALL`` of them (a broken
  cell whose output is a few % of its expert's median norm can sit below the cell limit, which is
  relative to ``max(norm, 0.1 x median)``; ``localized_exactly`` counts exact token sets too);
  the subtle fault (gate/up swap) is counted, not required.

Routing families are the routings of :data:`sm120lab.moe.ROUTINGS` at the preset's default T,
plus ``mostly-empty``: sparse routing at T = 1..3, so nearly every expert is empty.

:func:`false_alarm_sweep` returns a JSON-ready dict (totals, every failure with a replay command,
and one compact line per problem); ``sm120lab check --sweep N`` runs it and writes it.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import torch

from .faults import FAULTS, SUBTLE_FAULTS
from .harness import check, replay_command
from .problem import ROUTINGS, make_moe_problem
from .variants import all_variants
from .verdict import Verdict

__all__ = ["CORRECT_BACKENDS", "FAMILIES", "TOKEN_RECALL", "false_alarm_sweep", "problem_of"]

#: a localized fault names at least this fraction of its expected tokens (and no other token)
TOKEN_RECALL = 0.9

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


@contextlib.contextmanager
def _one_thread(device: str):
    """Small CPU problems run ~10x faster on one thread when the cores are shared (no spin-waits)."""
    if torch.device(device).type != "cpu":
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


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
    variants = all_variants()
    correct = list(CORRECT_BACKENDS) + [v.name for v in variants]
    required = [cls() for cls in FAULTS]
    subtle = [cls() for cls in SUBTLE_FAULTS]
    faults = required + subtle
    order = correct + [f.name for f in faults]
    verdicts: dict[str, Counter] = {name: Counter() for name in order}
    fault_stats = {f.name: {"caught": 0, "localized": 0, "localized_exactly": 0, "of": 0, "required": f in required}
                   for f in faults}
    failures, rows = [], []
    jobs = [(p, fam, seed + i) for p in presets for fam in families for i in range(problems)]
    with _one_thread(device):
        for preset, family, s in (progress(jobs) if progress is not None else jobs):
            prob = problem_of(preset, family, s, device)
            res = check(prob, list(CORRECT_BACKENDS) + variants + faults, keep_output=False)
            where = {"preset": preset, "family": family, "seed": s, "tokens": prob.tokens,
                     "replay": replay_command(prob)}
            for name in correct:
                v = res.reports[name].verdict
                verdicts[name][str(v)] += 1
                if v in (Verdict.GARBAGE, Verdict.ERROR):
                    failures.append({**where, "backend": name, "kind": f"false {v}",
                                     "reasons": res.reports[name].reasons or [res.reports[name].reason]})
            for f in faults:
                rep = res.reports[f.name]
                verdicts[f.name][str(rep.verdict)] += 1
                st = fault_stats[f.name]
                st["of"] += 1
                caught = rep.verdict == Verdict.GARBAGE
                want_e, want_t = f.expected_experts(prob), f.expected_tokens(prob)
                got_t = set(rep.flagged_tokens)
                experts_ok = caught and set(rep.flagged_experts) == want_e
                exact = experts_ok and got_t == want_t
                localized = experts_ok and got_t <= want_t and len(got_t) >= TOKEN_RECALL * len(want_t)
                st["caught"] += caught
                st["localized"] += localized
                st["localized_exactly"] += exact
                if f in required and not localized:
                    failures.append({**where, "backend": f.name, "kind": "missed" if not caught else "mislocalized",
                                     "verdict": str(rep.verdict),
                                     "experts": {"expected": sorted(want_e), "flagged": rep.flagged_experts},
                                     "tokens": {"expected": sorted(want_t), "flagged": rep.flagged_tokens}})
            rows.append([preset, family, prob.tokens, s,
                         "".join(_LETTER.get(res.reports[n].verdict, "?") for n in order)])
    false_garbage = sum(verdicts[n][str(Verdict.GARBAGE)] for n in correct)
    required_missed = sum(st["of"] - st["localized"] for st in fault_stats.values() if st["required"])
    return {
        "presets": list(presets), "families": list(families), "problems_per_family": problems,
        "seeds": {"first": seed, "last": seed + problems - 1, "rule": "problem_of(preset, family, seed)"},
        "device": str(device), "torch_threads": 1 if torch.device(device).type == "cpu" else None,
        "backends": {"correct": correct, "faults_required": [f.name for f in required],
                     "faults_subtle": [f.name for f in subtle]},
        "token_recall": TOKEN_RECALL,
        "totals": {"problems": len(jobs), "false_garbage": false_garbage,
                   "false_errors": sum(verdicts[n][str(Verdict.ERROR)] for n in correct),
                   "required_faults_not_localized": required_missed,
                   "verdicts": {n: dict(c) for n, c in verdicts.items()}, "faults": fault_stats},
        "failures": failures,
        "problem_columns": ["preset", "family", "tokens", "seed", "verdict letters (c/d/g/s/e) in backend order: "
                            + ", ".join(order)],
        "problems": rows,
    }
