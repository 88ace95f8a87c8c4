"""``sm120lab check``: diff every MoE backend against the exact reference on one problem.

Exit status:
  0  every backend that ran is correct or degraded
  1  a backend is garbage, a backend crashed (verdict ``error``), every requested backend was
     skipped (accept that with ``--allow-skips``), or, with ``--faults``, a planted fault was not
     caught or not localized (the faults' own garbage is expected and does not count)
  2  bad arguments (one line naming the argument): among them ``--faults``/``--sweep`` with
     ``--no-probes`` (faults are localized through the probes), and a ``--preset``/``--tokens``
     whose estimated memory exceeds what the device has free (estimated before allocating)

``--sweep N`` runs the false-alarm sweep instead (``sm120lab.moe.sweep``): N problems per preset
(``--preset a,b``) and routing family (``--routing all`` or a comma list), correct-but-different
backends and planted faults; exit 1 on any false ``garbage`` or a required fault not localized.
The problem is drawn on the GPU when torch sees one (``--device`` overrides); every report carries
the problem's seed and a command that redraws it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sm120lab.cmdline import SEED_MAX, seed_arg


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="diff MoE backends against the exact NVFP4 reference",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny", help="MoE shape preset (default tiny; see --list); "
                                                    "with --sweep a comma list")
    p.add_argument("--tokens", type=int, default=None, help="tokens T (default: the preset's)")
    p.add_argument("--take-tokens", type=int, default=None, metavar="N",
                   help="use the first N of the drawn tokens (how recorded multi-T runs were made)")
    p.add_argument("--routing", default="uniform", help="uniform | zipf | hot | sparse | single "
                                                        "(with --sweep: 'all' or a comma list, mostly-empty too)")
    p.add_argument("--backend", action="append", default=None, metavar="NAME",
                   help="backend to run (repeatable; default: all registered)")
    p.add_argument("--seed", type=seed_arg, default=0, help="problem seed (with --sweep: the first seed)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda if available")
    p.add_argument("--no-probes", action="store_true", help="skip the per-slot probes (no per-expert attribution)")
    p.add_argument("--faults", action="store_true", help="also run the planted faulty backends")
    p.add_argument("--allow-skips", action="store_true", help="exit 0 even when every requested backend was skipped")
    p.add_argument("--sweep", type=int, default=None, metavar="N",
                   help="run the false-alarm sweep with N problems per preset and routing family")
    p.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                   help="merge sweep records (--sweep --json files run apart) into --json; exit 1 if any failed")
    p.add_argument("--jobs", type=int, default=1, metavar="J",
                   help="with --sweep: worker processes (CPU: one torch thread each; default 1)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the full report (with envinfo) here")
    p.add_argument("--list", action="store_true", help="list presets, routings and backends, then exit")
    p.set_defaults(func=run)


UNVERIFIED = "unverified on SM120 hardware"


def _fmt(v) -> str:
    """Floats for humans: 4 significant digits (``a1_gscale: 104.4``), inf/nan spelled; others as str."""
    if isinstance(v, float):
        return str(v) if v != v or v in (float("inf"), float("-inf")) else f"{v:.4g}"
    return str(v)


def _pairs(d: dict) -> str:
    """``key: value, ...`` with every float rounded by :func:`_fmt`."""
    return ", ".join(f"{k}: {_fmt(v)}" for k, v in d.items())


def _tagged(line: str, verified: bool) -> str:
    """Append "[unverified on SM120 hardware]" unless the backend is verified or the line says so already."""
    return line if verified or UNVERIFIED in line else f"{line} [{UNVERIFIED}]"


def _json_target(path: str | None) -> Path | None:
    """Refuse an unwritable ``--json`` before the run (one line), not after it.

    Missing parent directories are created by the writer, so the nearest existing ancestor must be
    a writable directory.
    """
    if path is None:
        return None
    from sm120lab.atomic_io import real_target

    target = Path(path)
    if target.is_dir():
        raise SystemExit(f"--json: expected a file path, got the directory {path!r}")
    try:
        real_target(target)  # a device node, FIFO or socket (also behind a link) is refused before the run
    except OSError as exc:
        raise SystemExit(f"--json: {path!r}: {exc.strerror or exc}") from None
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SystemExit(f"--json: expected a path in a directory, but {str(ancestor)!r} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise SystemExit(f"--json: {path!r} is not writable (permission denied)")
    return target


def _write_json(target: Path, payload: dict, args, env: dict | None = None) -> None:
    """Write ``payload`` with its command and environment (``env``: one read earlier, e.g. when a sweep
    started; default: read now)."""
    from sm120lab.atomic_io import write_json_atomic
    from sm120lab.cmdline import command_line
    from sm120lab.envinfo import collect

    payload["command"] = command_line("sm120lab", getattr(args, "argv", sys.argv[1:]))
    payload["env"] = env if env is not None else collect()
    try:
        write_json_atomic(target, payload)
    except OSError as exc:
        raise SystemExit(f"--json: could not write {str(target)!r}: {exc.strerror or exc}") from None
    print(f"wrote {target}")


def _run_sweep(args, device: str, target: Path | None) -> int:
    from tqdm.auto import tqdm

    from sm120lab.moe.sweep import FAMILIES, false_alarm_sweep

    if args.sweep < 1:
        raise SystemExit(f"--sweep: expected a positive number of problems, got {args.sweep}")
    if args.jobs < 1:
        raise SystemExit(f"--jobs: expected a positive number of worker processes, got {args.jobs}")
    if args.seed + args.sweep - 1 > SEED_MAX:
        raise SystemExit(f"--seed: the sweep's seeds {args.seed}..{args.seed + args.sweep - 1} pass 2**63-1; "
                         f"expected a first seed <= {SEED_MAX - args.sweep + 1}")
    presets = [p.strip() for p in args.preset.split(",") if p.strip()]
    families = list(FAMILIES) if args.routing.strip() == "all" else [r.strip() for r in args.routing.split(",")
                                                                     if r.strip()]
    empty = (f"--preset: expected a preset name or a comma list of them, got {args.preset!r}" if not presets else
             f"--routing: expected 'all' or a comma list of {', '.join(FAMILIES)}, got {args.routing!r}"
             if not families else None)
    if empty:  # an empty list would be a clean sweep of 0 problems
        print(empty, file=sys.stderr)
        return 2
    from sm120lab.envinfo import collect

    env = collect()  # the code and packages the sweep runs with (the commit may move during a long sweep)
    try:
        total = len(presets) * len(families) * args.sweep
        record = false_alarm_sweep(presets, families, args.sweep, args.seed, device, jobs=args.jobs,
                                   progress=lambda xs: tqdm(xs, desc="sweep", unit="problem", total=total,
                                                            file=sys.stderr))
    except ValueError as exc:
        print(f"bad arguments: {exc}", file=sys.stderr)
        return 2
    tot = record["totals"]
    print(f"false-alarm sweep: {tot['problems']} problems ({', '.join(presets)} x {', '.join(families)}, "
          f"{args.sweep} each, seeds {args.seed}..{args.seed + args.sweep - 1}, {device})")
    for name, counts in tot["verdicts"].items():
        print(f"  {name:32s} " + " ".join(f"{v}={n}" for v, n in sorted(counts.items())))
    print(f"false garbage: {tot['false_garbage']}; required faults not caught and localized: "
          f"{tot['required_faults_not_localized']}")
    for f in record["failures"][:10]:
        print(f"  FAILURE {f['kind']}: {f['backend']} on {f['replay']}", file=sys.stderr)
    if target is not None:
        _write_json(target, record, args, env)
    return _sweep_exit(tot)


def _sweep_exit(totals: dict) -> int:
    """1 when a sweep record's totals hold a false garbage or error or a required fault not caught and localized."""
    return 1 if totals["false_garbage"] or totals["false_errors"] or totals["required_faults_not_localized"] else 0


