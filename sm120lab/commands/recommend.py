"""``sm120lab recommend``: what to set on an SM120/SM121 GPU, each item with its evidence.

    sm120lab recommend                                  # RTX PRO 6000, the seed's setup, newest vLLM
    sm120lab recommend --vllm 0.17.0                    # the same, for the vLLM release you run
    sm120lab recommend --vllm 0.34.0                    # its pinned FlashInfer unread: marked, nearest release read
    sm120lab recommend --gpu auto                       # this machine (GPU, driver, CUDA, packages)
    sm120lab recommend --gpu rtx-5090 --model qwen3-next-80b-a3b --tp 4 --pp 1 --users 4
    sm120lab recommend --gpu dgx-spark --json guide.json

It opens with one block to copy (install, exports, vllm serve, patch, verify, what to expect),
then every item with its evidence, then one row per --moe-backend choice of that vLLM release.

Evidence levels: sm120-run > h200-run > compile > emulation > source-reading. Items without an
SM120 run say "unverified on SM120 hardware"; archiving an SM120 run folder into data/runs
(`sm120lab archive`) lifts the items it measured.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help="what to set on SM120/SM121 (arch flags, versions, backend, patches)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", default="rtx-pro-6000", help="rtx-pro-6000 | rtx-5090 | dgx-spark | auto")
    p.add_argument("--model", default=None, help="model preset (default: the seed's qwen3.5-397b-a17b)")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default 2)")
    p.add_argument("--pp", type=int, default=None, help="pipeline-parallel size (default 2)")
    p.add_argument("--users", type=int, default=None, help="concurrent users (default 1)")
    p.add_argument("--vllm", default=None, metavar="VERSION",
                   help="the vLLM release to answer for (default: the newest recorded release whose vLLM, "
                        "FlashInfer and torch facts were all read from their wheels, in data/upstream; a release "
                        "whose pinned FlashInfer was not read answers with those facts marked unread)")
    p.add_argument("--topic", action="append", default=None,
                   help="only these topics (repeatable): archflags, versions, backend, patches, env, throughput, "
                        "verify, backends")
    p.add_argument("--runs", default=None, help="folder of archived run folders (default data/runs)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the items as JSON")
    p.add_argument("--markdown", action="store_true", help="print a markdown table instead (as in the README)")
    p.add_argument("--update-readme", default=None, metavar="FILE",
                   help="rewrite the do-this block between <!-- dothis:start --> and <!-- dothis:end --> in FILE "
                        "and every item in docs/guide.md beside it (a FILE with only <!-- guide:start --> and "
                        "<!-- guide:end --> gets the block and every item there)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import recommend
    from ..atomic_io import write_json_atomic
    from ..cmdline import command_line

    machine = None
    gpu = args.gpu
    if gpu == "auto":
        from ..envinfo import collect
        from ..recommend.facts import detect_gpu

        machine = collect()
        try:
            gpu = detect_gpu(machine)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    elif gpu not in [g.value for g in recommend.GPU]:
        raise SystemExit(f"--gpu: expected rtx-pro-6000, rtx-5090, dgx-spark or auto, got {gpu!r}")
    if args.runs is not None:
        from pathlib import Path

        if not Path(args.runs).is_dir():
            raise SystemExit(f"--runs: expected a folder of run folders, got {args.runs!r}")
    try:
        ans = recommend.answer(gpu, args.runs, model=args.model, tp=args.tp, pp=args.pp, users=args.users,
                               vllm=args.vllm, machine=machine)
        items = recommend.section(ans.items, args.topic) if args.topic else ans.items
    except ValueError as exc:
        msg = str(exc)
        raise SystemExit(msg if msg.startswith("--") else f"--{msg}") from None
    setup = ans.setup.to_dict()
    title = (f"sm120lab recommend: {gpu}, {setup['model']}, TP{setup['tp']} PP{setup['pp']}, "
             f"{setup['users']} user(s), vLLM {ans.block.vllm}")
    if args.update_readme:
        from pathlib import Path

        from ..atomic_io import write_text_atomic
        from ..recommend.render import update_readme

        try:
            writes = update_readme(args.update_readme, items, ans.block)
            for path, text in writes:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise SystemExit(f"--update-readme: {args.update_readme}: {getattr(exc, 'strerror', None) or exc}") from None
        if len(writes) == 2:
            print(f"updated the do-this block in {writes[0][0]}")
        print(f"updated the guide block in {writes[-1][0]} ({len(items)} items)")
        return 0
    if args.markdown:
        print(ans.block.to_markdown() + "\n\n" + recommend.to_markdown(items))
    else:
        import shutil

        width = shutil.get_terminal_size((100, 24)).columns
        print(ans.block.to_text(width) + "\n")
        recommend.show(items, title=title, width=width)
    if args.json:
        doc = ans.to_json()
        doc["items"] = [it.to_dict() for it in items]
        doc["command"] = command_line("sm120lab", None)
        if machine is not None:
            doc["machine"] = machine
        try:
            write_json_atomic(args.json, doc)
        except OSError as exc:
            raise SystemExit(f"--json: cannot write {args.json}: {exc.strerror or exc}") from None
        print(f"wrote {args.json} ({len(items)} items)")
    return 0
