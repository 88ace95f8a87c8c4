"""The doctor's facts, rules and report (the package docstring, :mod:`sm120lab.doctor`, says what each does)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from sm120lab.enums import StrEnum

from ..constants import SM120_SMEM_LIMIT
from ..envinfo import relevant_env


class Answer(StrEnum):
    """The doctor's prediction for one backend (a str-Enum: JSON and comparisons see the value)."""

    YES = "yes"
    SLOW = "slow"
    RISKY = "risky"
    EMULATED = "emulated"
    NO = "no"


#: backends vLLM / FlashInfer offer that the lab has no adapter for (judged from the wheels only)
NO_ADAPTER = ("flashinfer-trtllm", "flashinfer-cutedsl")


def _v(text: str | None) -> Version | None:
    """``packaging`` version of ``text`` (``"12.9.86"``, ``"2.13.0+cu130"``), None if absent or invalid."""
    if not text:
        return None
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        return None


def _patch_summary(package: str) -> dict[str, Any]:
    """Installed package's patch audit: version, needed-but-unapplied and harmful-applied ids."""
    try:
        from ..patches import engine
        from ..patches import textmatch as tm
        from ..patches.site import locate
        from ..patches.spec import Classification, import_name_of, load_specs

        tree = locate(package, import_name_of(package))
        specs = load_specs(package, tree.version)
        states = engine.status(tree, specs)
    except Exception as exc:  # noqa: BLE001 - doctor reports, never crashes
        return {"available": False, "reason": str(exc).splitlines()[0]}

    def ids(cls: Classification, applied: bool) -> list[str]:
        return [s.patch.id for s in states if s.patch.classification == cls and (s.status == tm.APPLIED) == applied]

    return {
        "available": True, "version": tree.version, "root": str(tree.root),
        "needed_missing": ids(Classification.NEEDED, False),
        "needed_applied": ids(Classification.NEEDED, True),
        "harmful_applied": ids(Classification.HARMFUL, True),
        "spec_ids": [s.patch.id for s in states],
    }


def gather() -> dict[str, Any]:
    """All facts the verdicts use (JSON-ready)."""
    from ..envinfo import collect

    info = collect()
    gpu = info.get("gpu", {})
    cc = None
    if gpu.get("available") and gpu.get("compute_capability"):
        major, minor = gpu["compute_capability"].split(".")
        cc = [int(major), int(minor)]
    nvccs = info.get("nvcc", [])
    nvcc_versions = sorted((n["version"] for n in nvccs if _v(n.get("version"))), key=_v)
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
        "env": relevant_env(),
        "b12x": _find("b12x"),
        "flashinfer_patches": _patch_summary("flashinfer-python") if pk.get("flashinfer-python") else
                              {"available": False, "reason": "flashinfer-python not installed"},
        "vllm_patches": _patch_summary("vllm") if pk.get("vllm") else
                        {"available": False, "reason": "vllm not installed"},
    }
    return {"facts": facts, "envinfo": info}


