"""What machine and software a result came from.

``collect()`` returns a JSON-serialisable dict: host, OS, Python, package versions, GPU
(name, compute capability, driver, CUDA runtime, shared memory per block) when torch sees one,
every nvcc found, the environment variables that change FP4 MoE behaviour, and which sm120lab made
it (version, git commit, dirty flag: :func:`provenance`). It never raises: a missing piece is
recorded as ``None`` with the reason.
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
from pathlib import Path

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


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS`` stdout stripped, or ``None`` when git is missing or fails."""
    git = shutil.which("git")
    if not git:
        return None
    try:
        done = subprocess.run([git, "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(package_dir: Path | None = None) -> dict[str, object]:
    """Which sm120lab made a result: ``{"version", "commit", "dirty", "reason"}``.

    ``commit`` is ``git rev-parse HEAD`` and ``dirty`` is whether ``git status --porcelain
    --untracked-files=no`` lists a change to a tracked file, both only when the package is imported
    from a git checkout whose top level holds it; otherwise both are ``None`` and ``reason`` says why.

    Args:
        package_dir: the imported package's folder (default: this module's).

    Returns:
        The record; ``reason`` is ``None`` when the commit was read.
    """
    from . import __version__

    package_dir = Path(package_dir or Path(__file__).resolve().parent)
    try:
        version = metadata.version("sm120lab")
    except metadata.PackageNotFoundError:
        version = __version__
    out: dict[str, object] = {"version": version, "commit": None, "dirty": None, "reason": None}
    root = package_dir.parent
    if not shutil.which("git"):
        out["reason"] = "git not found on PATH"
        return out
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        out["reason"] = f"{root} is not a git checkout (installed package)"
        return out
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    if commit is None or status is None:
        out["reason"] = "git could not read the checkout"
        return out
    out.update(commit=commit, dirty=bool(status))
    return out


def provenance_text(env: Mapping[str, object]) -> str:
    """``0.1.0, commit 1a2b3c4d5e6f (uncommitted changes)`` from an ``environment.json``
    (:func:`sm120lab.envinfo.provenance`); runs recorded before it say so."""
    prov = env.get("sm120lab")
    if not isinstance(prov, dict):
        packages = env.get("packages")
        version = packages.get("sm120lab") if isinstance(packages, dict) else None
        return f"{version or 'version not recorded'}, commit not recorded (run made before sm120lab recorded it)"
    version = prov.get("version") or "version unknown"
    if not prov.get("commit"):
        return f"{version}, no commit ({prov.get('reason') or 'not recorded'})"
    state = {True: "uncommitted changes", False: "clean"}.get(prov.get("dirty"), "state unknown")
    return f"{version}, commit {str(prov['commit'])[:12]} ({state})"


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
        "sm120lab": provenance(),
        "gpu": gpu_info(),
        "nvcc": find_nvccs(),
        "env": relevant_env(),
    }
