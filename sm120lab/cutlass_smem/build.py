"""Compile FlashInfer's own SM120 grouped-GEMM instantiations with a host-side smem report.

Pipeline (no GPU needed):

1. ``fetch_wheel("flashinfer-python", version)``; the wheel bundles CUTLASS
   (``flashinfer/data/cutlass/include``) and the TRT-LLM MoE sources (``flashinfer/data/csrc``).
2. Run FlashInfer's generator (:mod:`.generate`) -> its ``*.generated.cu`` SM120 files.
3. Copy ``flashinfer/data/csrc/nv_internal`` into a work tree; with ``patched=True`` apply the
   stage-count patch spec (:mod:`.stage_patch`) to the copy, exactly as the patch kit would.
4. Instrument the copy of ``moe_gemm_tma_ws_launcher.inl``: one line after
   ``using GemmGrouped = ...GemmUniversalAdapter<GemmKernel>;`` calls ``SM120LAB_SMEM_PROBE``
   (``probe/sm120lab_smem_probe.h``, force-included), which records the kernel types' sizes.
5. Compile each generated file with FlashInfer's JIT flags (flashinfer/jit/core.py
   ``gen_jit_spec`` and jit/fused_moe.py ``gen_cutlass_fused_moe_sm120_module`` /
   ``gen_cutlass_fused_moe_module``: -std=c++17, --expt-relaxed-constexpr,
   -static-global-template-stub=false, -DCOMPILE_BLACKWELL_TMA_GEMMS,
   -DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS, -DENABLE_BF16/FP8/FP4,
   -DUSING_OSS_CUTLASS_MOE_GEMM, the same include directories), link with FlashInfer's
   logger/exception/string sources and ``probe_main.cpp``, run on the host, read the JSON.

Two deliberate differences from the JIT, neither of which can change a ``sizeof``: the host
side is compiled at -O0 (the JIT uses -O3) and the device side defaults to PTX for
``compute_80`` instead of SASS for ``sm_120a`` (``device_arch`` selects it). The sizes are
constants of the host compilation; the CUTLASS SM120 kernel bodies are arch-conditional and
compile to stubs for compute_80, which cuts a ~10 min compile per file to ~3 min on 2 cores.
A full ``device_arch="sm_120a"`` build of one file gave identical records (notes/cutlass_smem.md).
cuBLAS headers (included by tensorrt_llm/common/cudaUtils.h) come from the ``nvidia-cublas``
wheel. Long work shows one progress line per compiled file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..paths import cache_root
from ..toolchains.pypi_wheels import fetch_wheel
from .generate import generate_sm120_sources
from .stage_patch import apply_to_tree, load_spec, version_matches

PROBE_DIR = Path(__file__).resolve().parent / "probe"
LAUNCHER_REL = ("flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/"
                "launchers/moe_gemm_tma_ws_launcher.inl")
PROBE_AFTER = "using GemmGrouped = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;"
PROBE_LINE = ("      SM120LAB_SMEM_PROBE(GemmKernel, CollectiveMainloop, CollectiveEpilogue, T, WeightType, "
              "OutputType, FUSION, SwapAB, IsMXFPX); \\\n")
CUBLAS_HEADERS = ("nvidia-cublas", "13.0.2.14")  # headers only (cublasLt.h, cublas_v2.h)
COMMON_SOURCES = ("logger.cpp", "tllmException.cpp", "stringUtils.cpp")  # nv_internal/cpp/common
DEVICE_ARCHS = {
    "compute_80": "-gencode=arch=compute_80,code=compute_80",
    "sm_120a": "-gencode=arch=compute_120a,code=sm_120a",
    "sm_120f": "-gencode=arch=compute_120f,code=sm_120f",
}


def find_nvcc(nvcc: str | None = None) -> str:
    """``nvcc`` argument, else $CUDA_HOME/bin/nvcc, PATH, /usr/local/cuda/bin/nvcc."""
    candidates = [nvcc] if nvcc else [os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc"),
                                      shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError(f"nvcc: none found (tried {', '.join(c for c in candidates if c)}); "
                            "pass nvcc=/path/to/nvcc or set CUDA_HOME")


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


def cutlass_version(wheel_root: Path) -> str:
    text = (Path(wheel_root) / "flashinfer/data/cutlass/include/cutlass/version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{k} (\d+)", text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def instrument(text: str) -> str:
    """Insert the probe line after the GemmGrouped alias (inside the launcher macro)."""
    n = text.count(PROBE_AFTER)
    if n != 1:
        raise ValueError(f"launcher: '{PROBE_AFTER}' occurs {n} times, expected 1")
    i = text.index(PROBE_AFTER)
    j = text.index("\n", i)
    if not text[i:j].rstrip().endswith("\\"):
        raise ValueError("launcher: the GemmGrouped line is not a macro continuation line")
    return text[: j + 1] + PROBE_LINE + text[j + 1:]


def compile_flags(wheel_root: Path, tree: Path, gen_dir: Path, cublas_include: Path) -> list[str]:
    fi = Path(wheel_root) / "flashinfer"
    nv = tree / "flashinfer/data/csrc/nv_internal"
    # FlashInfer >= 0.7 adds its include/ and csrc/ dirs as system includes (jit/cpp_ext.py
    # get_system_includes); 0.6.x does not. Follow the wheel's own JIT.
    extra = []
    if "FLASHINFER_INCLUDE_DIR.resolve()" in (fi / "jit/cpp_ext.py").read_text():
        extra = ["-isystem", str(fi / "data/include"), "-isystem", str(tree / "flashinfer/data/csrc"),
                 "-isystem", str(fi / "data/csrc")]
    return [
        "-std=c++17", "--expt-relaxed-constexpr", "-static-global-template-stub=false", "-use_fast_math",
        "-DNDEBUG", "-O0", "--compiler-options=-fPIC",
        "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3",
        "-DFLASHINFER_ENABLE_FP8_E5M2",
        "-DCOMPILE_BLACKWELL_TMA_GEMMS", "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS", "-DENABLE_BF16",
        "-DENABLE_FP8", "-DENABLE_FP4", "-DUSING_OSS_CUTLASS_MOE_GEMM",
        f"-I{nv}", f"-I{nv}/include", f"-I{nv}/tensorrt_llm/cutlass_extensions/include",
        f"-I{nv}/tensorrt_llm/kernels/cutlass_kernels/include", f"-I{nv}/tensorrt_llm/kernels/cutlass_kernels",
        f"-I{gen_dir}",
        "-isystem", str(fi / "data/cutlass/include"), "-isystem", str(fi / "data/cutlass/tools/util/include"),
        "-isystem", str(fi / "data/spdlog/include"), "-isystem", str(cublas_include), *extra,
        f"-I{PROBE_DIR}", "-include", "sm120lab_smem_probe.h",
    ]


def _run(cmd: list[str], what: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise RuntimeError(f"compiling {what} failed (exit {proc.returncode}):\n{tail}")
    return time.monotonic() - t0


def select_instantiations(files: list[Path], keep) -> list[Path]:
    """Rewrite generated files in place keeping only the ``#if ... INSTANTIATE...; #endif``
    blocks for which ``keep(block_text)`` is true; returns the files that still hold one."""
    kept = []
    for f in files:
        text = f.read_text()
        blocks = re.findall(r"\n#if [^\n]*\n\s*INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\(.*?\);\n#endif", text, re.S)
        if not blocks:
            raise ValueError(f"{f.name}: no INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM blocks found")
        for b in blocks:
            if not keep(b):
                text = text.replace(b, "", 1)
        if "INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(" in text:
            f.write_text(text)
            kept.append(f)
    return kept


def measure(version: str, *, patched: bool = False, jobs: int = 2, device_arch: str = "compute_80",
            nvcc: str | None = None, keep=None, selection: str | None = None, work_dir: Path | None = None,
            progress: bool = True) -> dict:
    """Compile and run the probe for FlashInfer ``version``; return the raw result dict.

    ``keep(block_text) -> bool`` compiles only the generated instantiation blocks it accepts
    (for quick checks: one kernel instead of all; ``selection`` describes it in the result);
    ``work_dir`` defaults to
    ``~/.cache/sm120lab/cutlass_smem/<version>[-patched]`` (wiped first).
    """
    if device_arch not in DEVICE_ARCHS:
        raise ValueError(f"device_arch: expected one of {sorted(DEVICE_ARCHS)}, got {device_arch!r}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs!r}")
    nvcc = find_nvcc(nvcc)
    root = fetch_wheel("flashinfer-python", version)
    cublas_include = fetch_wheel(*CUBLAS_HEADERS, only=("nvidia/cu13/include/",)) / "nvidia" / "cu13" / "include"
    work = Path(work_dir) if work_dir else cache_root() / "cutlass_smem" / f"{version}{'-patched' if patched else ''}"
    if work.exists():
        shutil.rmtree(work)
    tree = work / "site"
    src_nv = root / "flashinfer/data/csrc/nv_internal"
    shutil.copytree(src_nv, tree / "flashinfer/data/csrc/nv_internal")
    applied: list[str] = []
    if patched:
        spec = load_spec()
        if not version_matches(spec, version):
            raise ValueError(f"version: the stage-count spec covers {spec['versions']}, not {version}")
        applied = apply_to_tree(root, tree, spec)
    launcher = tree / LAUNCHER_REL
    launcher.write_text(instrument(launcher.read_text()))

    gen_dir = work / "generated"
    sources = generate_sm120_sources(root, gen_dir)
    if keep is not None:
        sources = select_instantiations(sources, keep)
        if not sources:
            raise ValueError("keep: no generated instantiation was selected")
    flags = compile_flags(root, tree, gen_dir, cublas_include)
    arch = DEVICE_ARCHS[device_arch].split()
    objs = work / "obj"
    objs.mkdir()
    units = [(s, objs / (s.name + ".o"), flags + arch) for s in sources]
    units.append((PROBE_DIR / "probe_main.cpp", objs / "probe_main.o", flags + arch))
    plain = [f for f in flags if f not in ("-include", "sm120lab_smem_probe.h")]
    for name in COMMON_SOURCES:
        units.append((src_nv / "cpp/common" / name, objs / (name + ".o"), plain))
    commands = [[nvcc, *fl, "-c", str(src), "-o", str(obj)] for src, obj, fl in units]

    timings: dict[str, float] = {}
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(commands), desc=f"flashinfer {version}{' patched' if patched else ''}",
                   unit="file", file=sys.stderr)

    def one(cmd):
        dt = _run(cmd, Path(cmd[-3]).name)
        timings[Path(cmd[-3]).name] = round(dt, 1)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{Path(cmd[-3]).name[:40]} {dt:.0f}s")
        return dt

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, commands))
    if bar is not None:
        bar.close()
    exe = work / "sm120lab_smem_probe"
    link = [nvcc, "-o", str(exe), *[str(obj) for _, obj, _ in units]]
    _run(link, "the probe program (link)")
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    records = json.loads(run.stdout)
    return {
        "flashinfer_version": version,
        "cutlass_version": cutlass_version(root),
        "patched": patched,
        "patches_applied": applied,
        "device_arch": device_arch,
        "nvcc": nvcc,
        "nvcc_version": nvcc_version(nvcc),
        "generated_files": [s.name for s in sources],
        "selection": (selection or "custom") if keep is not None else "all",
        "compile_seconds": timings,
        "wall_seconds": round(time.monotonic() - t0, 1),
        "compile_command_example": commands[0],
        "records": records,
    }
