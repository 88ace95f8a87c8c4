"""``sm120lab cutlass-smem``: shared memory of FlashInfer's SM120 NVFP4 grouped-GEMM kernels.

Compiles FlashInfer's own generated SM120 instantiations (host-side report, no GPU) for each
``--flashinfer`` version, with ``--patched`` also with the stage-count patch, records
``data/cutlass_smem/<version>[-patched].json`` and prints a table: tile, epilogue, swap_ab,
stages, sizeof(SharedStorage), alignment padding, limit 101,376 B.
"""

from __future__ import annotations

DEFAULT_VERSIONS = ("0.6.5", "0.7.4")


def register(subparsers) -> None:
    p = subparsers.add_parser("cutlass-smem", help="stage count and shared memory of FlashInfer's SM120 grouped GEMMs",
                              description=__doc__)
    p.add_argument("--flashinfer", nargs="+", default=list(DEFAULT_VERSIONS), metavar="VERSION",
                   help=f"flashinfer-python versions (default: {' '.join(DEFAULT_VERSIONS)})")
    p.add_argument("--patched", action="store_true", help="also measure with the stage-count patch applied")
    p.add_argument("--force", action="store_true", help="recompile even if a recorded result exists")
    p.add_argument("--jobs", type=int, default=2, help="parallel nvcc processes (default 2; each needs ~2.5 GB)")
    p.add_argument("--device-arch", default="compute_80", choices=["compute_80", "sm_120a", "sm_120f"],
                   help="device target of the compile (sizes come from the host pass; default compute_80)")
    p.add_argument("--output-type", choices=["f16", "bf16"], default=None,
                   help="compile only the instantiations with this output type (halves the work; "
                        "f16 and bf16 kernels have the same sizes)")
    p.add_argument("--nvcc", default=None, help="nvcc to use (default: CUDA_HOME, PATH, /usr/local/cuda)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write all results shown to FILE")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    try:
        return _run(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"sm120lab cutlass-smem: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import sys

    from ..atomic_io import write_json_atomic
    from ..cmdline import command_line
    from ..cutlass_smem import analysis, store

    if args.jobs < 1:
        print("--jobs: expected a positive integer", file=sys.stderr)
        return 2
    results, compiled = [], []
    for version in args.flashinfer:
        for patched in ([False, True] if args.patched else [False]):
            if patched:
                from ..cutlass_smem.stage_patch import load_spec, version_matches
                spec = load_spec()
                if not version_matches(spec, version):
                    print(f"flashinfer {version}: no stage-count patch for this version (spec covers "
                          f"{spec['versions']}); skipping --patched", file=sys.stderr)
                    continue
            if args.force or not store.result_path(version, patched).is_file():
                compiled.append((version, patched))
            kw = {}
            if args.output_type:
                token = {"f16": ", half,", "bf16": ", __nv_bfloat16,"}[args.output_type]
                kw = dict(keep=lambda block, token=token: token in block, selection=f"output type {args.output_type} only")
            res = store.measure_cached(version, patched, force=args.force, jobs=args.jobs,
                                       device_arch=args.device_arch, nvcc=args.nvcc,
                                       command=command_line("sm120lab", getattr(args, "argv", None)), **kw)
            results.append(res)
            print(analysis.format_table(res))
            print()
    from ..cutlass_smem.report import write_before_after

    for version in args.flashinfer:  # derived files: refreshed after a real compile, or when missing
        have_both = sum(r["flashinfer_version"] == version for r in results) == 2
        missing = not (store.DATA_DIR / f"before_after_{version}.csv").is_file()
        if have_both and (missing or any(v == version for v, _ in compiled)):
            for path in write_before_after(version):
                print(f"wrote {path}")
    if compiled or not (store.DATA_DIR / "stage_bytes.png").is_file():
        import matplotlib

        matplotlib.use("Agg")
        from ..cutlass_smem.plot import plot_stage_bytes

        ax = plot_stage_bytes()
        print(f"wrote {store.DATA_DIR / 'stage_bytes.png'}")
        import matplotlib.pyplot as plt

        plt.close(ax.figure)
    if args.json:
        try:
            write_json_atomic(args.json, results)
        except OSError as exc:
            print(f"--json: cannot write {args.json} ({exc.strerror or exc}); expected a writable file path", file=sys.stderr)
            return 2
    return 0
