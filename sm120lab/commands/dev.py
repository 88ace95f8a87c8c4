"""``sm120lab dev``: developer tools that read real wheels and record facts into ``data/``.

    sm120lab dev api-check extract flashinfer-python 0.7.4 [--wheel PATH] [--out DIR]
    sm120lab dev api-check crosscheck flashinfer-python 0.7.4 [--out DIR]
    sm120lab dev api-check index [--out DIR]
    sm120lab dev arch-suffix [VERSION ...] [--jobs N] [--out DIR] [--ptx]
    sm120lab dev kernel-aot [--cc 120 121] [--jobs N] [--out FILE] [--sample] [--kernel K ...] [--same-sass-as T]
    sm120lab dev tile-tables [--derive sm120 sm121] [--aot FILE] [--out-dir DIR]
    sm120lab dev gpu-probes [--probe P ...] [--seed N] [--out FILE]

``api-check`` records the signatures and argument-layout facts of the FlashInfer / vLLM functions the
MoE adapters call (``data/api/``; see :mod:`sm120lab.devtools.api_check`). ``arch-suffix`` compares
FlashInfer's SM120 fused-MoE device code under 120a and 120f (``data/arch_suffix/``; see
:mod:`sm120lab.devtools.arch_suffix` and notes/arch_suffix.md). ``kernel-aot`` compiles every MoE kernel x
tile config ahead of time for sm_120/121 (``data/triton_aot/sm120.json``; :mod:`sm120lab.archflags.kernel_aot`).
``tile-tables`` derives the unverified SM12x tile tables (``data/tiles/<arch>.json``) from that AOT table.
``gpu-probes`` runs the compile lab's probes on this machine's CUDA GPU and checks their numbers
(``data/archflags/<gpu>_probes.json``; :mod:`sm120lab.archflags.gpu_run`; exit 1 when one fails).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cmdline import seed_arg

API_CHECK_PROG = "sm120lab dev api-check"
ARCH_SUFFIX_PROG = "sm120lab dev arch-suffix"
KERNEL_AOT_PROG = "sm120lab dev kernel-aot"
GPU_PROBES_PROG = "sm120lab dev gpu-probes"
#: the distributions api-check has targets for (``devtools.api_check.TARGETS``; kept here so --help stays light)
API_DISTS = ("flashinfer-python", "vllm")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dev", help="developer tools: record wheel APIs (api-check), 120a vs 120f (arch-suffix)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="dev_command", metavar="TOOL")

    a = s.add_parser("api-check", help="the Python APIs the MoE adapters call, read from the real wheels")
    acts = a.add_subparsers(dest="api_action", metavar="ACTION")
    ex = acts.add_parser("extract", help="record a wheel's API into data/api/<dist>-<version>.json")
    ex.add_argument("dist", choices=API_DISTS)
    ex.add_argument("version")
    ex.add_argument("--wheel", type=Path, help="a local .whl (default: download once into the cache)")
    ex.add_argument("--out", type=Path, help="folder to write into (default: data/api)")
    ex.set_defaults(func=run_api_extract)
    cx = acts.add_parser("crosscheck", help="compare a record with inspect.signature of the imported package "
                                            "(run where that version imports, e.g. PYTHONPATH=<unpacked wheel>)")
    cx.add_argument("dist", choices=API_DISTS)
    cx.add_argument("version")
    cx.add_argument("--out", type=Path, help="folder of the records (default: data/api)")
    cx.set_defaults(func=run_api_crosscheck)
    ix = acts.add_parser("index", help="rewrite data/api/index.json from the records and the adapters")
    ix.add_argument("--out", type=Path, help="folder (default: data/api)")
    ix.set_defaults(func=run_api_index)
    a.set_defaults(func=lambda args: (a.print_help(), 2)[1])

    x = s.add_parser("arch-suffix", help="does FlashInfer's SM120 MoE device code depend on 120a vs 120f?",
                     description="Preprocess FlashInfer's SM120 fused-MoE units under 120a and 120f and record "
                                 "data/arch_suffix/flashinfer-<version>.json (see notes/arch_suffix.md).")
    x.add_argument("versions", nargs="*", default=["0.6.5", "0.7.4"], help="flashinfer-python versions")
    x.add_argument("--jobs", type=int, default=2)
    x.add_argument("--out", default=None, help="folder (default data/arch_suffix)")
    x.add_argument("--ptx", action="store_true",
                   help="also compile one overflowing FINALIZE instantiation to PTX under both suffixes (minutes)")
    x.set_defaults(func=run_arch_suffix)

    k = s.add_parser("kernel-aot", help="compile every MoE kernel x tile config ahead of time for sm_120/121",
                     description="Compile the Triton MoE kernels for GPUs we do not have (no GPU needed) and record "
                                 "shared memory, registers, spills and the MMA each lowers to.")
    k.add_argument("--out", help="write the table (JSON) here (default: print it)")
    k.add_argument("--cc", type=int, nargs="+", default=[120, 121], help="compute capabilities (default 120 121)")
    k.add_argument("--quiet", action="store_true")
    k.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    k.add_argument("--sample", action="store_true", help="compile only the reproducibility sample")
    k.add_argument("--kernel", nargs="+", choices=("gemm", "decode", "frag"), default=None,
                   help="compile only these kernels' variants")
    k.add_argument("--same-sass-as", default=None, metavar="TABLE",
                   help="exit 1 unless every compiled row's SASS digest equals that table's (a refactor gate)")
    k.set_defaults(func=run_kernel_aot)

    t = s.add_parser("tile-tables", help="derive the unverified SM12x tile tables from the AOT table",
                     description="Write data/tiles/<arch>.json for every model preset at every T bucket from the "
                                 "recorded AOT table (unverified on SM120 hardware).")
    t.add_argument("--derive", nargs="+", default=["sm120", "sm121"], metavar="ARCH")
    t.add_argument("--aot", default=None, help="the AOT table (default data/triton_aot/sm120.json)")
    t.add_argument("--out-dir", default=None, help="folder (default data/tiles)")
    t.set_defaults(func=run_tile_tables)

    g = s.add_parser("gpu-probes", help="run the compile lab's probe kernels on this GPU and check their numbers",
                     description="Compile the probes this CUDA GPU supports, run them through the driver API and "
                                 "check each against a CPU reference (the FP4 MMA against its exact emulation).")
    g.add_argument("--out", default=None, help="write the results here (JSON, atomically, with envinfo)")
    g.add_argument("--probe", nargs="+", default=None)
    g.add_argument("--seed", type=seed_arg, default=0)
    g.set_defaults(func=run_gpu_probes)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _tool_argv(args: argparse.Namespace) -> list[str]:
    """The arguments after ``sm120lab dev <tool>`` (what the records store as their command)."""
    argv = list(getattr(args, "argv", []))
    return argv[2:] if argv[:1] == ["dev"] else argv


def run_api_extract(args: argparse.Namespace) -> int:
    import zipfile

    from ..cmdline import command_line
    from ..devtools.api_check import _write, extract, record_path

    wheel = args.wheel
    if wheel is None:
        from ..toolchains.pypi_wheels import download_wheel

        try:
            wheel = download_wheel(args.dist, args.version, quiet=False)
        except (RuntimeError, ValueError, OSError) as exc:
            raise SystemExit(f"version: could not get {args.dist}=={args.version}: {exc}") from None
    elif not Path(wheel).is_file() or not str(wheel).endswith(".whl"):
        raise SystemExit(f"--wheel: expected an existing .whl file, got {str(wheel)!r}")
    try:
        rec = extract(Path(wheel), args.dist, args.version, command_line(API_CHECK_PROG, _tool_argv(args)))
    except zipfile.BadZipFile as exc:
        raise SystemExit(f"--wheel: not a readable wheel ({exc})") from None
    out = record_path(args.dist, args.version, args.out)
    _write(out, rec)
    missing = [k for k, v in rec["targets"].items() if not v["found"]]
    print(f"wrote {out} ({len(rec['targets']) - len(missing)}/{len(rec['targets'])} targets, "
          f"{sum(f['found'] for f in rec['facts'].values())}/{len(rec['facts'])} facts)")
    for k in missing:
        print(f"  absent in {args.version}: {k} ({rec['targets'][k]['reason']})")
    return 0


def run_api_crosscheck(args: argparse.Namespace) -> int:
    import platform
    from importlib import metadata

    from ..cmdline import command_line
    from ..devtools.api_check import _write, crosscheck, load_record, record_path

    rec = load_record(args.dist, args.version, args.out)
    try:
        live_version = metadata.version(args.dist)
    except metadata.PackageNotFoundError:
        live_version = None
    if live_version != args.version:
        raise SystemExit(f"version: the importable {args.dist} is {live_version}, not {args.version}")
    result = crosscheck(rec)
    import torch

    rec["import_check"] = {"command": command_line(API_CHECK_PROG, _tool_argv(args)),
                           "python": platform.python_version(), "torch": str(torch.__version__),
                           "cuda_available": bool(torch.cuda.is_available()), "result": result}
    _write(record_path(args.dist, args.version, args.out), rec)
    bad = {k: v for k, v in result.items() if v.startswith("differs")}
    print(f"{args.dist} {args.version}: {len(result) - len(bad)}/{len(result)} targets agree with the import")
    for k, v in bad.items():
        print(f"  {k}: {v}")
    return 1 if bad else 0


def run_api_index(args: argparse.Namespace) -> int:
    from ..devtools.api_check import _write, api_dir, build_index

    out = api_dir(args.out) / "index.json"
    _write(out, build_index(args.out))
    print(f"wrote {out}")
    return 0


def run_arch_suffix(args: argparse.Namespace) -> int:
    from ..atomic_io import write_json_atomic
    from ..cmdline import command_line
    from ..devtools.arch_suffix import ptx_compare, scan
    from ..envinfo import collect
    from ..paths import data_dir

    out = Path(args.out) if args.out else data_dir() / "arch_suffix"
    cmd = command_line(ARCH_SUFFIX_PROG, _tool_argv(args))
    for v in args.versions:
        try:
            result = scan(v, jobs=args.jobs)
        except (ValueError, RuntimeError, FileNotFoundError, OSError) as exc:
            raise SystemExit(f"versions: scanning flashinfer-python {v} failed: {exc}") from None
        if args.ptx:
            try:
                result["ptx"] = ptx_compare(v)
            except (ValueError, RuntimeError, FileNotFoundError, OSError) as exc:
                raise SystemExit(f"--ptx: flashinfer-python {v} failed: {exc}") from None
        result["envinfo"] = collect()
        result["command"] = cmd
        path = write_json_atomic(out / f"flashinfer-{v}.json", result)
        print(f"{path}: all_identical={result['all_identical']}, control differs={not result['control']['identical']}")
    return 0


def run_kernel_aot(args: argparse.Namespace) -> int:
    import json
    import sys

    from ..archflags.kernel_aot import build_table, row_problems, sass_changes
    from ..atomic_io import write_json_atomic
    from ..cmdline import command_line
    from ..envinfo import collect

    if args.jobs < 1:
        raise SystemExit(f"--jobs: expected a positive integer, got {args.jobs}")
    old_rows = None
    if args.same_sass_as:
        try:
            old_rows = json.loads(Path(args.same_sass_as).read_text())["rows"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"--same-sass-as: expected an AOT table (JSON with rows), got {args.same_sass_as!r}: "
                             f"{exc}") from None
    doc = build_table(tuple(args.cc), sample=args.sample, progress=not args.quiet, n_jobs=args.jobs,
                      command=command_line(KERNEL_AOT_PROG, _tool_argv(args)), kinds=tuple(args.kernel or ()))
    if args.out:
        doc["env"] = collect()
        write_json_atomic(args.out, doc)
    else:
        print(json.dumps(doc, indent=1))
    bad = [(r["kernel"], r.get("config"), r.get("cc"), row_problems(r)) for r in doc["rows"] if row_problems(r)]
    for b in bad:
        print(f"FAIL {b}", file=sys.stderr)
    changed = [] if old_rows is None else sass_changes(old_rows, doc["rows"])
    for c in changed:
        print(f"SASS CHANGED {c}", file=sys.stderr)
    if old_rows is not None and not changed:
        print(f"same SASS as {args.same_sass_as}: {sum('config' in r for r in doc['rows'])} rows", file=sys.stderr)
    return 1 if bad or changed else 0


def run_tile_tables(args: argparse.Namespace) -> int:
    import json

    from ..kernels.plan import TILES_DIR, MoEShape, derive_aot_table
    from ..moe.problem import PRESETS

    aot_path = Path(args.aot) if args.aot else TILES_DIR.parent / "triton_aot" / "sm120.json"
    try:
        aot = json.loads(aot_path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--aot: expected a readable AOT table (JSON), got {str(aot_path)!r}: {exc}") from None
    out_dir = Path(args.out_dir) if args.out_dir else TILES_DIR
    shapes = {n: MoEShape.of(c.E, c.H, c.I, c.k) for n, c in PRESETS.items() if n not in ("tiny", "small")}
    for arch in args.derive:
        tab = derive_aot_table(aot, arch, shapes)
        print(f"{arch}: {len(tab.entries)} entries -> {tab.save(out_dir / f'{tab.device}.json')}")
    return 0


def run_gpu_probes(args: argparse.Namespace) -> int:
    from ..archflags.gpu_run import run_gpu_probes as run

    res = run(args.probe, args.seed)
    for r in res["results"]:
        status = "PASS" if r.get("ok") else "FAIL"
        print(f"{r['probe']:18} {r['target']:8} {status}  {r.get('error') or ''}"
              f"{'' if r.get('error') else {k: v for k, v in r.items() if k in ('max_abs_err', 'exact', 'runtime')}}")
    if args.out:
        from .. import envinfo
        from ..atomic_io import write_json_atomic
        from ..cmdline import command_line

        res["command"] = command_line(GPU_PROBES_PROG, _tool_argv(args))
        res["envinfo"] = envinfo.collect()
        write_json_atomic(args.out, res)
        print(f"wrote {args.out}")
    if not res["available"]:
        print(res["reason"])
        return 0
    return 0 if all(r.get("ok") for r in res["results"]) else 1