def _merge(args, target: Path | None) -> int:
    """``--merge``: read the sweep records, merge them (:func:`sm120lab.moe.sweep.merge_sweeps`), write ``--json``."""
    import json

    from sm120lab.moe.sweep import merge_sweeps

    if target is None:
        print("--merge: expected --json FILE for the merged record", file=sys.stderr)
        return 2
    records = []
    for path in args.merge:
        try:
            records.append(json.loads(Path(path).read_text()))
        except OSError as exc:
            print(f"--merge: {path!r}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"--merge: {path!r} is not JSON ({exc})", file=sys.stderr)
            return 2
    try:
        record = merge_sweeps(records, [str(p) for p in args.merge])
    except ValueError as exc:
        print(f"--merge: {exc}", file=sys.stderr)
        return 2
    tot = record["totals"]
    print(f"merged {len(records)} sweep records: {tot['problems']} problems; false garbage {tot['false_garbage']}, "
          f"false errors {tot['false_errors']}, required faults not caught and localized "
          f"{tot['required_faults_not_localized']}")
    _write_json(target, record, args)
    return _sweep_exit(tot)


def _argument_error(args) -> str | None:
    """One line for argument combinations that cannot give a meaningful result, else None."""
    if args.no_probes and args.faults:
        return ("--faults with --no-probes: planted faults are localized to experts through the per-slot "
                "probes; drop --no-probes")
    if args.no_probes and args.sweep is not None:
        return "--sweep with --no-probes: the sweep localizes faults through the per-slot probes; drop --no-probes"
    return None


def _memory_error(args, device: str) -> str | None:
    """One line when the preset(s) and --tokens do not fit in ``device``'s free memory (estimated first)."""
    from sm120lab.moe.problem import PRESETS, memory_error

    presets = [p.strip() for p in args.preset.split(",")] if args.sweep is not None else [args.preset]
    for preset in presets:
        if preset.strip().lower() in PRESETS:  # an unknown one is named by make_moe_problem
            tokens = None if args.sweep is not None or args.routing == "single" else args.tokens
            if isinstance(tokens, int) and tokens < 1:
                return None  # make_moe_problem names it
            msg = memory_error(preset, tokens, device)
            if msg:
                return msg
    return None


#: the first word of :func:`sm120lab.moe.make_moe_problem`'s errors -> the option that set it
_PROBLEM_FLAGS = {"preset": "--preset", "tokens": "--tokens", "routing": "--routing", "routing='single'": "--routing",
                  "seed": "--seed", "config:": "--preset"}


def _problem_error(exc: Exception) -> str:
    """One line naming the option behind a problem-drawing error (``--tokens: tokens must be ...``)."""
    msg = " ".join(str(exc).split())
    flag = _PROBLEM_FLAGS.get(msg.split(" ", 1)[0] if msg else "")
    return f"{flag}: {msg}" if flag else f"bad arguments: {msg}"


def run(args) -> int:
    import torch

    from sm120lab.moe import PRESETS, ROUTINGS, make_moe_problem
    from sm120lab.moe.backends import all_backends
    from sm120lab.moe.harness import default_device
    from sm120lab.moe.verdict import Verdict

    if args.list:
        print("presets:  " + ", ".join(f"{n} (E={c.E}, k={c.k}, H={c.H}, I={c.I})" for n, c in PRESETS.items()))
        print("routings: " + ", ".join(ROUTINGS))
        for name, b in all_backends().items():
            print(f"backend:  {name:24s} {b.summary}")
        return 0
    device = args.device or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    for err in (_argument_error(args), _memory_error(args, device)):
        if err:
            print(err, file=sys.stderr)
            return 2
    target = _json_target(args.json)
    if args.merge is not None:
        return _merge(args, target)
    if args.sweep is not None:
        return _run_sweep(args, device, target)
    from sm120lab.moe.faults import all_faults

    names = args.backend
    known = all_backends()
    planted = all_faults()
    fault_names = [f.name for f in planted]
    if names:
        bad = [n for n in names if n not in known and not (args.faults and n in fault_names)]
        if bad:
            hint = ("; planted faults are run with --faults" if any(n in fault_names for n in bad) else "")
            print(f"--backend: unknown {bad}; known: {', '.join(known)}{hint}", file=sys.stderr)
            return 2
    try:
        problem = make_moe_problem(args.preset, tokens=args.tokens, routing=args.routing, seed=args.seed, device=device)
    except (ValueError, TypeError) as exc:
        print(_problem_error(exc), file=sys.stderr)
        return 2
    if args.take_tokens is not None:
        try:
            problem = problem.take_tokens(args.take_tokens)
        except (ValueError, TypeError) as exc:
            print(f"--take-tokens: {exc}", file=sys.stderr)
            return 2
    from tqdm.auto import tqdm

    from sm120lab.moe.harness import check, replay_command

    named_faults = [n for n in names or () if n in fault_names and n not in known]
    backends = [known[n] for n in names if n in known] if names else list(known.values())
    requested = {b.name for b in backends}
    faults = []
    if args.faults:
        from sm120lab.moe.faults import judge_fault

        faults = [f for f in planted if not named_faults or f.name in named_faults]
        backends = backends + faults
    result = check(problem, backends, probes=not args.no_probes, keep_output=False,
                   progress=lambda xs: tqdm(xs, desc="backends", unit="backend", file=sys.stderr))
    env = result.envelope
    print(f"problem: {_pairs(problem.describe())}")
    print(f"replay:  {replay_command(problem)}")
    print(f"envelope: e_a={_fmt(env.e_a)} e_w={_fmt(env.e_w)} correct<={_fmt(env.correct_rel)} "
          f"garbage>{_fmt(env.garbage_rel)} (W4A4 backends >{_fmt(env.garbage_rel_w4a4)}; cells: deviation from the "
          f"nearest expected output correct<={env.dev_correct} garbage>{env.dev_garbage}; worst weight-only cell "
          f"deviation {_fmt(env.cell_w_dev)})")
    for rep in result.reports.values():
        if rep.diff is None:
            print(_tagged(f"  {rep.name:28s} {rep.verdict!s:8s} {rep.reason}", rep.verified))
            continue
        d = rep.diff
        print(_tagged(f"  {rep.name:28s} {rep.verdict!s:8s} rel={_fmt(d.rel_fro)} cos={d.cosine:.5f} "
                      f"max_abs={_fmt(d.max_abs)} nan={d.nan} untouched={d.untouched} zero_rows={len(d.zero_rows)}"
                      + (" shared-by-all-experts" if rep.shared else ""), rep.verified))
        if rep.verdict != Verdict.CORRECT:
            for reason in rep.reasons:
                print(f"      - {reason}")
    if target is not None:
        _write_json(target, result.to_json(), args)
    reports = result.reports.values()
    failed = []
    garbage = [r.name for r in reports if r.verdict == Verdict.GARBAGE and r.name in requested]
    if garbage:
        failed.append(f"GARBAGE: {', '.join(garbage)}")
    crashed = [r.name for r in reports if r.verdict == Verdict.ERROR]
    if crashed:
        failed.append(f"ERROR (backend crashed): {', '.join(crashed)}")
    if requested and all(result.reports[n].verdict == Verdict.SKIPPED for n in requested) and not args.allow_skips:
        failed.append(f"SKIPPED: every requested backend was skipped ({', '.join(sorted(requested))}); "
                      "pass --allow-skips to accept that")
    if faults:
        outcomes = {f.name: judge_fault(f, problem, result.reports[f.name]) for f in faults}
        missed = [n for n, o in outcomes.items() if not o.caught]
        wrong = [n for n, o in outcomes.items() if o.caught and not o.localized]
        if missed:
            failed.append(f"MISSED planted fault(s): {', '.join(missed)}")
        if wrong:
            failed.append(f"MISLOCALIZED planted fault(s): {', '.join(wrong)}")
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0
