"""Why FlashInfer's fast SM120 NVFP4 MoE tactics fail: pipeline stages vs. shared memory.

FlashInfer's SM120 grouped GEMM (TRT-LLM MoE launcher, ``moe_gemm_tma_ws_launcher.inl``) lets
CUTLASS choose the pipeline stage count (``StageCountAutoCarveout<sizeof(epilogue storage)>``).
That formula ignores the kernel's tensormaps/pipelines and the 1024-byte alignment of its
``SharedStorage``; for some tiles with the FINALIZE epilogue it picks 3 stages whose storage
exceeds SM120's 101,376 B, ``GemmUniversalAdapter::initialize()`` fails
("Failed to initialize cutlass TMA WS grouped gemm") and the autotuner drops those tactics.
This package measures it by compiling FlashInfer's OWN generated SM120 sources (no GPU), and
proves the stage-count patch (``sm120lab/patches/specs/flashinfer_sm120_stage_count.yaml``).

API (results are recorded in ``data/cutlass_smem/<version>[-patched].json``):

- ``measure_cached(version, patched=False, force=False, jobs=2, device_arch="compute_80")``:
  recorded result, or compile (~3 min per generated file on 2 cores) and record it.
- ``load(version, patched=False)``: a recorded result (dict with ``records``, ``envinfo``, ...).
- ``recorded()``: every recorded result.
- ``configs(result)``: derived rows (tile, epilogue, swap_ab, stages, stage_bytes, padding,
  kernel_smem, fits, over_by); ``format_table(result)``; ``before_after(before, after)``.
- ``cutlass_stage_count(record, cutlass_version)`` / ``model_kernel_smem(record)``: the stage
  formula and the storage layout redone in Python from the recorded sizes.
- ``plot_stage_bytes(ax=None, patched=False)``: stacked bars (one segment per stage, epilogue,
  other, alignment padding) per version/tile/epilogue/swap_ab with the 101,376 B line; with
  ``ax=None`` saves ``data/cutlass_smem/stage_bytes.png``; ``stage_bytes_figure()``: the same in a
  figure of its own, nothing saved (notebook 02).
- ``recorded_overflow(compile_cutlass=False)``: the kernel types over the limit per version
  (``overflow_summary``), compiling first when asked; ``overflow_text``: their arithmetic.
- ``fetch_wheel(dist, version)``: cached PyPI wheel unpack (``~/.cache/sm120lab/wheels``).

CLI: ``sm120lab cutlass-smem [--flashinfer 0.6.5 0.7.4] [--patched] [--json FILE]``.
The patch's runtime effect is unverified on SM120 hardware (only compile-time sizes are proven).
"""

from ..toolchains.pypi_wheels import fetch_wheel
from .analysis import (
                       SM120_SMEM_LIMIT,
                       before_after,
                       configs,
                       cutlass_stage_count,
                       derive,
                       format_table,
                       model_kernel_smem,
                       overflow_summary,
                       overflow_text,
)
from .plot import plot_stage_bytes, stage_bytes_figure
from .store import load, measure_cached, recorded, recorded_overflow, result_path

__all__ = [
    "SM120_SMEM_LIMIT", "before_after", "configs", "cutlass_stage_count", "derive", "fetch_wheel",
    "format_table", "load", "measure_cached", "model_kernel_smem", "overflow_summary", "overflow_text",
    "plot_stage_bytes", "recorded", "recorded_overflow", "result_path", "stage_bytes_figure",
]
