"""Verdicts on the seed report's arch-flag claims, each computed from matrix cells (never typed in).

Each verdict is TRUE / FALSE / NOT TESTED plus the cells that decide it (``summary.describe``).
"""

from __future__ import annotations

from packaging.version import Version

from ..toolchains.toolkit import version_key
from .summary import describe, find


def _toolkits(matrix: dict) -> list[str]:
    names = [t["name"] for t in matrix.get("toolkits", [])]
    return sorted(names, key=version_key)


def _ok(c: dict | None, probe_evidence: str | None = "OMMA.SF") -> bool:
    if c is None or c["status"] != "accepted" or c.get("stub"):
        return False
    return probe_evidence is None or any(probe_evidence in op for op in c.get("sass", []))


def _stub(c: dict | None) -> bool:
    return c is not None and c["status"] == "accepted" and bool(c.get("stub"))


def _two_cells(matrix: dict, toolkit: str | None, a: tuple[str, str], b: tuple[str, str], holds,
               true: str = "TRUE") -> tuple[str, list[str]]:
    """A claim decided by two (probe, target) cells of one toolkit: NOT TESTED when either is missing,
    ``true`` when ``holds(cell_a, cell_b)``, else FALSE; with both cells described as evidence."""
    ca = find(matrix, toolkit, *a) if toolkit else None
    cb = find(matrix, toolkit, *b) if toolkit else None
    if ca is None or cb is None:
        v = "NOT TESTED"
    else:
        v = true if holds(ca, cb) else "FALSE"
    return v, [describe(ca), describe(cb)]


def verdicts(matrix: dict) -> list[dict]:
    tks = _toolkits(matrix)
    newest = tks[-1] if tks else None
    out = []

    # 1. plain compute_120: the CUTLASS error is a run-time stub, not a compile error
    v, ev = _two_cells(matrix, newest, ("arch_conditional", "sm_120"), ("mma_nvfp4", "sm_120"),
                       lambda stub, direct: _stub(stub) and direct["status"] == "rejected-ptxas",
                       "TRUE (at run time, not compile time)")
    out.append({"claim": "compute_120 gives 'Arch conditional MMA instruction used without targeting "
                         "appropriate compute capability'", "verdict": v, "evidence": ev})

    # 2. 120a enables the block-scaled MMA from CUDA 12.8
    rows = {tk: find(matrix, tk, "mma_nvfp4", "sm_120a") for tk in tks}
    c128 = rows.get("12.8")
    if c128 is None:
        v = "NOT TESTED (no CUDA 12.8 in the matrix)"
    else:
        v = "TRUE" if _ok(c128) and all(_ok(c) for c in rows.values() if c is not None) else "FALSE"
    out.append({"claim": "compute_120a enables the NVFP4 block-scaled MMA from CUDA 12.8",
                "verdict": v, "evidence": [describe(c) for c in rows.values()]})

    # 3. 120f needs CUDA 13.0
    f_rows = {tk: find(matrix, tk, "mma_nvfp4", "sm_120f") for tk in tks}
    older_ok = [tk for tk, c in f_rows.items() if _ok(c) and version_key(tk) < Version("13.0")]
    if not any(version_key(tk) < Version("13.0") for tk in f_rows):
        v = "NOT TESTED (no toolkit older than 13.0 in the matrix)"
    elif older_ok:
        v = f"FALSE (accepted from {older_ok[0]})"
    else:
        v = "TRUE"
    out.append({"claim": "compute_120f needs CUDA 13.0", "verdict": v,
                "evidence": [describe(c) for c in f_rows.values()]})

    # 4. one 120f build serves SM121; a 120a build does not
    v, ev = _two_cells(matrix, newest, ("mma_nvfp4", "compute_120f->sm_121a"), ("mma_nvfp4", "compute_120a->sm_121a"),
                       lambda f, a: _ok(f) and a["status"] == "rejected-ptxas")
    out.append({"claim": "one compute_120f build serves SM121 (DGX Spark); a compute_120a build does not",
                "verdict": v, "evidence": ev})

    # 5. 120a and 120f give the same machine code for the MMA
    c_a = find(matrix, newest, "mma_nvfp4", "sm_120a") if newest else None
    c_f = find(matrix, newest, "mma_nvfp4", "sm_120f") if newest else None
    if c_a is None or c_f is None:
        v = "NOT TESTED"
    else:
        v = "TRUE" if _ok(c_a) and _ok(c_f) and c_a["sass"] == c_f["sass"] else "FALSE"
    out.append({"claim": "sm_120f emits the same block-scaled MMA instruction as sm_120a",
                "verdict": v, "evidence": [describe(c_a), describe(c_f)]})

    # 6. code guarded on FEAT_SM120_ALL alone compiles out under 120f
    c_f = find(matrix, newest, "arch_conditional_feat_only", "sm_120f") if newest else None
    v = "NOT TESTED" if c_f is None else ("TRUE" if _stub(c_f) else "FALSE")
    out.append({"claim": "a kernel guarded only on __CUDA_ARCH_FEAT_SM120_ALL becomes the stub under sm_120f",
                "verdict": v, "evidence": [describe(c_f)]})
    return out


def verdict_table(matrix: dict):
    import pandas as pd
    rows = verdicts(matrix)
    return pd.DataFrame([{"claim": r["claim"], "verdict": r["verdict"], "evidence": " | ".join(r["evidence"])}
                         for r in rows])
