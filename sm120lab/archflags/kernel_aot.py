"""Ahead-of-time compilation of the MoE kernels for a GPU we do not have (no GPU needed).

``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", cc, 32))`` runs
Triton's whole pipeline down to PTX and cubin (ptxas bundled with Triton). From the result we
read ``metadata.shared`` (bytes of shared memory per block), the PTX's key instruction, and from
the cubin (``cuobjdump`` in Triton's wheel) registers per thread, stack/local bytes and the SASS
spill instructions (``STL``/``LDL``); for the decode kernel also the SASS instruction mix of its
K loop per weight element.

The signature of each kernel is derived from the kernel's own argument names
(:func:`signature`): constexpr parameters by name, ``*_ptr`` arguments typed from the variant's
pointer table, every other argument ``i32``.

Run ``sm120lab dev kernel-aot --out data/triton_aot/sm120.json`` to (re)write the table;
``tests/test_triton_aot.py`` runs the same compilation in a subprocess (the CPU interpreter
tests import the kernels in interpreted form in-process).
"""

from __future__ import annotations

import collections
import hashlib
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..constants import SM120_SMEM_LIMIT

#: the block-scaled FP4 MMA (PTX ISA 8.7, mma.sync ... kind::mxf4nvf4) NVFP4 uses on sm_120/121
NVFP4_MMA_RE = re.compile(r"mma\.sync\.aligned\.m16n8k64\.row\.col\.kind::mxf4nvf4\.block_scale\.scale_vec::4X\S*ue4m3")
BF16_MMA_RE = re.compile(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32")
WGMMA_RE = re.compile(r"wgmma\.mma_async\S*bf16")
#: the decode kernel's conversion (sm_89+): two E4M3 bytes -> f16x2
E4M3X2_CVT_RE = re.compile(r"cvt\.rn\.f16x2\.e4m3x2")
#: the fragment kernel's dequantization multiply (sm_90+)
BF16X2_MUL_RE = re.compile(r"mul\.rn\.bf16x2")
#: approximate fp32 division (``div.full`` / ``div.approx``) and fused multiply-add in PTX (the quantizer must hold neither)
DIV_APPROX_RE = re.compile(r"\bdiv\.(?:full|approx)(?:\.ftz)?\.f32\b")
FMA_F32_RE = re.compile(r"\bfma\.rn(?:\.ftz)?\.f32\b")


def division_facts(ptx: str) -> dict:
    """Approximate fp32 divisions and fp32 fma in ``ptx`` (the quantizer's bit-exactness needs 0 of each)."""
    return {"n_div_approx_f32": len(DIV_APPROX_RE.findall(ptx)), "n_fma_f32": len(FMA_F32_RE.findall(ptx))}


# A_MODE values, the same objects the GEMM kernel compares against (sm120lab.kernels.moe_gemm)
_A_BF16, _A_FP4_DEQUANT, _A_FP4_NATIVE = 0, 1, 2


@dataclass(frozen=True)
class Variant:
    """One compiled form of a kernel.

    Args:
        name: row key in the table.
        kernel: "gemm" (:mod:`sm120lab.kernels.moe_gemm`), "decode" (:mod:`sm120lab.kernels.moe_decode`) or "frag" (:mod:`sm120lab.kernels.moe_frag`).
        constexprs: the variant's fixed constexprs (tile constexprs come from the config).
        min_triton: the oldest Triton this variant is known to compile with for sm_120, and how known.
    """

    name: str
    kernel: str
    constexprs: dict = field(default_factory=dict)
    min_triton: str = ""


_MEASURED_36 = "3.6.0 (compiled for sm_120 and sm_121 with 3.6.0 and 3.9.0; older not tried)"
_NATIVE_MIN = ("sm_120: 3.6.0 (3.6.0 and 3.9.0 lower it to the block-scaled mma; 3.5.1 and 3.4.0 fail in "
               "TritonGPUAccelerateMatmul); sm_121: 3.9.0 (3.6.0 fails: 'PassManager::run failed', "
               "data/triton_aot/sm120_triton3.6.0.json)")


def _variants() -> tuple[Variant, ...]:
    from ..kernels.moe_gemm import A_BF16, A_FP4_DEQUANT, A_FP4_NATIVE

    global _A_BF16, _A_FP4_DEQUANT, _A_FP4_NATIVE
    _A_BF16, _A_FP4_DEQUANT, _A_FP4_NATIVE = A_BF16.value, A_FP4_DEQUANT.value, A_FP4_NATIVE.value
    out = []
    for mode, tag, mt in ((A_BF16, "w4a16", _MEASURED_36), (A_FP4_DEQUANT, "w4a4_dequant", _MEASURED_36),
                          (A_FP4_NATIVE, "w4a4_native", _NATIVE_MIN)):
        for op, fuse in (("w13", True), ("w2", False)):
            out.append(Variant(f"{op}_{tag}", "gemm", {"A_MODE": mode.value, "FUSE_SILU": fuse,
                                                       "MUL_ROUTING": not fuse}, mt))
    for op, fuse in (("w13", True), ("w2", False)):
        out.append(Variant(f"{op}_decode", "decode", {"FUSE_SILU": fuse, "MUL_ROUTING": not fuse}, _MEASURED_36))
    for op, fuse in (("w13", True), ("w2", False)):
        out.append(Variant(f"{op}_frag", "frag", {"FUSE_SILU": fuse, "MUL_ROUTING": not fuse}, _MEASURED_36))
    out.append(Variant("w2sum_frag", "frag", {"TOPK": 10}, _MEASURED_36))
    return tuple(out)


#: what the fast CI test recompiles to check the committed table is reproducible
SAMPLE = (("w13_w4a16", "m16n64k64w4s3f"), ("w13_w4a4_native", "m32n64k128w4s3"), ("w13_decode", "d16x64w4s1"),
          ("w13_frag", "f2w4"))


def source_hash() -> str:
    """sha256 of the kernel sources (what a cached table must match)."""
    kernels = Path(__file__).resolve().parent.parent / "kernels"
    h = hashlib.sha256()
    for name in ("moe_gemm.py", "moe_decode.py", "moe_frag.py", "nvfp4_tl.py", "moe_sort.py", "moe_configs.py"):
        h.update((kernels / name).read_bytes())
    h.update(Path(__file__).read_bytes())  # this driver decides what is compiled and read
    return h.hexdigest()[:16]


def signature(fn, ptr_types: dict[str, str], constexprs: dict) -> dict[str, str]:
    """Triton signature from ``fn``'s own argument names: constexprs by name, ``*_ptr`` from
    ``ptr_types``, everything else ``i32``."""
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            if name not in ptr_types:
                raise KeyError(f"{fn.__name__}: no pointer type given for argument {name!r}")
            sig[name] = ptr_types[name]
        else:
            sig[name] = "i32"
    missing = set(constexprs) - set(fn.arg_names)
    if missing:
        raise KeyError(f"{fn.__name__}: constexprs {sorted(missing)} are not arguments of the kernel")
    return sig


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


def _cubin_facts(cubin: bytes) -> dict:
    """Registers, stack/local bytes (``-res-usage``) and SASS (``-sass``) of a cubin, or {} without cuobjdump."""
    import subprocess
    import tempfile

    tool = _cuobjdump()
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        try:
            res = subprocess.run([tool, "-res-usage", fh.name], capture_output=True, text=True, timeout=60).stdout
            sass = subprocess.run([tool, "-sass", fh.name], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    facts = {}
    for key in ("REG", "STACK", "LOCAL"):
        m = re.search(rf"{key}:(\d+)", res)
        facts[key] = int(m.group(1)) if m else None
    facts["sass"] = sass
    return facts


def loop_mix(sass: str) -> dict | None:
    """Instruction mix of the longest backward-branch loop in SASS: {"n": count, "ops": {opcode: count}}."""
    ops = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z0-9_.]+)(.*)", line)
        if m:
            ops.append((int(m.group(1), 16), m.group(2), m.group(3)))
    best = None
    for addr, op, rest in ops:
        if op.startswith("BRA"):
            tgt = re.search(r"0x([0-9a-f]+)", rest)
            if tgt and int(tgt.group(1), 16) < addr:
                body = [o.split(".")[0] for a, o, _ in ops if int(tgt.group(1), 16) <= a <= addr]
                if best is None or len(body) > best["n"]:
                    best = {"n": len(body), "ops": dict(collections.Counter(body).most_common())}
    return best


