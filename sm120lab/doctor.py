"""``sm120lab doctor``: the machine, the stack, and which NVFP4 MoE backend should work on it.

``gather()`` builds the facts on top of :func:`sm120lab.envinfo.collect` (GPU, compute
capability, driver, CUDA runtime, every nvcc, package versions, env vars, shared memory per
block) plus the patch audit of the installed FlashInfer / vLLM. ``verdicts(facts)`` is a pure
function of those facts: one row per MoE backend with ``verdict`` (yes / slow / risky / no),
``why`` and ``needs`` (a patch id or setting). It never raises: a missing GPU, nvcc or package
is a fact. The SM120 rows are reasoning from the wheels' sources and the project's compile
probes, unverified on SM120 hardware.

Sources for the rules: vllm 0.17.0 ``fused_moe/oracle/nvfp4.py:141-147`` (auto order),
``cutlass_moe.py:672-678`` and ``flashinfer_cutlass_moe.py:120-128`` (SM120 accepted);
FlashInfer 0.7.4 ``trtllm_batched_gemm_runner.cu:216-217`` (trtllm-gen cubins sm100/103/107
only); ``shared/research/archflags.md`` (Triton 3.9 lowers NVFP4 dot_scaled to native
``mma ... kind::mxf4nvf4`` on sm_120; nvcc 12.8 has sm_120a, 12.9 adds 120f/121a).
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

from packaging.version import InvalidVersion, Version

SM120_SMEM_OPTIN = 101_376  # bytes per block, opt-in (SM120/121)

BACKENDS = (
    "vLLM CUTLASS grouped", "FLASHINFER_CUTLASS", "FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL",
    "Marlin (W4A16)", "b12x", "sm120lab triton-w4a16", "Triton dot_scaled W4A4", "torch-bf16",
)

ENV_KEYS = ("FLASHINFER_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST", "VLLM_USE_FLASHINFER_MOE_FP4",
            "VLLM_FLASHINFER_MOE_BACKEND", "VLLM_NVFP4_GEMM_BACKEND", "VLLM_TEST_FORCE_FP8_MARLIN",
            "VLLM_MOE_USE_DEEP_GEMM", "FLASHINFER_WORKSPACE_BASE", "CUDA_HOME", "CUDA_VISIBLE_DEVICES")


def relevant_env(environ) -> dict[str, str]:
    """The variables in :data:`ENV_KEYS` plus every ``VLLM_*`` that mentions MoE, FlashInfer,
    NVFP4/FP4 or Marlin (the MoE backend switches), sorted."""
    def wanted(k: str) -> bool:
        return k in ENV_KEYS or (k.startswith("VLLM_") and any(w in k for w in ("MOE", "FLASHINFER", "FP4", "MARLIN")))
    return {k: environ[k] for k in sorted(environ) if wanted(k)}


def _v(text: str | None) -> Version | None:
    if not text:
        return None
    m = re.match(r"\d+(\.\d+)*", text)
    try:
        return Version(m.group(0)) if m else None
    except InvalidVersion:
        return None


def _patch_summary(package: str, import_name: str) -> dict[str, Any]:
    """Installed package's patch audit: version, needed-but-unapplied and harmful-applied ids."""
    try:
        from .patches import engine
        from .patches.site import locate
        from .patches.spec import load_specs

        tree = locate(package, import_name)
        specs = load_specs(package, tree.version)
        states = engine.status(tree, specs)
    except Exception as exc:  # noqa: BLE001 - doctor reports, never crashes
        return {"available": False, "reason": str(exc).splitlines()[0]}
    return {
        "available": True, "version": tree.version, "root": str(tree.root),
        "needed_missing": [s.patch.id for s in states if s.patch.classification == "needed" and s.status != "applied"],
        "needed_applied": [s.patch.id for s in states if s.patch.classification == "needed" and s.status == "applied"],
        "harmful_applied": [s.patch.id for s in states if s.patch.classification == "harmful" and s.status == "applied"],
        "spec_ids": [s.patch.id for s in states],
    }


