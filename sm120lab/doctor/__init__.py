"""``sm120lab doctor``: the machine, the stack, and which NVFP4 MoE backend should work on it.

``gather()`` builds the facts on top of :func:`sm120lab.envinfo.collect` (GPU, compute
capability, driver, CUDA runtime, every nvcc, package versions, env vars, shared memory per
block) plus the patch audit of the installed FlashInfer / vLLM. ``verdicts(facts)`` is a pure
function of those facts: one row per backend of the MoE registry (:mod:`sm120lab.moe.backends`,
same names), plus the vLLM/FlashInfer MoE backends the lab has no adapter for, with ``verdict``
(an :class:`Answer`: yes / slow / risky / emulated / no), ``why`` and ``needs`` (a patch id or
setting). It never raises: a missing GPU, nvcc or package is a fact. The SM120 rows are
reasoning from the wheels' sources and the project's compile probes, unverified on SM120 hardware.

On a machine with a CUDA GPU, :func:`run` also *measures*: it runs the correctness harness
(:func:`sm120lab.moe.harness.check`, preset ``tiny``) on that GPU and adds each backend's real
verdict (correct / degraded / garbage / skipped / error) beside the predicted one.

Sources for the rules: vllm 0.17.0 ``fused_moe/oracle/nvfp4.py:141-147`` (auto order),
``cutlass_moe.py:672-678`` and ``flashinfer_cutlass_moe.py:120-128`` (SM120 accepted);
FlashInfer 0.7.4 ``trtllm_batched_gemm_runner.cu:216-217`` (trtllm-gen cubins sm100/103/107
only); ``notes/archflags.md`` (Triton 3.9 lowers NVFP4 dot_scaled to native
``mma ... kind::mxf4nvf4`` on sm_120; nvcc 12.8 has sm_120a, 12.9 adds 120f/121a).
"""

from .checks import (
    CPU_OK,
    NO_ADAPTER,
    RULES,
    Answer,
    Facts,
    backend_order,
    failures,
    gather,
    guide_summary,
    measure,
    render,
    run,
    verdicts,
)

__all__ = ["CPU_OK", "NO_ADAPTER", "RULES", "Answer", "Facts", "backend_order", "failures", "gather", "guide_summary",
           "measure", "render", "run", "verdicts"]