def divisibility_attrs(fn, constexprs: dict, divisible: tuple[str, ...]) -> dict:
    """``tt.divisibility=16`` for every pointer and for the integer arguments in ``divisible``: what
    Triton's launcher specializes at run time for 16-byte-aligned tensors and multiples of 16 (the
    model shape's sizes and strides), so the AOT code vectorizes its loads as the GPU run does."""
    attrs = {}
    for i, name in enumerate(fn.arg_names):
        if name not in constexprs and (name.endswith("_ptr") or name in divisible):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


def compile_kernel(fn, ptr_types: dict, constexprs: dict, cc: int, num_warps: int, num_stages: int,
                   divisible: tuple[str, ...] = (), options: dict | None = None) -> dict:
    """Compile ``fn`` for ``sm_<cc>``; returns shared bytes, registers, spills, key PTX facts, SASS.

    ``divisible``: integer arguments that are multiples of 16 at run time (:func:`divisibility_attrs`);
    ``options``: further compile options, as the launch passes them (e.g. ``enable_fp_fusion``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not isinstance(fn, triton.runtime.jit.JITFunction):
        raise RuntimeError("the kernels were imported under TRITON_INTERPRET=1; compile in a fresh process")
    # a constexpr parameter left out takes its default, as a launch does (else it would compile as a runtime i32)
    constexprs = {**{p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}, **constexprs}
    src = ASTSource(fn=fn, signature=signature(fn, ptr_types, constexprs), constexprs=constexprs,
                    attrs=divisibility_attrs(fn, constexprs, divisible))
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                       options={"num_warps": num_warps, "num_stages": num_stages, **(options or {})})
    dt = time.perf_counter() - t0
    ptx = k.asm["ptx"]
    facts = _cubin_facts(k.asm["cubin"]) if "cubin" in k.asm else {}
    sass = facts.pop("sass", "")
    nvfp4, bf16, wgmma, cvt = (r.search(ptx) for r in (NVFP4_MMA_RE, BF16_MMA_RE, WGMMA_RE, E4M3X2_CVT_RE))
    key = next((m.group(0) for m in (nvfp4, bf16, wgmma, cvt) if m), None)
    shared = int(k.metadata.shared)
    return {
        "cc": cc, "target": f"sm_{cc}", "shared_bytes": shared, "fits_sm120": shared <= SM120_SMEM_LIMIT,
        "n_regs": facts.get("REG"), "stack_bytes": facts.get("STACK"), "local_bytes": facts.get("LOCAL"),
        "n_spill_stores": len(re.findall(r"\bSTL\b", sass)) if sass else None,
        "n_spill_loads": len(re.findall(r"\bLDL\b", sass)) if sass else None,
        "key_instruction": key, "n_nvfp4_mma": len(NVFP4_MMA_RE.findall(ptx)),
        "n_bf16_mma": len(BF16_MMA_RE.findall(ptx)), "n_bf16x2_mul": len(BF16X2_MUL_RE.findall(ptx)),
        **division_facts(ptx),
        "compile_s": round(dt, 2), "sass_sha256": sass_digest(sass), "_sass": sass,
    }


def _gemm_ptrs(a_mode: int, fuse: bool) -> dict:
    return {"a_ptr": "*bf16" if a_mode == _A_BF16 else "*u8", "as_ptr": "*u8", "a_gs_ptr": "*fp32", "w_ptr": "*u8",
            "ws_ptr": "*u8", "w_gs_ptr": "*fp32", "out_ptr": "*bf16" if fuse else "*fp32", "topk_w_ptr": "*fp32",
            "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32"}


def _decode_ptrs(fuse: bool) -> dict:
    return {"a_ptr": "*bf16", "w_ptr": "*i32", "ws_ptr": "*u8", "alpha_ptr": "*fp32",
            "out_ptr": "*bf16" if fuse else "*fp32", "topk_w_ptr": "*fp32", "expert_ptr": "*i64", "slot_ptr": "*i64",
            "err_ptr": "*i32"}


def config_key(variant: str, cfg) -> str:
    """Config name as compiled: FAST (inline-PTX dequant) does not apply to the native W4A4 path."""
    return cfg.name.rstrip("f") if variant.endswith("native") else cfg.name


def compile_variant(variant: str, cfg, cc: int) -> dict:
    """Compile one kernel variant with one tile config for ``sm_<cc>`` -> one table row."""
    v = {x.name: x for x in _variants()}[variant]
    ce = dict(v.constexprs)
    if v.kernel == "gemm":
        from ..kernels.moe_gemm import moe_nvfp4_gemm_kernel as fn

        ce.update(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K,
                  FAST=cfg.FAST and ce["A_MODE"] != _A_FP4_NATIVE)
        ptrs = _gemm_ptrs(ce["A_MODE"], ce["FUSE_SILU"])
        div = ("N", "K", "n_up", "stride_am", "stride_asm", "stride_we", "stride_wn", "stride_wse", "stride_wsn",
               "stride_om")
    elif v.kernel == "frag" and "TOPK" in ce:
        from ..kernels.moe_frag import moe_w4a16_frag_w2sum_kernel as fn

        ce.update(TILES=cfg.TILES, WARPS=cfg.num_warps, PREFETCH=cfg.w2sum_prefetch)
        if cfg.PING:
            ce["PING"] = cfg.PING
        ptrs = {"a_ptr": "*i64", "q_ptr": "*i32", "s_ptr": "*i16", "alpha_ptr": "*fp32", "out_ptr": "*bf16",
                "topk_w_ptr": "*fp32", "topk_ids_ptr": "*i64"}
        div = ("stride_am", "stride_qe", "stride_se", "stride_om")
    elif v.kernel == "frag":
        from ..kernels.moe_frag import moe_w4a16_frag_kernel as fn

        fuse = ce["FUSE_SILU"]
        ce.update(TILES=cfg.TILES, WARPS=cfg.num_warps, OUT_T=cfg.TILES // 2 if fuse else cfg.TILES,
                  CG=cfg.CG or int(cfg.SORTED))
        if cfg.PING:
            ce["PING"] = cfg.PING
        if cfg.SHARE_B:
            ce["SHARE_B"] = True
        ptrs = {"a_ptr": "*i64", "q_ptr": "*i32", "s_ptr": "*i16", "alpha_ptr": "*fp32",
                "out_ptr": "*bf16" if fuse else "*fp32", "topk_w_ptr": "*fp32",
                "expert_ptr": "*i32" if cfg.SORTED else "*i64", "slot_ptr": "*i32" if cfg.SORTED else "*i64",
                "err_ptr": "*i32"}
        div = ("stride_am", "stride_qe", "stride_se", "stride_om")
    else:
        from ..kernels.moe_decode import moe_w4a16_decode_kernel as fn

        ce.update(SORTED=cfg.SORTED, BLOCK_N=cfg.BLOCK_N, BLOCK_KW=cfg.BLOCK_KW, FAST=True, DEPTH=cfg.DEPTH)
        ptrs = _decode_ptrs(ce["FUSE_SILU"])
        div = ("N", "KW", "n_up", "stride_am", "stride_we", "stride_wn", "stride_se", "stride_sn", "stride_om")
    row = {"kernel": variant, "config": config_key(variant, cfg), "min_triton": v.min_triton,
           **compile_kernel(fn, ptrs, ce, cc, cfg.num_warps, cfg.num_stages, div)}
    sass = row.pop("_sass")
    if v.kernel in ("decode", "frag") and sass:
        mix = loop_mix(sass)
        if mix:
            elems = (cfg.TILES * 4 * 8 if v.kernel == "frag" else cfg.BLOCK_N * cfg.BLOCK_KW * 8 / (32 * cfg.num_warps))
            row["loop"] = {"instructions": mix["n"], "weight_elements_per_thread": elems,
                           "instructions_per_element": round(mix["n"] / elems, 3),
                           "top_opcodes": dict(list(mix["ops"].items())[:12])}
    return row


def sass_digest(sass: str) -> str | None:
    """sha256 (16 hex digits) of a kernel's SASS without its ``Function :`` name lines: two sources
    whose every config hashes alike compile to the same machine code, so a refactor that keeps the
    digests keeps every recorded timing of the old code (``sm120lab dev kernel-aot --same-sass-as``)."""
    if not sass:
        return None
    body = "\n".join(line for line in sass.splitlines() if "Function :" not in line)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def sass_changes(old_rows: list[dict], new_rows: list[dict]) -> list[str]:
    """Rows (kernel, config, cc) of ``new_rows`` whose SASS digest differs from, or is missing in, ``old_rows``."""
    def key(r):
        return r.get("kernel"), r.get("config"), r.get("cc")

    old = {key(r): r.get("sass_sha256") for r in old_rows if "config" in r}
    out = []
    for r in new_rows:
        if "config" not in r:
            continue
        was = old.get(key(r))
        if was is None or was != r.get("sass_sha256"):
            out.append(f"{r['kernel']} {r['config']} sm_{r.get('cc')}: {was} -> {r.get('sass_sha256')}")
    return out


def jobs(ccs=(120, 121)) -> list[tuple[str, object, int]]:
    """Every (variant, config, cc) to compile, deduplicated by the config as compiled."""
    from ..kernels.moe_configs import CONFIGS, DECODE_CONFIGS, FRAG_CONFIGS

    out, seen = [], set()
    tables = {"gemm": CONFIGS, "decode": DECODE_CONFIGS, "frag": FRAG_CONFIGS}
    for cc in ccs:
        for v in _variants():
            for c in tables[v.kernel].values():
                if v.kernel == "frag" and not frag_config_applies(v.name, c):
                    continue
                key = (v.name, config_key(v.name, c), cc)
                if key not in seen:
                    seen.add(key)
                    out.append((v.name, c, cc))
    return out


def frag_config_applies(variant: str, cfg) -> bool:
    """w13 needs gate + up tiles (even TILES); the w2+sum kernel runs only unsorted configs; ``PREFETCH`` is
    an option of the w2+sum kernel alone, ``SHARE_B`` one of the other fragment kernel alone."""
    if cfg.SHARE_B:
        return variant != "w2sum_frag"
    if cfg.PREFETCH:  # the w2+sum kernel's loop option only
        return variant == "w2sum_frag" and not cfg.SORTED
    if variant == "w13_frag":
        return cfg.TILES % 2 == 0
    if variant == "w2sum_frag":
        return not cfg.SORTED
    return True


def compile_sort(cc: int) -> list[dict]:
    """The token sort's kernels (:mod:`sm120lab.kernels.moe_sort`) at E = 512, BLOCK_M = 16: the count kernel in its
    multi-program and one-program forms, and the place kernel, as the layer runs them (``ZERO``: the dropped
    slots' fp32 output rows are zeroed)."""
    from ..kernels.moe_sort import moe_sort_count_kernel, moe_sort_place_kernel, sort_constexprs

    i32 = ("rank_ptr", "counts_ptr", "done_ptr", "start_ptr", "bend_ptr", "fill_ptr", "sorted_ids_ptr",
           "block_expert_ptr")
    ptrs = {"topk_ids_ptr": "*i64", **{n: "*i32" for n in i32}, "err_ptr": "*i32", "zero_ptr": "*fp32"}
    div = ("num_experts", "zero_cols", "stride_z")
    rows = []
    for name, single in (("E512_m16_multi", False), ("E512_m16_single", True)):
        row = compile_kernel(moe_sort_count_kernel, ptrs, sort_constexprs(512, 16, single, zero=True), cc, 4, 1, div)
        row.pop("_sass")
        rows.append({"kernel": "moe_sort_count", "config": name, **row})
    ce = {k: v for k, v in sort_constexprs(512, 16, False, zero=True).items()
          if k in ("BLOCK_M", "PCHUNK", "BB", "STEPS", "ZERO")}
    place_ptrs = {k: v for k, v in ptrs.items() if k not in ("counts_ptr", "done_ptr")}
    row = compile_kernel(moe_sort_place_kernel, place_ptrs, ce, cc, 4, 1, div)
    row.pop("_sass")
    rows.append({"kernel": "moe_sort_place", "config": "E512_m16_place", **row})
    return rows


def compile_quant(cc: int) -> dict:
    """The activation quantizer with its launch options; :func:`row_problems` requires its PTX to hold no
    approximate fp32 division and no fp32 fma (either breaks its bit-exactness with ``quantize_nvfp4``)."""
    from ..kernels.nvfp4_tl import QUANTIZE_LAUNCH_OPTIONS, nvfp4_quantize_rows_kernel

    ptrs = {"x_ptr": "*bf16", "gs_ptr": "*fp32", "q_ptr": "*u8", "s_ptr": "*u8"}
    row = compile_kernel(nvfp4_quantize_rows_kernel, ptrs, {"BLOCK_G": 64}, cc, 4, 1,
                         ("n_cols", "stride_x", "stride_q", "stride_s"), options=QUANTIZE_LAUNCH_OPTIONS)
    row.pop("_sass")
    return {"kernel": "nvfp4_quantize_rows", "config": "G64", **row}


def _compile_job(job) -> dict:
    v, c, cc = job
    try:
        return compile_variant(v, c, cc)
    except Exception as exc:  # recorded; the test and the exit status fail on it
        return {"kernel": v, "config": config_key(v, c), "cc": cc, "target": f"sm_{cc}",
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]}