def gather() -> dict[str, Any]:
    """All facts the verdicts use (JSON-ready)."""
    from .envinfo import collect

    info = collect()
    gpu = info.get("gpu", {})
    cc = None
    if gpu.get("available") and gpu.get("compute_capability"):
        major, minor = gpu["compute_capability"].split(".")
        cc = [int(major), int(minor)]
    nvccs = info.get("nvcc", [])
    nvcc_versions = sorted((n["version"] for n in nvccs if n.get("version")), key=lambda s: _v(s) or Version("0"))
    pk = info.get("packages", {})
    facts = {
        "cc": cc,
        "gpu_name": gpu.get("name"),
        "gpu_reason": None if gpu.get("available") else gpu.get("reason"),
        "driver": gpu.get("driver"),
        "cuda_runtime": gpu.get("torch_cuda_runtime") or gpu.get("torch_cuda"),
        "smem_per_block_optin": gpu.get("shared_memory_per_block_optin"),
        "nvcc": nvccs,
        "nvcc_max": nvcc_versions[-1] if nvcc_versions else None,
        "versions": {k: pk.get(k) for k in ("torch", "triton", "flashinfer-python", "vllm", "nvidia-cutlass-dsl")},
        "env": relevant_env(os.environ),
        "b12x": _find("b12x"),
        "flashinfer_patches": _patch_summary("flashinfer-python", "flashinfer") if pk.get("flashinfer-python") else
                              {"available": False, "reason": "flashinfer-python not installed"},
        "vllm_patches": _patch_summary("vllm", "vllm") if pk.get("vllm") else
                        {"available": False, "reason": "vllm not installed"},
    }
    return {"facts": facts, "envinfo": info}


