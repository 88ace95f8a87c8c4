"""Run FlashInfer's OWN kernel generator for SM120, exactly as its JIT does.

FlashInfer's ``gen_cutlass_fused_moe_module`` (flashinfer/jit/fused_moe.py, 0.6.5 l.108-130)
calls ``generate_gemm_operations(output_dir, "120;120-real")`` from
``flashinfer/jit/gemm/cutlass/generate_kernels.py`` and compiles every ``*.generated.cu``.
The SM120 grouped-GEMM list comes from ``generate_sm120_grouped_gemm_operations`` (0.6.5
l.745-832: tiles 128x128x128, 128x128x256, 256x128x128, 128x256x128; FP8xFP4 only 128x128x128;
fusions NONE and FINALIZE; cluster 1x1x1; swap_ab both; ``stages = 0  # auto``; outputs
f16/bf16). 0.7.4 adds 128x32x{128,256} and 128x64x{128,256} (l.836-845).

The generator module is loaded from the unpacked wheel under a private package name, so
nothing of FlashInfer is imported (no torch / tvm_ffi). Its single outside import,
``...cpp_ext.is_cuda_version_at_least``, only gates SM90 FP8 block-scale kernels and is
answered with ``True`` (we keep only the SM120 files).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import types
from pathlib import Path

_counter = itertools.count()


def load_generator(wheel_root: Path) -> types.ModuleType:
    """Import ``flashinfer/jit/gemm/cutlass/generate_kernels.py`` of an unpacked wheel."""
    wheel_root = Path(wheel_root)
    src = wheel_root / "flashinfer" / "jit" / "gemm" / "cutlass" / "generate_kernels.py"
    if not src.is_file():
        raise FileNotFoundError(f"wheel_root: no {src.relative_to(wheel_root)} under {wheel_root}")
    top = f"_sm120lab_fi_gen{next(_counter)}"
    pkg_dirs = {top: "flashinfer", f"{top}.jit": "flashinfer/jit", f"{top}.jit.gemm": "flashinfer/jit/gemm",
                f"{top}.jit.gemm.cutlass": "flashinfer/jit/gemm/cutlass"}
    for name, rel in pkg_dirs.items():
        mod = types.ModuleType(name)
        mod.__path__ = [str(wheel_root / rel)]
        sys.modules[name] = mod
    cpp_ext = types.ModuleType(f"{top}.jit.cpp_ext")
    cpp_ext.is_cuda_version_at_least = lambda version: True
    sys.modules[cpp_ext.__name__] = cpp_ext
    spec = importlib.util.spec_from_file_location(f"{top}.jit.gemm.cutlass.generate_kernels", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def generate_sm120_sources(wheel_root: Path, out_dir: Path) -> list[Path]:
    """FlashInfer's generated SM120 grouped-GEMM instantiation files (sorted)."""
    gen = load_generator(wheel_root)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gen.generate_gemm_operations(str(out_dir), "120;120-real")
    files = sorted((out_dir / "gemm_grouped" / "120").glob("*.generated.cu"))
    if not files:
        raise RuntimeError(f"FlashInfer's generator wrote no SM120 grouped-GEMM files under {out_dir}")
    return files
