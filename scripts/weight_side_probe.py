#!/usr/bin/env python3
"""Can a backend that computes with *other* legitimate NVFP4 weights be told from a broken one? (issue 32, item 1)

    PYTHONPATH=. python3 scripts/weight_side_probe.py run tiny 41000000 900 OUT.jsonl   # one line per problem
    PYTHONPATH=. python3 scripts/weight_side_probe.py summary 'OUT*.jsonl'             # the table of notes/correctness.md

Per problem (``sweep.problem_of(preset, family, seed)``, the families in turn), with U the bf16-weight forward and
the weight half of the null family (the checkpoint itself and each re-quantizer of
``variants.WEIGHT_QUANTIZER_VARIANTS``), for every candidate O: each member (judged by the others: leave-one-out),
the quantizers in no member (``WEIGHT_OUT_OF_FAMILY``) and every planted fault (per-slot probes through
``harness.run_backend``), it records

- ``cell_ratio``: max over (token, slot) cells of ``d(O, U) / max_m d(W_m, U)``, d the harness's floored deviation
  (``metrics.cell_rel``, floor ``DEV_FLOOR`` x the median over the expert's cells);
- ``cell_ratio_med``: the median of that ratio over the cells;
- ``layer_ratio``: ``rel(O, U) / max_m rel(W_m, U)`` on the combined outputs;
- ``vsC_cell`` / ``vsC_layer``: how far O is from the checkpoint's own output (largest cell, whole layer);
- ``vsC_min_e``: the smallest pooled deviation from the checkpoint over the routed experts (``metrics.expert_pool``;
  0: some expert reproduces the checkpoint exactly).

``summary`` prints, per candidate, the largest ratios of the legitimate ones and the smallest of the faults.
"""

from __future__ import annotations

import collections
import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _sq(a, b=None):
    """Per (token, slot) cell: (||a - b||^2 or ||a||^2) as float64 numpy [T, k]."""
    x = a.double() if b is None else a.double() - b.double()
    return (x * x).sum(dim=-1).numpy()


def _rel(a, b) -> float:
    return float((a - b).double().norm() / b.double().norm())


def run(preset: str, seed0: int, n: int, out_path: str) -> None:
    import numpy as np
    import torch

    from sm120lab.moe.envelope import weight_format_family
    from sm120lab.moe.faults import FAULTS, SUBTLE_FAULTS
    from sm120lab.moe.harness import _combine, reference_outputs, run_backend
    from sm120lab.moe.metrics import DEV_FLOOR, cell_rel, expert_pool
    from sm120lab.moe.sweep import FAMILIES, problem_of
    from sm120lab.moe.variants import WEIGHT_OUT_OF_FAMILY

    torch.set_num_threads(1)
    with open(out_path, "a") as out:
        for i in range(n):
            fam, seed = FAMILIES[i % len(FAMILIES)], seed0 + i
            p = problem_of(preset, fam, seed)
            ref, slots, _ = reference_outputs(p)
            wf = weight_format_family(p, slots.dtype)
            u = wf.pop("unquantized")
            u_main = _combine(u, p)
            ids = p.topk_ids.cpu().numpy()

            def dev(y, x, ids=ids):  # the harness's floored cell deviation (metrics.cell_rel)
                return cell_rel(_sq(y, x), _sq(x), ids, floor=DEV_FLOOR)

            members = {"checkpoint": slots, **wf}
            cands = {name: (y, _combine(y, p), "member") for name, y in members.items()}
            for cls in WEIGHT_OUT_OF_FAMILY:
                v = cls()
                y = v.forward(p, slots.dtype, per_slot=True)
                cands[v.name] = (y, _combine(y, p), "oof")
            for f in [c() for c in FAULTS + SUBTLE_FAULTS]:
                r = run_backend(f, p, ref, slots, keep_slots=True, keep_output=False)
                if r.status == "ran" and r.slots is not None:
                    cands[f.name] = (r.slots.to(slots.dtype), r.main.to(slots.dtype), "fault")
            m_cell = {m: dev(y, u) for m, y in members.items()}
            m_layer = {m: _rel(_combine(y, p), u_main) for m, y in members.items()}
            c_main = _combine(slots, p)
            rows = []
            for name, (y, y_main, kind) in cands.items():
                others = [m for m in members if m != name]
                ratio = dev(y, u) / np.max([m_cell[m] for m in others], axis=0)
                min_e = float(np.nanmin(expert_pool(_sq(y, slots), _sq(slots), ids, p.config.E)))
                rows.append({"kind": kind, "name": name, "cell_ratio": float(ratio.max()),
                             "cell_ratio_med": float(np.median(ratio)),
                             "layer_ratio": _rel(y_main, u_main) / max(m_layer[m] for m in others),
                             "vsC_cell": float(dev(y, slots).max()), "vsC_layer": _rel(y_main, c_main),
                             "vsC_min_e": min_e})
            out.write(json.dumps({"preset": preset, "family": fam, "seed": seed, "T": p.tokens, "rows": rows}) + "\n")
            out.flush()


def summary(pattern: str) -> None:
    by = collections.defaultdict(list)
    for fn in sorted(glob.glob(pattern)):
        for line in open(fn):
            d = json.loads(line)
            for r in d["rows"]:
                if r["kind"] != "fault" or r["vsC_cell"] > 0.5:  # a fault counts where it moved a cell past 0.5
                    by[(r["kind"], r["name"])].append(r)
    keys = ("cell_ratio", "cell_ratio_med", "layer_ratio")
    print("| candidate | kind | problems | " + " | ".join(keys) + " |\n|---|---|---|---|---|---|")
    for (kind, name), rs in sorted(by.items()):
        pick = min if kind == "fault" else max  # legitimate: the largest; faults: the smallest
        print(f"| {name} | {kind} | {len(rs)} | " + " | ".join(f"{pick(r[k] for r in rs):.2f}" for k in keys) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        raise SystemExit("usage: weight_side_probe.py run PRESET FIRST_SEED N OUT.jsonl | summary 'GLOB'")
