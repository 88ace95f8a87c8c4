"""Does anything in FlashInfer's SM120 MoE build depend on the arch suffix (``120a`` vs ``120f``)?

The seed report (https://github.com/flashinfer-ai/flashinfer/issues/2723) saw 14.6 tok/s with
``compute_120a`` (CUDA 12.8) and 39.0 tok/s with ``compute_120f`` (CUDA 13.0). This module asks
the question the compiler can answer without a GPU: for the translation units FlashInfer's JIT
compiles into its SM120 fused-MoE module, is the device code the compiler sees the same under
both suffixes?

Method, per translation unit ``tu`` and suffix ``s``::

    pp(tu, s) = nvcc -E <FlashInfer's JIT flags> -gencode=arch=compute_120s,code=sm_120s tu

``nvcc -E`` with one device target prints that target's device-side preprocessing (the host
pass never sees the suffix macros). Under ``120a`` nvcc defines ``__CUDA_ARCH_FEAT_SM120_ALL``
and ``__CUDA_ARCH_SPECIFIC__=1200`` on top of what ``120f`` defines
(``__CUDA_ARCH__=1200``, ``__CUDA_ARCH_FAMILY_SPECIFIC__=1200``). Every ``#if`` that reads
them is evaluated by the real preprocessor, so ``pp(tu, 120a) == pp(tu, 120f)`` (line markers
dropped) means no preprocessor branch in that unit, FlashInfer's or CUTLASS's, depends on the
suffix. Each differing line is reported with the source ``file:line`` it came from.

The Python side is read too: :func:`python_suffix_uses` lists every line of the wheel's
``flashinfer/`` Python that reads the target-arch set (``TARGET_CUDA_ARCHS``), which is where
the suffix string could steer a tactic filter or a module choice.

Command line: ``sm120lab dev arch-suffix [VERSION ...] [--ptx]`` records
``data/arch_suffix/flashinfer-<version>.json``. With ``--ptx`` it also compiles one of the
overflowing grouped-GEMM instantiations to PTX under both suffixes (:func:`ptx_compare`): the front end's output, not only its input.

What this does not cover: the toolkit. The seed changed CUDA 12.8 -> 13.0 together with the
suffix; a different ``ptxas`` can give different SASS from the same PTX. Only nvcc 13.0 is
compared here (both suffixes with one toolkit).
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SUFFIXES = ("120a", "120f")
WHEEL_PARTS = ("flashinfer/data/csrc/", "flashinfer/data/include/", "flashinfer/data/cutlass/include/",
               "flashinfer/data/cutlass/tools/util/include/", "flashinfer/data/spdlog/include/",
               "flashinfer/jit/", "flashinfer/compilation_context.py", "flashinfer/fused_moe/",
               "flashinfer/autotuner.py")
# The hand-written MoE units FlashInfer's SM120 JIT module compiles for NVFP4 (jit/fused_moe.py,
# gen_cutlass_fused_moe_module): the FP4 x FP4 dispatch and the fused-MoE kernels (activation
# quantization, permutation, finalize). The generated SM120 grouped-GEMM files are added to these.
MOE_UNITS = (
    "nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_kernels_fp4_fp4.cu",
    "fused_moe/cutlass_backend/cutlass_fused_moe_instantiation.cu",
)
# cudaUtils.h includes cuBLAS headers and the fused-MoE kernels cuRAND's; this toolkit install has
# neither. Preprocessing needs only that they exist; empty stand-ins are the same under both
# suffixes (what those library headers themselves do per suffix is not covered).
STUB_HEADERS = ("cublasLt.h", "cublas_v2.h", "cublas_api.h", "curand_kernel.h", "curand.h", "curand_philox4x32_x.h")
CONTROL_HEADER = "flashinfer/data/include/flashinfer/arch_condition.h"
_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"')
_PY_USE = re.compile(r"TARGET_CUDA_ARCHS")


def parse_preprocessed(text: str) -> list[tuple[str, int, str]]:
    """``(source file, source line, text)`` for every non-blank line of ``nvcc -E`` output.

    Args:
        text: the preprocessor's output, with ``# N "file"`` line markers.

    Returns:
        One tuple per code line, in order; marker lines themselves are dropped.
    """
    out: list[tuple[str, int, str]] = []
    cur_file, cur_line = "?", 0
    for raw in text.splitlines():
        m = _MARKER.match(raw)
        if m:
            cur_line, cur_file = int(m.group(1)), m.group(2)
            continue
        if raw.startswith("#pragma") or raw.strip():
            out.append((cur_file, cur_line, raw.strip()))
        cur_line += 1
    return out


def _short(path: str, roots: list[str]) -> str:
    for r in roots:
        if path.startswith(r):
            return path[len(r):].lstrip("/")
    return path


def diff_lines(a: list[tuple[str, int, str]], b: list[tuple[str, int, str]], *, roots: list[str] = (),
               limit: int = 40) -> list[dict]:
    """Differing hunks between two parsed preprocessings.

    Args:
        a, b: outputs of :func:`parse_preprocessed` (a = 120a, b = 120f).
        roots: path prefixes to strip from source file names in the report.
        limit: keep at most this many hunks (the count is reported separately).

    Returns:
        ``[{"120a": ["file:line: text", ...], "120f": [...]}, ...]``
    """
    sm = difflib.SequenceMatcher(None, [t for _, _, t in a], [t for _, _, t in b], autojunk=False)
    hunks = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        hunks.append({
            SUFFIXES[0]: [f"{_short(f, roots)}:{ln}: {t[:160]}" for f, ln, t in a[i1:min(i2, i1 + 8)]],
            SUFFIXES[1]: [f"{_short(f, roots)}:{ln}: {t[:160]}" for f, ln, t in b[j1:min(j2, j1 + 8)]],
            "lines": [i2 - i1, j2 - j1],
        })
    return hunks[:limit] if limit else hunks


def python_suffix_uses(wheel_root: Path) -> list[str]:
    """``path:line: text`` of every FlashInfer Python line that reads ``TARGET_CUDA_ARCHS``
    (the parsed ``FLASHINFER_CUDA_ARCH_LIST`` or detected archs, suffix included)."""
    pkg = Path(wheel_root) / "flashinfer"
    hits = []
    for py in sorted(pkg.rglob("*.py")):
        rel = py.relative_to(wheel_root).as_posix()
        if "/data/" in rel:  # bundled third-party copies (CuTe DSL sources), not FlashInfer's
            continue
        for i, line in enumerate(py.read_text(errors="replace").splitlines(), 1):
            if _PY_USE.search(line):
                hits.append(f"{rel}:{i}: {line.strip()}")
    return hits


def _stub_include(work: Path) -> Path:
    d = work / "stub_include"
    d.mkdir(parents=True, exist_ok=True)
    for name in STUB_HEADERS:
        (d / name).write_text("/* empty stand-in: preprocessing only (sm120lab dev arch-suffix) */\n")
    return d


def _flags(root: Path, gen_dir: Path, stub: Path) -> list[str]:
    from ..cutlass_smem.build import compile_flags

    flags = compile_flags(root, root, gen_dir, stub)
    out, skip = [], False
    for f in flags:  # drop the smem probe's forced include (not part of FlashInfer's build)
        if skip:
            skip = False
            continue
        if f == "-include":
            skip = True
            continue
        out.append(f)
    return out


def scan(version: str, *, nvcc: str | None = None, jobs: int = 2, work_dir: Path | None = None,
         progress: bool = True) -> dict:
    """Preprocess FlashInfer ``version``'s SM120 MoE units under 120a and 120f and compare.

    Args:
        version: a flashinfer-python version on PyPI (``"0.6.5"``, ``"0.7.4"``).
        nvcc: the nvcc to use (default: ``$CUDA_HOME``, PATH, /usr/local/cuda).
        jobs: parallel preprocessor runs.
        work_dir: scratch folder (default ``<cache>/arch_suffix/<version>``).
        progress: one line per unit on stderr.

    Returns:
        A JSON-serialisable dict: per unit the line counts under each suffix, ``identical`` and
        the differing hunks with source ``file:line``; ``python_uses``; nvcc and its version.
    """
    from ..cutlass_smem.build import find_nvcc, nvcc_version
    from ..cutlass_smem.generate import generate_sm120_sources
    from ..paths import cache_root
    from ..toolchains.pypi_wheels import fetch_wheel

    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs!r}")
    nvcc = find_nvcc(nvcc)
    root = fetch_wheel("flashinfer-python", version, only=WHEEL_PARTS, quiet=not progress)
    work = Path(work_dir) if work_dir else cache_root() / "arch_suffix" / version
    work.mkdir(parents=True, exist_ok=True)
    gen_dir = work / "generated"
    generated = generate_sm120_sources(root, gen_dir)
    csrc = root / "flashinfer/data/csrc"
    units = [csrc / u for u in MOE_UNITS] + list(generated)
    flags = _flags(root, gen_dir, _stub_include(work))
    roots = [str(root) + "/", str(gen_dir) + "/"]

    def pp(unit: Path, suffix: str, lang: tuple[str, ...] = ()) -> tuple[list, float]:
        t0 = time.monotonic()
        cmd = [nvcc, "-E", *flags, f"-gencode=arch=compute_{suffix},code=sm_{suffix}", *lang, str(unit)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or "").strip().splitlines()[-3:])
            raise RuntimeError(f"nvcc -E {unit.name} ({suffix}) failed: {tail}")
        return parse_preprocessed(proc.stdout), time.monotonic() - t0

    results = []
    t_all = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        # Positive control: a FlashInfer header with a real suffix branch (isArchSpecific reads
        # __CUDA_ARCH_SPECIFIC__); the comparison must find it, or the method sees nothing.
        ctrl_unit = root / CONTROL_HEADER
        (ca, _), (cb, _) = pool.map(lambda s: pp(ctrl_unit, s, ("-x", "cu")), SUFFIXES)
        control = {"unit": CONTROL_HEADER, "identical": [t for _, _, t in ca] == [t for _, _, t in cb],
                   "hunks": diff_lines(ca, cb, roots=roots)}
        if control["identical"]:
            raise RuntimeError(f"control: {CONTROL_HEADER} preprocessed the same under both suffixes; "
                               "the comparison cannot see suffix branches with this nvcc")
        for k, unit in enumerate(units, 1):
            (a, ta), (b, tb) = pool.map(lambda s, u=unit: pp(u, s), SUFFIXES)
            same = [t for _, _, t in a] == [t for _, _, t in b]
            hunks = [] if same else diff_lines(a, b, roots=roots)
            rel = _short(str(unit), roots)
            results.append({"unit": rel, "lines": {SUFFIXES[0]: len(a), SUFFIXES[1]: len(b)},
                            "identical": same, "hunks": hunks, "seconds": round(ta + tb, 1)})
            if progress:
                print(f"[{k}/{len(units)}] {rel}: {'identical' if same else f'{len(hunks)} differing hunk(s)'} "
                      f"({len(a)} lines, {ta + tb:.0f} s)", file=sys.stderr, flush=True)
    return {
        "flashinfer_version": version,
        "nvcc": nvcc,
        "nvcc_version": nvcc_version(nvcc),
        "suffixes": list(SUFFIXES),
        "device_macros": device_macros(nvcc),
        "control": control,
        "units": results,
        "all_identical": all(r["identical"] for r in results),
        "python_uses": python_suffix_uses(root),
        "wall_seconds": round(time.monotonic() - t_all, 1),
        "example_command": ["nvcc", "-E", "<FlashInfer JIT flags>", "-gencode=arch=compute_120a,code=sm_120a",
                            results[0]["unit"] if results else "?"],
    }


FINALIZE_256 = re.compile(r"FINALIZE,\s*256,\s*128,\s*128,.*?false,\s*false,\s*false,\s*false\)", re.S)


def ptx_compare(version: str, *, nvcc: str | None = None, work_dir: Path | None = None, keep=None,
                progress: bool = True) -> dict:
    """Compile one generated SM120 grouped-GEMM instantiation to PTX under 120a and 120f and diff.

    The default instantiation is the first one (f16 output) of the NVFP4 256x128x128 FINALIZE,
    no-swap kernel, one of those whose 3-stage shared storage overflows. PTX lines that name the
    target (``.target sm_120a`` / ``sm_120f``) and comments are dropped before comparing.

    Returns:
        ``{"unit", "instantiation", "ptx_lines", "identical", "differences", "seconds"}``.
    """
    from ..cutlass_smem.build import CUBLAS_HEADERS, find_nvcc, select_instantiations
    from ..cutlass_smem.generate import generate_sm120_sources
    from ..paths import cache_root
    from ..toolchains.pypi_wheels import fetch_wheel

    nvcc = find_nvcc(nvcc)
    root = fetch_wheel("flashinfer-python", version, only=WHEEL_PARTS, quiet=not progress)
    work = Path(work_dir) if work_dir else cache_root() / "arch_suffix" / f"{version}-ptx"
    gen_dir = work / "generated"
    sources = generate_sm120_sources(root, gen_dir)
    picked: list[str] = []

    def default_keep(block: str) -> bool:
        if picked or "half" not in block or not FINALIZE_256.search(block):
            return False
        picked.append(" ".join(block.split()))
        return True

    units = select_instantiations(sources, keep or default_keep)
    if len(units) != 1:
        raise RuntimeError(f"keep: expected the instantiation in exactly one generated file, got {len(units)}")
    # compiling (not only preprocessing) needs the real cuBLAS declarations
    cublas = fetch_wheel(*CUBLAS_HEADERS, only=("nvidia/cu13/include/",), quiet=not progress) / "nvidia/cu13/include"
    flags = _flags(root, gen_dir, cublas)
    texts, secs = {}, {}
    for s in SUFFIXES:
        out = work / f"{s}.ptx"
        t0 = time.monotonic()
        proc = subprocess.run([nvcc, "-ptx", *flags, f"-arch=compute_{s}", str(units[0]), "-o", str(out)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or "").strip().splitlines()[-3:])
            raise RuntimeError(f"nvcc -ptx ({s}) failed: {tail}")
        secs[s] = round(time.monotonic() - t0, 1)
        texts[s] = out.read_text().splitlines()
        if progress:
            print(f"ptx {s}: {len(texts[s])} lines, {secs[s]:.0f} s", file=sys.stderr, flush=True)

    def body(lines):
        return [ln for ln in lines if not ln.lstrip().startswith(("//", ".target"))]

    a, b = body(texts["120a"]), body(texts["120f"])
    ops = {k: ptx_opcodes(v) for k, v in texts.items()}
    keys = sorted(set(ops["120a"]) | set(ops["120f"]))
    return {"unit": _short(str(units[0]), [str(gen_dir) + "/"]), "instantiation": picked[0] if picked else "custom",
            "ptx_lines": {k: len(v) for k, v in texts.items()},
            "target_lines": {k: [ln.strip() for ln in v if ln.lstrip().startswith(".target")] for k, v in texts.items()},
            "instructions": {k: sum(v.values()) for k, v in ops.items()},
            "feature_instructions": {k: {f: sum(n for op, n in v.items() if op.startswith(f)) for f in FEATURE_OPS}
                                     for k, v in ops.items()},
            "opcode_differences": {op: [ops["120a"].get(op, 0), ops["120f"].get(op, 0)] for op in keys
                                   if ops["120a"].get(op, 0) != ops["120f"].get(op, 0)},
            "identical": a == b, "seconds": secs}


# PTX instructions that carry the kernel's tensor-core, TMA, barrier and memory work
FEATURE_OPS = ("mma.sync", "cp.async.bulk", "mbarrier", "ldmatrix", "stmatrix", "tensormap", "setmaxnreg",
               "griddepcontrol", "elect", "fence", "bar.", "ld.shared", "st.shared", "ld.global", "st.global",
               "red.", "atom.", "shfl", "call")


def ptx_opcodes(lines: list[str]) -> dict[str, int]:
    """Count of each PTX instruction opcode (predicates stripped; directives, labels, comments skipped)."""
    from collections import Counter

    c: Counter = Counter()
    for ln in lines:
        t = ln.strip()
        if not t or t.startswith(("//", ".", "$", "{", "}", ")", "(")):
            continue
        if t.startswith("@"):
            parts = t.split(None, 1)
            if len(parts) < 2:
                continue
            t = parts[1]
        c[t.split()[0].rstrip(";")] += 1
    return dict(c)


def device_macros(nvcc: str) -> dict[str, list[str]]:
    """The arch macros nvcc passes to the device preprocessor for each suffix (from ``--dryrun``)."""
    out = {}
    for s in SUFFIXES:
        proc = subprocess.run([nvcc, "--dryrun", "-E", f"-gencode=arch=compute_{s},code=sm_{s}", "-x", "cu",
                               "/dev/null"], capture_output=True, text=True)
        macros = sorted(set(re.findall(r"-D(__CUDA_ARCH\w*(?:=\d+)?)",
                                       proc.stderr + proc.stdout)))
        out[s] = macros
    return out
