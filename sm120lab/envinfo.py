"""What machine and software a result came from.

``collect()`` returns a JSON-serialisable dict: host, OS, Python, package versions, GPU
(name, compute capability, driver, CUDA runtime, shared memory per block) when torch sees one,
every nvcc found, and the environment variables that change FP4 MoE behaviour. It never raises:
a missing piece is recorded as ``None`` with the reason.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Mapping
from importlib import metadata

PACKAGES = (
    "sm120lab", "torch", "triton", "numpy", "flashinfer-python", "flashinfer", "vllm",
    "nvidia-cutlass-dsl", "cuda-python", "papermill",
)

#: variables kept by name
ENV_KEYS = frozenset({
    "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "NCCL_CUMEM_ENABLE",
    "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_FLASHINFER_MOE_BACKEND", "VLLM_NVFP4_GEMM_BACKEND",
    "VLLM_TEST_FORCE_FP8_MARLIN", "VLLM_MOE_USE_DEEP_GEMM",
})
#: every variable with one of these prefixes is kept
ENV_PREFIXES = ("FLASHINFER_", "TRITON_", "SM120LAB_")
#: a ``VLLM_*`` variable is kept when its name holds one of these (the MoE backend switches)
VLLM_WORDS = ("MOE", "FLASHINFER", "FP4", "MARLIN")


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def relevant_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that change FP4 MoE behaviour, sorted by name.

    The one filter for the whole package (run folders, doctor): :data:`ENV_KEYS` by name, every
    ``FLASHINFER_*``, ``TRITON_*`` and ``SM120LAB_*``, and every ``VLLM_*`` whose name mentions MoE,
    FlashInfer, FP4/NVFP4 or Marlin.

    Args:
        environ: the variables to filter (default ``os.environ``).

    Returns:
        ``{name: value}`` of the relevant ones, sorted by name.
    """
    environ = os.environ if environ is None else environ

    def wanted(k: str) -> bool:
        return (k in ENV_KEYS or k.startswith(ENV_PREFIXES)
                or (k.startswith("VLLM_") and any(w in k for w in VLLM_WORDS)))

    return {k: environ[k] for k in sorted(environ) if wanted(k)}


def find_nvccs() -> list[dict[str, str | None]]:
    """Every nvcc the compile lab would find (:func:`sm120lab.toolchains.discover.nvcc_candidates`),
    once per real file, with its version."""
    from .toolchains.discover import nvcc_candidates, tool_version

    seen, found = set(), []
    for c in nvcc_candidates():
        real = os.path.realpath(c)
        if real in seen:
            continue
        seen.add(real)
        found.append({"path": str(c), "realpath": real, "version": tool_version(str(c))})
    return found


def gpu_info() -> dict:
    """GPU facts through torch; ``{"available": False, "reason": ...}`` without one."""
    try:
        import torch
    except ImportError as exc:
        return {"available": False, "reason": f"torch not importable: {exc}"}
    if not torch.cuda.is_available():
        return {"available": False, "reason": f"torch {torch.__version__} sees no CUDA device",
                "torch_cuda": torch.version.cuda}
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    info = {
        "available": True,
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "torch_cuda_runtime": torch.version.cuda,
        "shared_memory_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
        "device_count": torch.cuda.device_count(),
    }
    info["driver"] = _nvidia_smi_query("driver_version")
    return info


def _nvidia_smi_query(field: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def collect() -> dict:
    """Everything above in one dict, with a UTC timestamp."""
    return {
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "packages": package_versions(),
        "gpu": gpu_info(),
        "nvcc": find_nvccs(),
        "env": relevant_env(),
    }
