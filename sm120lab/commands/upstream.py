"""``sm120lab upstream``: facts read from the real vLLM / FlashInfer / torch wheels, per version.

    sm120lab upstream record vllm 0.34.0 [--wheel PATH] [--force]
    sm120lab upstream record-all [--force]
    sm120lab upstream show vllm 0.34.0 [--json]
    sm120lab upstream check-install vllm==0.33.0 flashinfer-python==0.7.2.post1
    sm120lab upstream vllm-cache 0.26.0 [--wheel PATH] [--dest DIR] [--verify] [--pack DIR [--part-mb 34]]
    sm120lab upstream vllm-cache 0.26.0 --from-parts DIR [DIR ...] [--dest DIR]

``record`` reads one wheel (downloaded once into the cache, or ``--wheel``) and writes
``data/upstream/<dist>-<version>.json``; an existing different record is kept unless ``--force``.
``check-install`` runs pip's resolver offline over stub wheels of the recorded metadata (exit 1 when pip
refuses). See notes/upstream.md.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("upstream", help="facts read from the real vLLM/FlashInfer/torch wheels, per version",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="upstream_command", metavar="ACTION")
    r = s.add_parser("record", help="read one dist-version and write its record")
    r.add_argument("dist", help="vllm | flashinfer-python | torch | b12x | flashinfer-cubin | ...")
    r.add_argument("version", help="an exact version, e.g. 0.34.0")
    r.add_argument("--wheel", help="read this .whl instead of downloading")
    r.add_argument("--force", action="store_true", help="replace an existing record that differs")
    r.set_defaults(func=run_record)
    a = s.add_parser("record-all", help="record every version the workbook keeps")
    a.add_argument("--force", action="store_true", help="replace existing records that differ")
    a.set_defaults(func=run_record_all)
    w = s.add_parser("show", help="print one record")
    w.add_argument("dist")
    w.add_argument("version")
    w.add_argument("--json", action="store_true", help="the whole record as JSON")
    w.set_defaults(func=run_show)
    c = s.add_parser("check-install", help="does pip install these together? (offline, recorded metadata)")
    c.add_argument("requirements", nargs="+", help="PEP 508 requirements, e.g. vllm==0.33.0")
    c.set_defaults(func=run_check)
    v = s.add_parser("vllm-cache", help="vLLM's own Marlin MoE path from a wheel, for machines without vLLM",
                     description="Extract vLLM's Python and its two op extensions from a real vLLM wheel into a "
                                 "hash-checked cache that `check --backend vllm-marlin` and `bench moe` run from "
                                 "where `import vllm` fails (sm120lab.moe.vllm_wheel).")
    v.add_argument("version", help="the vLLM release, e.g. 0.26.0 (its wheel pins the torch it runs with)")
    v.add_argument("--wheel", help="a local vLLM .whl (default: pip download it from the index this machine reaches)")
    v.add_argument("--dest", help="cache folder (default: $SM120LAB_VLLM_CACHE or <cache>/vllm-wheel)")
    v.add_argument("--verify", action="store_true", help="only check an existing cache, every file's sha256")
    v.add_argument("--pack", metavar="DIR", help="also write the cache as xz parts into DIR/partNN/ (to carry it)")
    v.add_argument("--part-mb", type=float, default=34.0, help="largest part, MiB (default 34)")
    v.add_argument("--from-parts", nargs="+", metavar="DIR",
                   help="build the cache from parts written by --pack (any folders holding them), checked by sha256")
    v.set_defaults(func=run_vllm_cache)
    f = s.add_parser("full-resolve", help="run pip's real resolver over a vLLM release's whole dependency tree "
                     "(network) and record the result",
                     description="pip install --dry-run --report of vllm==V with its exact FlashInfer and torch "
                                 "pins, on the package index this machine reaches; writes "
                                 "data/upstream/resolve/vllm-V.json (sm120lab.upstream.full_resolve).")
    f.add_argument("versions", nargs="+", help="recorded vLLM releases, e.g. 0.33.0 0.34.0")
    f.set_defaults(func=run_full_resolve)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_full_resolve(args: argparse.Namespace) -> int:
    from ..upstream import full_resolve, versions

    known = versions("vllm")
    bad = [v for v in args.versions if v not in known]
    if bad:
        raise SystemExit(f"versions: not recorded vLLM releases: {', '.join(bad)} (record them first: "
                         "sm120lab upstream record vllm V)")
    for v in args.versions:
        doc = full_resolve.resolve(v)
        path = full_resolve.write(doc)
        print(f"vllm {v}: {full_resolve.reason(doc)} -> {path}")
    return 0


def run_record(args: argparse.Namespace) -> int:
    from packaging.version import InvalidVersion, Version

    from ..toolchains.pypi_wheels import WheelUnavailable
    from ..upstream import recorder

    try:
        Version(args.version)
    except InvalidVersion:
        raise SystemExit(f"version: expected an exact version like 0.34.0, got {args.version!r}") from None
    try:
        rec, status = recorder.record(args.dist, args.version, wheel=args.wheel, force=args.force)
    except (WheelUnavailable, recorder.Unpublished, FileNotFoundError) as exc:
        raise SystemExit(f"{args.dist} {args.version}: {exc}") from None
    path = recorder.store.record_path(rec.dist, rec.version)
    if status == "differs":
        print(f"{path}: an earlier record differs from this reading; kept it (pass --force to replace)",
              file=sys.stderr)
        return 1
    print(f"{rec.dist} {rec.version}: {status} {path}")
    return 0


def run_vllm_cache(args: argparse.Namespace) -> int:
    from pathlib import Path

    from packaging.version import InvalidVersion, Version

    from ..moe import vllm_wheel

    try:
        Version(args.version)
    except InvalidVersion:
        print(f"version: expected an exact vLLM version like 0.26.0, got {args.version!r}", file=sys.stderr)
        return 2
    root = Path(args.dest) if args.dest else vllm_wheel.cache_dir()
    try:
        if args.from_parts:
            folder = vllm_wheel.unpack_parts(args.from_parts, root)
            m = vllm_wheel.read_cache(folder, args.version)
            if folder.name != args.version:
                raise vllm_wheel.VllmWheelError(f"parts: they hold vllm {folder.name}, not {args.version}")
        elif args.verify:
            m = vllm_wheel.read_cache(root / args.version, args.version)
            folder = root / args.version
        else:
            folder = vllm_wheel.build_cache(args.version, args.wheel, root)
            m = vllm_wheel.read_cache(folder, args.version, verify=False)
    except vllm_wheel.VllmWheelError as exc:
        print(str(exc), file=sys.stderr)
        return 2 if args.wheel or not args.verify else 1
    print(f"vllm {m['version']} wheel cache: {folder} ({len(m['files'])} files from {m['wheel']}, "
          f"pins torch=={m['torch_pin']}); use it with SM120LAB_VLLM_CACHE={root}")
    if args.pack:
        try:
            parts = vllm_wheel.pack_cache(folder, Path(args.pack), args.part_mb)
        except vllm_wheel.VllmWheelError as exc:
            print(str(exc), file=sys.stderr)
            return 2
        print(f"packed into {len(parts)} part folder(s) of at most {args.part_mb:g} MiB: "
              + ", ".join(str(p) for p in parts) + f"; join with: sm120lab upstream vllm-cache {m['version']} "
              "--from-parts " + " ".join(str(p) for p in parts))
    return 0


def run_record_all(args: argparse.Namespace) -> int:
    from ..upstream import recorder

    summary = recorder.record_all(force=args.force)
    print(f"written {len(summary['written'])}, unchanged {len(summary['unchanged'])}, "
          f"kept (differs) {len(summary['differs'])}, not on the package index this machine reached "
          f"{len(summary['unavailable'])}")
    return 1 if summary["differs"] else 0


def _show_vllm(rec) -> None:
    print("pins: " + ", ".join(f"{k}{v}" for k, v in rec.pins.items() if k in ("flashinfer-python", "torch")))
    print(f"--moe-backend: {'yes' if rec.moe_backend_flag else 'no'}")
    for b in rec.moe_backends:
        if "nvfp4" not in b.formats:
            continue
        auto = f"auto #{b.auto_order}" if b.auto_selected else "opt-in"
        where = f"{b.sm12x_anchor.file}:{b.sm12x_anchor.line}" if b.sm12x_anchor else "-"
        print(f"  {b.name:<28} SM12x {b.sm12x.value:<8} {auto:<8} {where}")
    dense = rec.dense_nvfp4_gemm
    for knob in (dense.env, dense.flag):
        if knob is not None:
            print(f"dense NVFP4 GEMM: {knob.kind} {knob.name} = {' | '.join(knob.choices or ['?'])}")
    print(f"attention on SM120: {' > '.join(rec.attention_priority_cuda.get('sm120', []))}")
    print(f"env vars: {len(rec.env_vars)}, serve flags: {len(rec.serve_flags)}")
    for k, f in rec.facts.items():
        print(f"  {k}: {'yes' if f.found else 'no'}" + (f" ({f.anchor.file}:{f.anchor.line})" if f.anchor else ""))


def _show_flashinfer(rec) -> None:
    for a in rec.arch_list:
        print(f"  arch list {a.case:<20} {a.result}")
    j = rec.jit_load_order
    print(f"AOT before JIT: {j.aot_before_jit}; JIT cache keyed by {', '.join(j.cache_dir_key)}")
    print(f"FLASHINFER_* env vars: {len(rec.env_vars)}")
    for k, f in rec.facts.items():
        print(f"  {k}: {'yes' if f.found else 'no'}" + (f" ({f.anchor.file}:{f.anchor.line})" if f.anchor else ""))


def run_show(args: argparse.Namespace) -> int:
    from .. import upstream

    try:
        rec = upstream.load(args.dist, args.version)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if args.json:
        print(json.dumps(rec.model_dump(mode="json"), indent=2))
        return 0
    print(f"{rec.dist} {rec.version}  ({rec.wheel.filename}, sha256 {rec.wheel.sha256[:12]}...)")
    print(f"recorded by: {rec.command}")
    print(f"requires-python: {rec.requires_python}")
    if rec.kind == "vllm":
        _show_vllm(rec)
    elif rec.kind == "flashinfer":
        _show_flashinfer(rec)
    else:
        for a in getattr(rec, "cuda_arch_flags", []):
            print(f"  TORCH_CUDA_ARCH_LIST={a.value:<9} {a.result}")
        print("requires-dist:\n  " + "\n  ".join(rec.requires_dist))
    return 0


def run_check(args: argparse.Namespace) -> int:
    from ..upstream import check_install

    try:
        res = check_install(args.requirements)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    print(("installs together: " if res.ok else "does NOT install together: ") + res.detail)
    return 0 if res.ok else 1