def compile_all(ccs=(120, 121), todo=None, progress=True, n_jobs: int = 1) -> list[dict]:
    """Every kernel variant x every config x every target (or ``todo``), plus sort and quantize."""
    todo = jobs(ccs) if todo is None else list(todo)
    if n_jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(n_jobs, mp_context=mp.get_context("spawn")) as ex:
            rows = list(ex.map(_compile_job, todo))
    else:
        rows = []
        for i, job in enumerate(todo):
            rows.append(_compile_job(job))
            if progress:
                r = rows[-1]
                print(f"[{i + 1}/{len(todo)}] sm_{job[2]} {job[0]} {job[1].name}: shared={r.get('shared_bytes')} "
                      f"regs={r.get('n_regs')} key={r.get('key_instruction') or r.get('error')}",
                      file=sys.stderr, flush=True)
    for cc in ccs:
        rows.extend(compile_sort(cc))
        rows.append(compile_quant(cc))
    return rows


def row_problems(r: dict) -> list[str]:
    """What is wrong with one table row (empty: it proves what it should)."""
    bad = []
    if "error" in r:
        return [r["error"]]
    if not r.get("fits_sm120") or r["shared_bytes"] > SM120_SMEM_LIMIT:
        bad.append(f"shared {r['shared_bytes']} B > {SM120_SMEM_LIMIT}")
    if r.get("n_spill_stores") or r.get("local_bytes"):
        bad.append(f"register spills: {r.get('n_spill_stores')} STL, {r.get('local_bytes')} B local")
    k = r["kernel"]
    if k == "nvfp4_quantize_rows" and (r.get("n_div_approx_f32", 1) or r.get("n_fma_f32", 1)):
        bad.append(f"quantizer not bit-exact: {r.get('n_div_approx_f32')} approximate divisions, "
                   f"{r.get('n_fma_f32')} fp32 fma in its PTX")
    if k.endswith("native"):
        if not (r["key_instruction"] and NVFP4_MMA_RE.fullmatch(r["key_instruction"]) and r["n_bf16_mma"] == 0):
            bad.append(f"no native NVFP4 mma: {r['key_instruction']}")
    elif k.endswith("decode"):
        if not (r["key_instruction"] and E4M3X2_CVT_RE.fullmatch(r["key_instruction"])):
            bad.append(f"decode without cvt.rn.f16x2.e4m3x2: {r['key_instruction']}")
    elif k.endswith("frag"):
        if not (r["n_bf16_mma"] and r.get("n_bf16x2_mul")):
            bad.append(f"fragment kernel without its bf16 mma.sync / mul.rn.bf16x2: {r['key_instruction']}")
    elif k.startswith(("w13", "w2")) and r["key_instruction"] != "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32":
        bad.append(f"no bf16 mma.sync: {r['key_instruction']}")
    return bad


