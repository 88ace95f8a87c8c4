"""Per-expert weight-side stats (issue 32; notes/correctness.md, "Weight side: a per-expert test, tried").

    PYTHONPATH=. python3 scripts/weight_expert_probe.py tiny 70000000 600 OUT.jsonl   # one line per problem

Per problem (the sweep families in turn) and candidate O (weight members, quantizers in no member, planted faults), and routed expert e:
pC = pool_e(O, C) (C the checkpoint), pM = min over members m != O of pool_e(O, W_m) (C included),
pU = pool_e(O, U), bU = max over members m != O (C included) of pool_e(W_m, U), n = cells.
Also per candidate the cell-level: max and median of d(O,U)/max_m d(W_m,U)."""
import json
import sys

import numpy as np
import torch

sys.path.insert(0, '.')
from sm120lab.moe.envelope import weight_format_family
from sm120lab.moe.faults import FAULTS, SUBTLE_FAULTS
from sm120lab.moe.harness import reference_outputs, run_backend
from sm120lab.moe.metrics import DEV_FLOOR, cell_rel, expert_pool
from sm120lab.moe.sweep import FAMILIES, problem_of
from sm120lab.moe.variants import WEIGHT_OUT_OF_FAMILY

torch.set_num_threads(1)

def sq(a, b=None):
    x = a.double() if b is None else a.double() - b.double()
    return (x * x).sum(dim=-1).numpy()

preset, seed0, n, outp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(outp, 'a') as out:
    for i in range(n):
        fam, seed = FAMILIES[i % len(FAMILIES)], seed0 + i
        p = problem_of(preset, fam, seed)
        ref, slots, _ = reference_outputs(p)
        wf = weight_format_family(p, slots.dtype)
        u = wf.pop('unquantized')
        ids = p.topk_ids.cpu().numpy()
        E = p.config.E
        members = {'checkpoint': slots, **wf}
        cands = {name: (y, 'member', []) for name, y in members.items()}
        for cls in WEIGHT_OUT_OF_FAMILY:
            v = cls()
            cands[v.name] = (v.forward(p, slots.dtype, per_slot=True), 'oof', [])
        for f in [c() for c in FAULTS + SUBTLE_FAULTS]:
            r = run_backend(f, p, ref, slots, keep_slots=True, keep_output=False)
            if r.status == 'ran' and r.slots is not None:
                cands[f.name] = (r.slots.to(slots.dtype), 'fault', sorted(f.expected_experts(p)) if not f.shared else 'shared')
        mU = {m: expert_pool(sq(y, u), sq(u), ids, E) for m, y in members.items()}
        dU = {m: cell_rel(sq(y, u), sq(u), ids, floor=DEV_FLOOR) for m, y in members.items()}
        routed = np.unique(ids)
        cnt = np.bincount(ids.reshape(-1), minlength=E)
        rows = []
        for name, (y, kind, exp) in cands.items():
            others = [m for m in members if m != name]
            pC = expert_pool(sq(y, slots), sq(slots), ids, E)
            pM = np.fmin.reduce([expert_pool(sq(y, members[m]), sq(members[m]), ids, E) for m in others])
            pU = expert_pool(sq(y, u), sq(u), ids, E)
            bU = np.fmax.reduce([mU[m] for m in others])
            cr = cell_rel(sq(y, u), sq(u), ids, floor=DEV_FLOOR) / np.max([dU[m] for m in others], axis=0)
            vsC = cell_rel(sq(y, slots), sq(slots), ids, floor=DEV_FLOOR)
            rows.append({'kind': kind, 'name': name, 'exp': exp, 'cr_max': float(cr.max()), 'cr_med': float(np.median(cr)),
                         'vsC_cell': float(vsC.max()),
                         'e': [[int(e), int(cnt[e]), float(pC[e]), float(pM[e]), float(pU[e]), float(bU[e])] for e in routed]})
        out.write(json.dumps({'preset': preset, 'family': fam, 'seed': seed, 'T': p.tokens, 'rows': rows}) + '\n')
        out.flush()
