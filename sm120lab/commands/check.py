"""``sm120lab check``: diff every MoE backend against the exact reference on one problem.

Exit status 1 if any backend is ``garbage`` (2 for bad arguments), else 0. ``--faults`` adds the
planted faulty backends (their garbage then does not count towards the exit status).
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="diff MoE backends against the exact NVFP4 reference",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny", help="MoE shape preset (default tiny; see --list)")
    p.add_argument("--tokens", type=int, default=None, help="tokens T (default: the preset's)")
    p.add_argument("--routing", default="uniform", help="uniform | zipf | hot | sparse | single")
    p.add_argument("--backend", action="append", default=None, metavar="NAME",
                   help="backend to run (repeatable; default: all registered)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda if available")
    p.add_argument("--no-probes", action="store_true", help="skip the per-slot probes (no per-expert attribution)")
    p.add_argument("--faults", action="store_true", help="also run the planted faulty backends")
    p.add_argument("--json", default=None, metavar="FILE", help="write the full report (with envinfo) here")
    p.add_argument("--list", action="store_true", help="list presets, routings and backends, then exit")
    p.set_defaults(func=run)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "inf" if v == float("inf") else f"{v:.3g}"
    return str(v)


def run(args) -> int:
    import torch

    from sm120lab.moe import PRESETS, ROUTINGS, make_moe_problem
    from sm120lab.moe.backends import all_backends

    if args.list:
        print("presets:  " + ", ".join(f"{n} (E={c.E}, k={c.k}, H={c.H}, I={c.I})" for n, c in PRESETS.items()))
        print("routings: " + ", ".join(ROUTINGS))
        for name, b in all_backends().items():
            print(f"backend:  {name:24s} {b.summary}")
        return 0
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    names = args.backend
    known = all_backends()
    if names:
        bad = [n for n in names if n not in known]
        if bad:
            print(f"--backend: unknown {bad}; known: {', '.join(known)}", file=sys.stderr)
            return 2
    try:
        problem = make_moe_problem(args.preset, tokens=args.tokens, routing=args.routing, seed=args.seed, device=device)
    except (ValueError, TypeError) as exc:
        print(f"bad arguments: {exc}", file=sys.stderr)
        return 2
    from tqdm.auto import tqdm

    from sm120lab.moe.harness import check
    from sm120lab.moe.verdict import DEV_CORRECT, DEV_GARBAGE

    backends = list(names) if names else list(known)
    fault_names: set[str] = set()
    if args.faults:
        from sm120lab.moe.faults import all_faults

        faults = all_faults()
        fault_names = {f.name for f in faults}
        backends = [known[n] for n in backends] + faults
    result = check(problem, backends, probes=not args.no_probes, keep_output=False,
                   progress=lambda xs: tqdm(xs, desc="backends", unit="backend", file=sys.stderr))
    env = result.envelope
    print(f"problem: {problem.describe()}")
    print(f"envelope: e_a={_fmt(env.e_a)} e_w={_fmt(env.e_w)} correct<={_fmt(env.correct_rel)} "
          f"garbage>{_fmt(env.garbage_rel)} (cells: deviation from expected numerics correct<={DEV_CORRECT} "
          f"garbage>{DEV_GARBAGE})")
    for rep in result.reports.values():
        tag = "" if rep.verified else " [unverified on SM120 hardware]"
        if rep.diff is None:
            print(f"  {rep.name:28s} {rep.verdict:8s} {rep.reason}{tag}")
            continue
        d = rep.diff
        print(f"  {rep.name:28s} {rep.verdict:8s} rel={_fmt(d.rel_fro)} cos={d.cosine:.5f} max_abs={_fmt(d.max_abs)} "
              f"nan={d.nan} untouched={d.untouched} zero_rows={len(d.zero_rows)}{tag}")
        if rep.verdict != "correct":
            for reason in rep.reasons:
                print(f"      - {reason}")
    if args.json:
        from sm120lab.atomic_io import write_json_atomic
        from sm120lab.envinfo import collect

        payload = result.to_json()
        payload["command"] = "sm120lab check " + " ".join(sys.argv[2:] if len(sys.argv) > 1 else [])
        payload["env"] = collect()
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}")
    garbage = [r.name for r in result.reports.values() if r.verdict == "garbage" and r.name not in fault_names]
    if garbage:
        print(f"GARBAGE: {', '.join(garbage)}", file=sys.stderr)
        return 1
    return 0