def _find(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Facts:
    """The parsed facts one rule reads (built once per :func:`verdicts` call)."""

    raw: dict[str, Any]
    cc: tuple[int, int] | None
    fi: Version | None
    vllm: Version | None
    triton: Version | None
    nvcc: Version | None
    cuda: Version | None
    harm_note: str

    @property
    def major(self) -> int:
        return self.cc[0] if self.cc else -1

    @property
    def sm(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}" if self.cc else "no GPU"

    @property
    def sm12(self) -> bool:
        return self.major == 12

    @property
    def sm10(self) -> bool:
        return self.major == 10

    @property
    def fp4_hw(self) -> bool:
        return self.major in (10, 11, 12)


def _row(backend: str, verdict: Answer, why: str, needs: str = "") -> dict[str, str]:
    return {"backend": backend, "verdict": verdict.value, "why": why, "needs": needs}


Rule = Callable[[Facts], tuple[Answer, str, str]]


def _anywhere(what: str) -> Rule:
    return lambda f: (Answer.YES, what + ("" if f.cc else " (CPU here)"), "")


def _vllm_cutlass_fp4(f: Facts):
    if f.vllm is None:
        return Answer.NO, "vLLM not installed", "pip install vllm"
    if f.sm10:
        return Answer.YES, "SM100 family: vLLM's grouped NVFP4 CUTLASS kernels target it", ""
    if f.sm12:
        return (Answer.RISKY, "vLLM accepts SM120 here, but the seed report got garbage output from this path on "
                "SM120 with vLLM 0.17.0; check with a correctness diff first", "prefer flashinfer-cutlass or vllm-marlin")
    return Answer.NO, f"{f.sm} has no FP4 tensor-core MMA (needs SM100/SM120)", ""


def _flashinfer_cutlass(f: Facts):
    if f.fi is None:
        return Answer.NO, "FlashInfer not installed", "pip install flashinfer-python"
    if not f.fp4_hw:
        return Answer.NO, (f"NVFP4 W4A4 needs FP4 MMA (SM100/SM120); {f.sm} has none"
                           + ("; FlashInfer < 0.6.7 fp4_quantize is silently wrong on SM90" if f.major == 9 else "")), ""
    if f.nvcc is None:
        return (Answer.NO, "FlashInfer JIT-compiles this MoE module and no nvcc was found",
                "put nvcc >= 12.8 on PATH (or CUDA_HOME)")
    if f.sm12 and f.nvcc < Version("12.8") or (f.cc == (12, 1) and f.nvcc < Version("12.9")):
        return Answer.NO, f"nvcc {f.nvcc} cannot target {f.sm}a (needs 12.8; SM121: 12.9)", "install CUDA >= 12.9"
    if not f.sm12:
        return Answer.YES, f"{f.sm}: FlashInfer CUTLASS fused MoE", ""
    env = f.raw.get("env", {})
    fip = f.raw.get("flashinfer_patches") or {}
    arch = env.get("FLASHINFER_CUDA_ARCH_LIST", "")
    literal = any(a.startswith("12.") and not a[-1].isalpha() for a in arch.split())
    if literal and f.fi < Version("0.6.7"):
        return (Answer.NO, f"FLASHINFER_CUDA_ARCH_LIST={arch!r} is taken literally by FlashInfer {f.fi}: compute_120 "
                "builds CUTLASS's arch-conditional MMA stub", "setting fi-cuda-arch-list-suffix (12.0a / 12.0f)")
    if fip.get("needed_missing"):
        return (Answer.SLOW, "works (seed report), but the TMA warp-specialized grouped-GEMM tactics whose shared "
                f"storage exceeds {SM120_SMEM_LIMIT:,} B fail to initialise" + f.harm_note,
                "patch " + ", ".join(fip["needed_missing"]))
    if fip.get("needed_applied"):
        return Answer.YES, "needed patches applied: " + ", ".join(fip["needed_applied"]) + f.harm_note, ""
    return (Answer.YES, "SM12x module (-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS); stage-count fix status unknown "
            "for this version (no spec)" + f.harm_note, "")


def _flashinfer_sm12x(f: Facts):
    ver = f.raw.get("versions", {})
    if not f.sm12:
        return Answer.NO, "SM120/SM121-only kernels (FlashInfer's SM12x CuTe-DSL runners)", ""
    if f.fi is None or f.fi < Version("0.7.4"):
        return (Answer.NO, f"FlashInfer {f.fi or 'not installed'}: the SM12x runners ship from 0.7.4",
                "pip install 'flashinfer-python[b12x]>=0.7.4'")
    if not ver.get("nvidia-cutlass-dsl"):
        return (Answer.NO, "nvidia-cutlass-dsl (the CuTe DSL these runners need) is not installed",
                "pip install 'flashinfer-python[b12x]' (pulls nvidia-cutlass-dsl[cu13]>=4.8.0)")
    if f.cuda is None or f.cuda < Version("13.0"):
        return Answer.NO, f"needs a CUDA >= 13.0 torch build; this one is CUDA {f.cuda or '?'}", "a cu130 torch"
    return Answer.YES, "FlashInfer SM12x CuTe-DSL MoE runner is importable (unverified on SM120 hardware)", ""


def _w4a16_on_sm80(f: Facts, version, package: str, yes: str, needs: str):
    """A W4A16 backend (FP4 weights dequantized in-kernel, bf16 MMA): installed and cc >= 8.0, or why not."""
    if version is None:
        return Answer.NO, f"{package} not installed", f"pip install {package.lower()}"
    if f.major >= 8:
        return Answer.YES, yes, ""
    return Answer.NO, f"{needs} needs cc >= 8.0, have {f.sm}", ""


def _triton_w4a16(f: Facts):
    return _w4a16_on_sm80(f, f.triton, "Triton", "in-kernel FP4->bf16 dequant + bf16 tl.dot: any cc >= 8.0",
                          "bf16 tl.dot")


def _triton_w4a4(f: Facts):
    if f.triton is None:
        return Answer.NO, "Triton not installed", "pip install triton"
    if f.sm12:
        if f.triton >= Version("3.9"):
            return (Answer.YES, f"Triton {f.triton} lowers NVFP4 dot_scaled to mma kind::mxf4nvf4 on {f.sm} "
                    "(compile probe; unverified on SM120 hardware)", "")
        return Answer.NO, f"Triton {f.triton} has no native sm_120 NVFP4 dot_scaled", "Triton >= 3.9"
    if f.sm10:
        return Answer.YES, "native FP4 dot_scaled via tcgen05 on sm_100", ""
    if f.major == 9:
        return Answer.EMULATED, "on sm_90 dot_scaled upcasts to bf16 (wgmma): correct, not native FP4", ""
    if f.major >= 8:
        return Answer.EMULATED, f"{f.sm}: exact in-kernel dequant, no FP4 MMA", ""
    return Answer.NO, f"no FP4 MMA on {f.sm}", ""


def _vllm_marlin(f: Facts):
    return _w4a16_on_sm80(f, f.vllm, "vLLM", "W4A16: FP4 weights dequantized in-kernel, bf16 MMA (seed: 46-49 tok/s "
                          "on SM120)", "Marlin")


def _flashinfer_trtllm(f: Facts):
    if f.fi is None:
        return Answer.NO, "FlashInfer not installed", ""
    if f.sm10:
        return Answer.YES, "trtllm-gen cubins exist for sm100/sm103", ""
    return (Answer.NO, "trtllm-gen MoE cubins are SM100-family only" + f.harm_note,
            "none: capability-check patches only reach missing kernels" if f.sm12 else "")


def _flashinfer_cutedsl(f: Facts):
    if f.fi is None:
        return Answer.NO, "FlashInfer not installed", ""
    if f.sm10:
        ok = f.raw.get("versions", {}).get("nvidia-cutlass-dsl") is not None
        return (Answer.YES if ok else Answer.NO), "tcgen05 CuTe-DSL kernels" + ("" if ok else "; nvidia-cutlass-dsl missing"), ""
    return Answer.NO, ("kernels use tcgen05/TMEM (SM100 only); SM120 has neither" if f.sm12 else
                       f"SM100-only kernels; {f.sm}"), ""


#: backends that run without a GPU
CPU_OK = ("reference", "emulated-w4a4", "torch-bf16")

#: one rule per backend, keyed by the registry's names (:func:`sm120lab.moe.backends.backend_names`),
#: then the backends in :data:`NO_ADAPTER`
RULES: dict[str, Rule] = {
    "reference": _anywhere("fp64 per-expert loop over dequantized weights: the ground truth, any device"),
    "emulated-w4a4": _anywhere("NVFP4 activations x NVFP4 weights in exact fp32 math: any device"),
    "torch-bf16": _anywhere("dequantize + bf16 matmul: any device"),
    "flashinfer-b12x-w4a16": _flashinfer_sm12x,
    "flashinfer-b12x-w4a4": _flashinfer_sm12x,
    "flashinfer-cutlass": _flashinfer_cutlass,
    "flashinfer-sm12x-w4a16": _flashinfer_sm12x,
    "flashinfer-sm12x-w4a4": _flashinfer_sm12x,
    "triton-w4a16": _triton_w4a16,
    "triton-w4a4": _triton_w4a4,
    "vllm-cutlass-fp4": _vllm_cutlass_fp4,
    "vllm-marlin": _vllm_marlin,
    "flashinfer-trtllm": _flashinfer_trtllm,
    "flashinfer-cutedsl": _flashinfer_cutedsl,
}


def backend_order() -> list[str]:
    """The registry's backend names in its order, then :data:`NO_ADAPTER`."""
    from ..moe.backends import backend_names

    return [*backend_names(), *NO_ADAPTER]


def verdicts(f: dict[str, Any]) -> list[dict[str, str]]:
    """One row per backend (:func:`backend_order`) for the facts ``f`` (see :func:`gather`)."""
    fip = f.get("flashinfer_patches") or {}
    vlp = f.get("vllm_patches") or {}
    harmful = fip.get("harmful_applied", []) + vlp.get("harmful_applied", [])
    ver = f.get("versions", {})
    facts = Facts(
        raw=f, cc=tuple(f["cc"]) if f.get("cc") else None, fi=_v(ver.get("flashinfer-python")),
        vllm=_v(ver.get("vllm")), triton=_v(ver.get("triton")), nvcc=_v(f.get("nvcc_max")), cuda=_v(f.get("cuda_runtime")),
        harm_note=f"; harmful patches applied here: {', '.join(harmful)} (sm120lab patch revert)" if harmful else "")
    rows = []
    for name in backend_order():
        rule = RULES.get(name)
        if rule is None:
            rows.append(_row(name, Answer.NO, "no doctor rule for this backend yet", "add one to sm120lab.doctor.RULES"))
        elif facts.cc is None and name not in CPU_OK:
            rows.append(_row(name, Answer.NO, f"no CUDA GPU visible ({f.get('gpu_reason') or 'torch sees none'})"))
        else:
            rows.append(_row(name, *rule(facts)))
    return rows


def measure(device: str = "cuda", preset: str = "tiny", seed: int = 0) -> dict[str, dict[str, Any]]:
    """Run every registry backend through the correctness harness on ``device``.

    Returns:
        ``{backend: {"verdict": correct|degraded|garbage|skipped|error, "reason": str, "seed": int}}``;
        ``{"_harness": {"verdict": "error", "reason": ...}}`` when the harness itself failed.
    """
    try:
        from ..moe import make_moe_problem
        from ..moe.harness import check

        problem = make_moe_problem(preset, seed=seed, device=device)
        result = check(problem, keep_output=False)
    except Exception as exc:  # noqa: BLE001 - the doctor reports, never crashes
        text = str(exc).strip().splitlines()
        return {"_harness": {"verdict": "error", "reason": f"{type(exc).__name__}: {text[0][:200] if text else ''}"}}
    out = {}
    for name, rep in result.reports.items():
        reason = rep.reason or "; ".join(rep.reasons[:2])
        out[name] = {"verdict": str(rep.verdict or rep.status), "reason": reason, "seed": rep.seed}
    return out


def render(report: dict[str, Any], console=None) -> None:
    """Print the one-screen report with rich."""
    import sys

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

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
    g = report.get("guide") or {}
    if "error" in g:
        lines.append(f"guide      not available: {g['error']}")
    elif g:
        lines.append(f"guide      {g['gpu']}: vLLM {g['vllm']} + FlashInfer {g['flashinfer-python']} + torch {g['torch']}, "
                     f"--moe-backend {g['moe_backend']}, FLASHINFER_CUDA_ARCH_LIST={g['FLASHINFER_CUDA_ARCH_LIST']} "
                     "(sm120lab recommend)")
    for line in lines:
        console.print(line, markup=False)
    colors = {"yes": "green", "no": "red", "slow": "yellow", "risky": "yellow", "emulated": "yellow"}
    tables = [("NVFP4 MoE backends on this machine", report["verdicts"])]
    if f["cc"] != [12, 0] and "verdicts_if_sm120" in report:
        tables.append(("the same software stack on an SM120 GPU (reasoning, unverified on SM120 hardware)",
                       report["verdicts_if_sm120"]))
    measured = report.get("measured") or {}
    mcolors = {"correct": "green", "degraded": "yellow", "garbage": "red", "error": "red", "skipped": "white"}
    if "_harness" in measured:
        console.print(f"measured   the correctness harness failed: {measured['_harness']['reason']}", markup=False)
    for i, (title, rows) in enumerate(tables):
        show_measured = i == 0 and bool(measured) and "_harness" not in measured
        table = Table(title=title + (f" (measured on {report.get('measured_device')})" if show_measured else ""))
        cols = ("backend", "predicted", "measured", "why", "needs") if show_measured else ("backend", "verdict", "why", "needs")
        for col in cols:
            table.add_column(col, overflow="fold")
        for r in rows:
            c = colors.get(r["verdict"], "white")
            cells = [escape(r["backend"]), f"[{c}]{r['verdict']}[/{c}]"]
            if show_measured:
                m = measured.get(r["backend"])
                mv = m["verdict"] if m else "-"
                mc = mcolors.get(mv, "white")
                cells.append(f"[{mc}]{mv}[/{mc}]" + (f" ({escape(m['reason'][:80])})" if m and m.get("reason") and mv != "correct" else ""))
            table.add_row(*cells, escape(r["why"]), escape(r["needs"]))
        console.print(table)


def guide_summary(envinfo: dict | None = None) -> dict[str, Any]:
    """The decision guide's answer for this machine's GPU (or the RTX PRO 6000 off SM12x): the same
    block `sm120lab recommend` opens with, reduced to what doctor prints."""
    from ..recommend import answer_block

    try:
        b = answer_block(machine=envinfo)
    except (ValueError, OSError) as exc:
        return {"error": str(exc)}
    arch = next((e.value for e in b.exports if e.name == "FLASHINFER_CUDA_ARCH_LIST"), None)
    return {"gpu": b.gpu, "vllm": b.vllm, "flashinfer-python": b.flashinfer, "torch": b.torch,
            "moe_backend": b.moe_backend, "FLASHINFER_CUDA_ARCH_LIST": arch, "install": b.install,
            "serve": b.serve_line, "verify": b.verify}


def run(json_path: str | None = None, command: str = "sm120lab doctor", *, measure_on: str | None = "auto") -> dict[str, Any]:
    """Gather, judge, measure, and (optionally) write the JSON report atomically.

    Args:
        json_path: where to write the report (atomically), or None.
        command: the recorded command line.
        measure_on: ``"auto"`` (default): run the correctness harness on the GPU when one is
            visible; ``"cuda"`` / ``"cpu"``: on that device; None: predict only.

    Returns:
        The report: ``facts``, ``envinfo``, ``verdicts``, ``verdicts_if_sm120``, ``command``, and
        with a measurement ``measured`` (see :func:`measure`) and ``measured_device``.

    Raises:
        OSError: ``json_path`` cannot be written.
    """
    report = gather()
    report["verdicts"] = verdicts(report["facts"])
    # the same software stack judged for an SM120 GPU (what a CPU box or an H200 can still say)
    report["verdicts_if_sm120"] = verdicts(report["facts"] | {"cc": [12, 0], "smem_per_block_optin": SM120_SMEM_LIMIT})
    device = ("cuda" if report["facts"]["cc"] else None) if measure_on == "auto" else measure_on
    if device:
        report["measured"] = measure(device)
        report["measured_device"] = device + (f" ({report['facts']['gpu_name']})" if device == "cuda" else "")
    report["guide"] = guide_summary(report["envinfo"])
    report["command"] = command
    if json_path:
        from ..atomic_io import write_json_atomic

        write_json_atomic(json_path, report)
    return report


def failures(report: dict[str, Any]) -> list[str]:
    """Backends whose measured verdict is ``garbage`` or ``error`` (and a failed harness)."""
    return [f"{name}: {m['verdict']}" for name, m in (report.get("measured") or {}).items()
            if m["verdict"] in ("garbage", "error")]
