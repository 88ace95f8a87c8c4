"""Views of a recorded matrix: a flat table of cells and the probe x target grid per toolkit,
with one short code per cell for the heatmap.

Codes: ``feature`` (accepted, the feature's opcode is in the SASS), ``stub`` (accepted, compiled
into the printf+trap fallback), ``accepted`` (accepted, no proving opcode: the macro probe, or
no SASS tool), ``ptxas`` (rejected by ptxas), ``arch`` (toolkit does not know the target), ``error``.
"""

from __future__ import annotations

import json
from pathlib import Path

CODES = ("feature", "accepted", "stub", "ptxas", "arch", "error")


def load(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"matrix file {p} not found: run `sm120lab archflags` first")
    return json.loads(p.read_text())


def cell_code(c: dict) -> str:
    s = c.get("status")
    if s == "accepted":
        if c.get("stub"):
            return "stub"
        if c.get("feature_in_sass") or c.get("ptx_instructions"):
            return "feature"
        return "accepted"
    return {"rejected-ptxas": "ptxas", "rejected-arch": "arch"}.get(s, "error")


def cells_frame(matrix: dict):
    import pandas as pd
    df = pd.DataFrame(matrix["cells"])
    df["code"] = [cell_code(c) for c in matrix["cells"]]
    return df


def grid(matrix: dict, toolkit: str):
    """probe x target table of codes for one toolkit (targets in recorded order)."""
    df = cells_frame(matrix)
    sub = df[df["toolkit"] == toolkit]
    if sub.empty:
        raise ValueError(f"toolkit {toolkit!r} not in matrix (have {sorted(df['toolkit'].unique())})")
    order_t = [t for t in dict.fromkeys(sub["target"])]
    order_p = [p for p in dict.fromkeys(sub["probe"])]
    return sub.pivot(index="probe", columns="target", values="code").reindex(index=order_p, columns=order_t)


def find(matrix: dict, toolkit: str, probe: str, target: str) -> dict | None:
    for c in matrix["cells"]:
        if c["toolkit"] == toolkit and c["probe"] == probe and c["target"] == target:
            return c
    return None


def describe(c: dict | None) -> str:
    """One line for a cell: 'toolkit probe target: status, evidence or first error'."""
    if c is None:
        return "(cell not in matrix)"
    head = f"{c['toolkit']} {c['probe']} {c['target']}: {c['status']}"
    if c["status"] == "accepted":
        ev = c.get("sass") or c.get("ptx_instructions") or []
        if c.get("stub"):
            return head + ", printf+trap stub (vprintf call, no MMA in SASS)"
        return head + (", " + ", ".join(ev) if ev else "")
    return head + f" ({c.get('error')})"
