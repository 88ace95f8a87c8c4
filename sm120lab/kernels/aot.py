"""Ahead-of-time compilation of the MoE kernels for a GPU we do not have (no GPU needed).

``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", cc, 32))`` runs
Triton's whole pipeline down to PTX and cubin (ptxas bundled with Triton). From the result we
read ``metadata.shared`` (bytes of shared memory per block), the PTX's key MMA instruction, and
registers per thread from the cubin when ``cuobjdump`` is at hand (``n_regs`` is only filled by
the driver at load time, so it is None here otherwise).

Run ``python -m sm120lab.kernels.aot --out data/triton_aot/sm120.json`` to (re)write the table;
``tests/test_triton_aot.py`` runs the same compilation in a subprocess (the CPU interpreter
tests import the kernels in interpreted form in-process).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from pathlib import Path

#: SM120/SM121 opt-in shared memory per block (CUDA programming guide, compute capability 12.x)
SM120_SMEM_LIMIT = 101_376
#: the block-scaled FP4 MMA (PTX ISA 8.7, mma.sync ... kind::mxf4nvf4) NVFP4 uses on sm_120/121
NVFP4_MMA_RE = re.compile(r"mma\.sync\.aligned\.m16n8k64\.row\.col\.kind::mxf4nvf4\.block_scale\.scale_vec::4X\S*ue4m3")
BF16_MMA_RE = re.compile(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32")
WGMMA_RE = re.compile(r"wgmma\.mma_async\S*bf16")

#: kernel variants: (name, A_MODE, FUSE_SILU, MUL_ROUTING)
VARIANTS = (
    ("w13_w4a16", 0, True, False),
    ("w2_w4a16", 0, False, True),
    ("w13_w4a4_dequant", 1, True, False),
    ("w2_w4a4_dequant", 1, False, True),
    ("w13_w4a4_native", 2, True, False),
    ("w2_w4a4_native", 2, False, True),
)

#: what the fast CI test recompiles to check the committed table is reproducible
SAMPLE = (("w13_w4a16", "m16n64k64w4s3f"), ("w13_w4a4_native", "m64n64k128w4s3"))

_GEMM_SIG = {
    "a_ptr": "*bf16", "as_ptr": "*u8", "a_gs_ptr": "*fp32", "w_ptr": "*u8", "ws_ptr": "*u8",
    "w_gs_ptr": "*fp32", "out_ptr": "*bf16", "topk_w_ptr": "*fp32", "sorted_ids_ptr": "*i32",
    "block_expert_ptr": "*i32", "N": "i32", "K": "i32", "num_slots": "i32", "a_row_div": "i32",
    "n_up": "i32", "stride_am": "i32", "stride_asm": "i32", "stride_we": "i32", "stride_wn": "i32",
    "stride_wse": "i32", "stride_wsn": "i32", "stride_wgs": "i32", "stride_om": "i32",
}


def source_hash() -> str:
    """sha256 of the kernel sources (what a cached table must match)."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in ("moe_gemm.py", "nvfp4_tl.py", "moe_sort.py", "moe_configs.py", "aot.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def _cuobjdump() -> str | None:
    """The cuobjdump Triton's wheel bundles (triton/backends/nvidia/bin), else one on PATH."""
    import os
    import shutil

    try:
        import triton

        cand = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def _regs_from_cubin(cubin: bytes) -> int | None:
    """Registers per thread from ``cuobjdump -res-usage`` on the cubin, else None."""
    import subprocess
    import tempfile

    tool = _cuobjdump()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        try:
            text = subprocess.run([tool, "-res-usage", fh.name], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    m = re.search(r"REG:(\d+)", text)
    return int(m.group(1)) if m else None


def compile_gemm(variant: str, cfg, cc: int) -> dict:
    """Compile one GEMM variant with one config for compute capability ``cc`` (e.g. 120)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .moe_gemm import moe_nvfp4_gemm_kernel

    row = {v[0]: v for v in VARIANTS}[variant]
    _, a_mode, fuse, mul = row
    sig = dict(_GEMM_SIG)
    if a_mode != 0:
        sig["a_ptr"] = "*u8"
    sig["out_ptr"] = "*bf16" if fuse else "*fp32"
    constexprs = {"A_MODE": a_mode, "FUSE_SILU": fuse, "MUL_ROUTING": mul, "BLOCK_M": cfg.BLOCK_M,
                  "BLOCK_N": cfg.BLOCK_N, "BLOCK_K": cfg.BLOCK_K, "DOT_F32": False, "SWAP_AB": cfg.SWAP_AB,
                  "FAST": cfg.FAST and a_mode != 2}
    for name in constexprs:
        sig[name] = "constexpr"
    fn = moe_nvfp4_gemm_kernel
    if not isinstance(fn, triton.runtime.jit.JITFunction):
        raise RuntimeError("the kernels were imported under TRITON_INTERPRET=1; compile in a fresh process")
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                       options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
    dt = time.perf_counter() - t0
    ptx = k.asm["ptx"]
    nvfp4 = NVFP4_MMA_RE.search(ptx)
    bf16 = BF16_MMA_RE.search(ptx)
    wgmma = WGMMA_RE.search(ptx)
    key = nvfp4.group(0) if nvfp4 else bf16.group(0) if bf16 else wgmma.group(0) if wgmma else None
    return {
        "kernel": variant, "config": config_key(variant, cfg), "cc": cc, "target": f"sm_{cc}",
        "shared_bytes": int(k.metadata.shared), "fits_sm120": int(k.metadata.shared) <= SM120_SMEM_LIMIT,
        "n_regs": _regs_from_cubin(k.asm["cubin"]) if "cubin" in k.asm else None,
        "key_instruction": key,
        "n_nvfp4_mma": len(NVFP4_MMA_RE.findall(ptx)), "n_bf16_mma": len(BF16_MMA_RE.findall(ptx)),
        "compile_s": round(dt, 2),
    }


def config_key(variant: str, cfg) -> str:
    """Config name as compiled: FAST (inline-PTX dequant) does not apply to the native W4A4 path."""
    return cfg.name.rstrip("f") if variant.endswith("native") else cfg.name


def jobs(ccs=(120, 121)) -> list[tuple[str, object, int]]:
    """Every (variant, config, cc) to compile, deduplicated by the config as compiled."""
    from .moe_configs import CONFIGS

    out, seen = [], set()
    for cc in ccs:
        for v in (x[0] for x in VARIANTS):
            for c in CONFIGS.values():
                key = (v, config_key(v, c), cc)
                if key not in seen:
                    seen.add(key)
                    out.append((v, c, cc))
    return out


def compile_sort(cc: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .moe_sort import moe_sort_kernel

    sig = {"topk_ids_ptr": "*i64", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "counts_ptr": "*i32",
           "cursor_ptr": "*i32", "num_slots": "i32", "num_experts": "i32", "max_rows": "i32", "max_blocks": "i32"}
    ce = {"BLOCK_M": 16, "E_POW2": 512, "CHUNK": 1024, "BCHUNK": 32}
    sig.update({n: "constexpr" for n in ce})
    k = triton.compile(ASTSource(fn=moe_sort_kernel, signature=sig, constexprs=ce),
                       target=GPUTarget("cuda", cc, 32), options={"num_warps": 4})
    return {"kernel": "moe_sort", "config": "E512_chunk1024", "cc": cc, "target": f"sm_{cc}",
            "shared_bytes": int(k.metadata.shared), "fits_sm120": int(k.metadata.shared) <= SM120_SMEM_LIMIT,
            "n_regs": None, "key_instruction": "atom.global" if "atom.global" in k.asm["ptx"] else None}


def compile_quant(cc: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .nvfp4_tl import nvfp4_quantize_rows_kernel

    sig = {"x_ptr": "*bf16", "gs_ptr": "*fp32", "q_ptr": "*u8", "s_ptr": "*u8", "n_cols": "i32",
           "stride_x": "i32", "stride_q": "i32", "stride_s": "i32", "BLOCK_G": "constexpr"}
    k = triton.compile(ASTSource(fn=nvfp4_quantize_rows_kernel, signature=sig, constexprs={"BLOCK_G": 64}),
                       target=GPUTarget("cuda", cc, 32), options={"num_warps": 4})
    return {"kernel": "nvfp4_quantize_rows", "config": "G64", "cc": cc, "target": f"sm_{cc}",
            "shared_bytes": int(k.metadata.shared), "fits_sm120": int(k.metadata.shared) <= SM120_SMEM_LIMIT,
            "n_regs": None, "key_instruction": None}


def compile_all(ccs=(120, 121), todo=None, progress=True) -> list[dict]:
    """Every GEMM variant x every config x every target (or ``todo``), plus sort and quantize."""
    todo = jobs(ccs) if todo is None else list(todo)
    rows = []
    for i, (v, c, cc) in enumerate(todo):
        try:
            rows.append(compile_gemm(v, c, cc))
        except Exception as exc:  # recorded, the test fails on it
            rows.append({"kernel": v, "config": config_key(v, c), "cc": cc, "target": f"sm_{cc}",
                         "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]})
        if progress:
            r = rows[-1]
            print(f"[{i + 1}/{len(todo)}] sm_{cc} {v} {c.name}: shared={r.get('shared_bytes')} "
                  f"key={r.get('key_instruction') or r.get('error')}", file=sys.stderr, flush=True)
    for cc in ccs:
        rows.append(compile_sort(cc))
        rows.append(compile_quant(cc))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the table (JSON) here")
    p.add_argument("--cc", type=int, nargs="+", default=[120, 121], help="compute capabilities (default 120 121)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--sample", action="store_true",
                   help="compile only SAMPLE (w13 W4A16 FAST and W4A4 native, one config) and print JSON")
    args = p.parse_args(argv)
    import triton

    from ..atomic_io import write_json_atomic
    from ..envinfo import collect

    if args.sample:
        from .moe_configs import CONFIGS

        todo = [(v, CONFIGS[c], cc) for cc in args.cc for v, c in SAMPLE]
        rows = compile_all(tuple(args.cc), todo=todo, progress=not args.quiet)
    else:
        rows = compile_all(tuple(args.cc), progress=not args.quiet)
    doc = {"triton": triton.__version__, "source_hash": source_hash(), "smem_limit_sm120": SM120_SMEM_LIMIT,
           "command": "python -m sm120lab.kernels.aot " + " ".join(argv if argv is not None else sys.argv[1:]),
           "rows": rows}
    if args.out:
        doc["env"] = collect()
        write_json_atomic(args.out, doc)
    else:
        import json

        print(json.dumps(doc, indent=1))
    bad = [r for r in rows if "error" in r or not r.get("fits_sm120", False)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