def build_table(ccs=(120, 121), *, sample: bool = False, progress: bool = True, n_jobs: int = 1,
                command: str = "", kinds: tuple[str, ...] = ()) -> dict:
    """The AOT table: every variant x config compiled for each ``sm_<cc>`` (only :data:`SAMPLE` with
    ``sample``; only the variants of kernel ``kinds``, e.g. ``("frag",)``, when given);
    ``{"triton", "source_hash", "smem_limit_sm120", "command", "min_triton", "rows"}``.
    Check it with :func:`row_problems` per row (``sm120lab dev kernel-aot`` writes it)."""
    import triton

    todo = None
    if sample:
        from ..kernels.moe_configs import CONFIGS, DECODE_CONFIGS, FRAG_CONFIGS

        todo = [(v, {**CONFIGS, **DECODE_CONFIGS, **FRAG_CONFIGS}[c], cc) for cc in ccs for v, c in SAMPLE]
    if kinds:
        kind_of = {v.name: v.kernel for v in _variants()}
        todo = [j for j in (jobs(tuple(ccs)) if todo is None else todo) if kind_of[j[0]] in kinds]
    rows = compile_all(tuple(ccs), todo=todo, progress=progress, n_jobs=n_jobs)
    return {"triton": triton.__version__, "source_hash": source_hash(), "smem_limit_sm120": SM120_SMEM_LIMIT,
            "command": command, "min_triton": {v.name: v.min_triton for v in _variants()}, "rows": rows}