def _find(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _row(backend, verdict, why, needs=""):
    return {"backend": backend, "verdict": verdict, "why": why, "needs": needs}


def verdicts(f: dict[str, Any]) -> list[dict[str, str]]:
    """One row per entry of :data:`BACKENDS` for the facts ``f`` (see :func:`gather`)."""
    cc = tuple(f["cc"]) if f.get("cc") else None
    ver = f.get("versions", {})
    fi, vl, tr = _v(ver.get("flashinfer-python")), _v(ver.get("vllm")), _v(ver.get("triton"))
    nvcc = _v(f.get("nvcc_max"))
    env = f.get("env", {})
    fip = f.get("flashinfer_patches") or {}
    vlp = f.get("vllm_patches") or {}
    rows = []
    if cc is None:
        why = f"no CUDA GPU visible ({f.get('gpu_reason') or 'torch sees none'})"
        for b in BACKENDS[:-1]:
            rows.append(_row(b, "no", why))
        rows.append(_row("torch-bf16", "yes", "dequantize + bf16 matmul runs anywhere (CPU here: reference only)"))
        return rows
    major, minor = cc
    sm12, sm10 = major == 12, major == 10
    fp4_hw = sm12 or sm10 or major == 11
    harmful = fip.get("harmful_applied", []) + vlp.get("harmful_applied", [])
    harm_note = f"; harmful patches applied here: {', '.join(harmful)} (sm120lab patch revert)" if harmful else ""

    # vLLM CUTLASS grouped (VLLM_CUTLASS / CutlassExpertsFp4)
    if vl is None:
        rows.append(_row(BACKENDS[0], "no", "vLLM not installed"))
    elif sm10:
        rows.append(_row(BACKENDS[0], "yes", "SM100 family: vLLM's grouped NVFP4 CUTLASS kernels target it"))
    elif sm12:
        rows.append(_row(BACKENDS[0], "risky", "vLLM accepts SM120 here, but the seed report got garbage output from "
                         "this path on SM120 with vLLM 0.17.0; check with a correctness diff first",
                         "prefer FLASHINFER_CUTLASS or Marlin"))
    else:
        rows.append(_row(BACKENDS[0], "no", f"sm_{major}{minor} has no FP4 tensor-core MMA (needs SM100/SM120)"))

    # FLASHINFER_CUTLASS
    name = BACKENDS[1]
    if fi is None:
        rows.append(_row(name, "no", "FlashInfer not installed", "pip install flashinfer-python"))
    elif not fp4_hw:
        rows.append(_row(name, "no", f"NVFP4 W4A4 needs FP4 MMA (SM100/SM120); sm_{major}{minor} has none"
                         + ("; FlashInfer < 0.6.7 fp4_quantize is silently wrong on SM90" if major == 9 else "")))
    elif nvcc is None:
        rows.append(_row(name, "no", "FlashInfer JIT-compiles this MoE module and no nvcc was found",
                         "put nvcc >= 12.8 on PATH (or CUDA_HOME)"))
    elif sm12 and nvcc < Version("12.8") or (cc == (12, 1) and nvcc < Version("12.9")):
        rows.append(_row(name, "no", f"nvcc {nvcc} cannot target sm_{major}{minor}a (needs 12.8; SM121: 12.9)",
                         "install CUDA >= 12.9"))
    elif sm12:
        arch = env.get("FLASHINFER_CUDA_ARCH_LIST", "")
        literal = any(a.startswith("12.") and not a[-1].isalpha() for a in arch.split())
        if literal and fi < Version("0.6.7"):
            rows.append(_row(name, "no", f"FLASHINFER_CUDA_ARCH_LIST={arch!r} is taken literally by FlashInfer {fi}: "
                             "compute_120 builds CUTLASS's arch-conditional MMA stub", "setting fi-cuda-arch-list-suffix (12.0a / 12.0f)"))
        elif fip.get("needed_missing"):
            rows.append(_row(name, "slow", "works (seed report), but the TMA warp-specialized grouped-GEMM tactics whose "
                             f"shared storage exceeds {SM120_SMEM_OPTIN:,} B fail to initialise" + harm_note,
                             "patch " + ", ".join(fip["needed_missing"])))
        elif fip.get("needed_applied"):
            rows.append(_row(name, "yes", "needed patches applied: " + ", ".join(fip["needed_applied"]) + harm_note))
        else:
            rows.append(_row(name, "yes", "SM12x module (-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS); stage-count fix "
                             "status unknown for this version (no spec)" + harm_note))
    else:
        rows.append(_row(name, "yes", f"sm_{major}{minor}: FlashInfer CUTLASS fused MoE"))

    # FLASHINFER_TRTLLM
    if fi is None:
        rows.append(_row(BACKENDS[2], "no", "FlashInfer not installed"))
    elif sm10:
        rows.append(_row(BACKENDS[2], "yes", "trtllm-gen cubins exist for sm100/sm103"))
    else:
        rows.append(_row(BACKENDS[2], "no", "trtllm-gen MoE cubins are SM100-family only" + harm_note,
                         "none: capability-check patches only reach missing kernels" if sm12 else ""))

    # FLASHINFER_CUTEDSL
    if fi is None:
        rows.append(_row(BACKENDS[3], "no", "FlashInfer not installed"))
    elif sm10:
        ok = ver.get("nvidia-cutlass-dsl") is not None
        rows.append(_row(BACKENDS[3], "yes" if ok else "no", "tcgen05 CuTe-DSL kernels" + ("" if ok else "; nvidia-cutlass-dsl missing")))
    else:
        rows.append(_row(BACKENDS[3], "no", "kernels use tcgen05/TMEM (SM100 only); SM120 has neither" if sm12 else
                         f"SM100-only kernels; sm_{major}{minor}"))

    # Marlin
    if vl is None:
        rows.append(_row(BACKENDS[4], "no", "vLLM not installed"))
    elif major >= 8:
        rows.append(_row(BACKENDS[4], "yes", "W4A16: FP4 weights dequantized in-kernel, bf16 MMA (seed: 46-49 tok/s on SM120)"))
    else:
        rows.append(_row(BACKENDS[4], "no", f"Marlin needs cc >= 8.0, have {major}.{minor}"))

    # b12x
    if not sm12:
        rows.append(_row(BACKENDS[5], "no", "SM120/SM121-only kernels"))
    elif f.get("b12x") and ver.get("nvidia-cutlass-dsl"):
        rows.append(_row(BACKENDS[5], "yes", "b12x CuTe-DSL MoE for SM12x is importable (unverified here)"))
    elif f.get("b12x"):
        rows.append(_row(BACKENDS[5], "no", "b12x is importable but nvidia-cutlass-dsl (its CuTe DSL) is not",
                         "pip install 'flashinfer-python[b12x]' (pulls nvidia-cutlass-dsl[cu13]>=4.8.0)"))
    else:
        rows.append(_row(BACKENDS[5], "no", "b12x not installed (shipped by FlashInfer 0.7.4; earlier versions not checked)",
                         "pip install 'flashinfer-python[b12x]>=0.7.4'"))

    # sm120lab portable Triton W4A16
    if tr is None:
        rows.append(_row(BACKENDS[6], "no", "Triton not installed"))
    elif major >= 8:
        rows.append(_row(BACKENDS[6], "yes", "in-kernel FP4->bf16 dequant + bf16 tl.dot: any cc >= 8.0"))
    else:
        rows.append(_row(BACKENDS[6], "no", f"bf16 tl.dot needs cc >= 8.0, have {major}.{minor}"))

    # Triton native W4A4 (tl.dot_scaled e2m1)
    if tr is None:
        rows.append(_row(BACKENDS[7], "no", "Triton not installed"))
    elif sm12:
        if tr >= Version("3.9"):
            rows.append(_row(BACKENDS[7], "yes", f"Triton {tr} lowers NVFP4 dot_scaled to mma kind::mxf4nvf4 on sm_{major}{minor} (compile probe; unverified on SM120 hardware)"))
        else:
            rows.append(_row(BACKENDS[7], "no", f"Triton {tr} has no native sm_120 NVFP4 dot_scaled", "Triton >= 3.9"))
    elif sm10:
        rows.append(_row(BACKENDS[7], "yes", "native FP4 dot_scaled via tcgen05 on sm_100"))
    elif major == 9:
        rows.append(_row(BACKENDS[7], "emulated", "on sm_90 dot_scaled upcasts to bf16 (wgmma): correct, not native FP4"))
    else:
        rows.append(_row(BACKENDS[7], "no", f"no FP4 MMA on sm_{major}{minor}"))

    rows.append(_row("torch-bf16", "yes", "dequantize + bf16 matmul: reference, any GPU"))
    return rows


def render(report: dict[str, Any], console=None) -> None:
    """Print the one-screen report with rich."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import sys

    console = console or Console(highlight=False, soft_wrap=False,
                                 width=None if sys.stdout.isatty() else 150)
    f = report["facts"]
    info = report["envinfo"]
    lines = []
    if f["cc"]:
        smem = f["smem_per_block_optin"]
        lines.append(f"GPU        {f['gpu_name']}  cc {f['cc'][0]}.{f['cc'][1]}  driver {f['driver']}  "
                     f"CUDA runtime {f['cuda_runtime']}  smem/block opt-in {smem if smem is not None else '?'} B")
    else:
        lines.append(f"GPU        none: {f['gpu_reason']}")
    lines.append(f"host       {info.get('host')}  {info.get('os')}  Python {info.get('python')}")
    if f["nvcc"]:
        for n in f["nvcc"]:
            lines.append(f"nvcc       {n['version'] or '?'}  {n['path']}")
    else:
        lines.append("nvcc       none found (PATH, CUDA_HOME, /usr/local/cuda*)")
    lines.append("packages   " + "  ".join(f"{k} {v or '-'}" for k, v in f["versions"].items()))
    lines.append("env        " + ("  ".join(f"{k}={v}" for k, v in f["env"].items()) or "(none of the relevant variables set)"))
    for key, label in (("flashinfer_patches", "flashinfer"), ("vllm_patches", "vllm")):
        p = f[key]
        if p.get("available"):
            lines.append(f"patches    {label} {p['version']}: needed-not-applied {p['needed_missing'] or 'none'}, "
                         f"harmful-applied {p['harmful_applied'] or 'none'}")
        else:
            lines.append(f"patches    {label}: {p.get('reason')}")
    for line in lines:
        console.print(line, markup=False)
    colors = {"yes": "green", "no": "red", "slow": "yellow", "risky": "yellow", "emulated": "yellow"}
    tables = [("NVFP4 MoE backends on this machine", report["verdicts"])]
    if f["cc"] != [12, 0] and "verdicts_if_sm120" in report:
        tables.append(("the same software stack on an SM120 GPU (reasoning, unverified on SM120 hardware)",
                       report["verdicts_if_sm120"]))
    for title, rows in tables:
        table = Table(title=title)
        for col in ("backend", "verdict", "why", "needs"):
            table.add_column(col, overflow="fold")
        for r in rows:
            c = colors.get(r["verdict"], "white")
            table.add_row(escape(r["backend"]), f"[{c}]{r['verdict']}[/{c}]", escape(r["why"]), escape(r["needs"]))
        console.print(table)


def run(json_path: str | None = None, command: str = "sm120lab doctor") -> dict[str, Any]:
    """Gather, judge, and (optionally) write the JSON report atomically."""
    report = gather()
    report["verdicts"] = verdicts(report["facts"])
    # the same software stack judged for an SM120 GPU (what a CPU box or an H200 can still say)
    report["verdicts_if_sm120"] = verdicts(report["facts"] | {"cc": [12, 0], "smem_per_block_optin": SM120_SMEM_OPTIN})
    report["command"] = command
    if json_path:
        from .atomic_io import write_json_atomic

        write_json_atomic(json_path, report)
    return report
