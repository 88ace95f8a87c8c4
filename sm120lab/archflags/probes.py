"""The compile probes: one small kernel per feature in ``sm120lab/archflags/cuda_probes/*.cu`` and the SASS
opcodes that prove the feature is in the machine code (read from cuobjdump 13.2 output)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROBE_DIR = Path(__file__).resolve().parent / "cuda_probes"


@dataclass(frozen=True)
class Probe:
    name: str
    feature: str           # the PTX being probed
    evidence: str          # regex over SASS opcodes that proves the feature
    may_stub: bool = False  # compiles everywhere into a printf stub where the feature is off

    @property
    def path(self) -> Path:
        return PROBE_DIR / f"{self.name}.cu"

    def source(self) -> str:
        return self.path.read_text()


PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("mma_nvfp4", "mma.sync m16n8k64 kind::mxf4nvf4 block_scale scale_vec::4X ue4m3 (NVFP4)", r"^OMMA\.SF"),
    Probe("mma_mxfp4", "mma.sync m16n8k64 kind::mxf4nvf4 block_scale scale_vec::2X ue8m0 (MXFP4)", r"^OMMA\.SF"),
    Probe("mma_mxf8f6f4", "mma.sync m16n8k32 kind::mxf8f6f4 block_scale scale_vec::1X (e4m3 x e2m1)", r"^QMMA\.SF"),
    Probe("mma_fp8", "mma.sync m16n8k32 e4m3 x e4m3 (no block scale)", r"^(QMMA|HMMA)"),
    Probe("cvt_e2m1", "cvt.rn.satfinite.e2m1x2.f32", r"^F2FP\.SATFINITE\.E2M1"),
    Probe("wgmma", "wgmma.mma_async m64n8k16 bf16", r"^HGMMA"),
    Probe("tcgen05_alloc", "tcgen05.alloc / dealloc", r"^UTCATOMSWS"),
    Probe("griddepcontrol", "griddepcontrol.wait / launch_dependents (PDL)", r"^(ACQBULK|PREEXIT)"),
    Probe("tma_load", "cp.async.bulk.tensor.2d (TMA) + mbarrier", r"^UTMALDG"),
    Probe("arch_conditional", "CUTLASS-style guarded NVFP4 MMA (FEAT_SM12x_ALL or FAMILY_SPECIFIC)", r"^OMMA\.SF", True),
    Probe("arch_conditional_feat_only", "guarded NVFP4 MMA, FEAT_SM12x_ALL only", r"^OMMA\.SF", True),
    Probe("macros", "architecture macros", r"^$"),
)}

MACRO_PROBE = "macros"
_MACRO_LINE = re.compile(r"//\s*SM120LAB_MACRO\s+(\w+)=(\S+)")
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def get_probe(name: str) -> Probe:
    try:
        return PROBES[name]
    except KeyError:
        raise ValueError(f"--probe {name!r}: unknown probe; expected one of {', '.join(PROBES)}") from None


def macro_report_source() -> str:
    """The macro probe renamed, appended to every probe so each cell reports its macros."""
    return PROBES[MACRO_PROBE].source().replace("probe_macros", "sm120lab_macro_report")


def macros_from_ptx(ptx: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in _MACRO_LINE.finditer(ptx)}


def sass_opcodes(sass: str) -> list[str]:
    """Every instruction opcode (with modifiers) in cuobjdump -sass text, in order."""
    return [m.group(1) for m in _SASS_LINE.finditer(sass)]


def evidence(probe: Probe, opcodes: list[str]) -> list[str]:
    rx = re.compile(probe.evidence)
    if probe.evidence == r"^$":
        return []
    return sorted({op for op in opcodes if rx.search(op)})
