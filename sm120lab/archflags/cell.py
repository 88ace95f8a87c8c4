"""One cell of the matrix: (probe, toolkit, target) -> status, first error, time, SASS evidence, macros.

Status:
- ``accepted``: PTX and cubin were produced;
- ``rejected-arch``: the toolkit does not know the architecture name (nvcc "Unsupported gpu
  architecture", NVRTC "invalid value for --gpu-architecture", ptxas "not defined for option
  'gpu-name'");
- ``rejected-ptxas``: ptxas refused the PTX for that target (an instruction the target lacks, or
  "cannot be compiled to future architecture" for a cross target). nvcc 13 validates PTX with
  ``ptxas -arch=compute_XX`` even for ``-ptx``, so such errors can come from the front-end step;
- ``error``: anything else (a C++ error in the front end).

Cells are cached as JSON under ``$SM120LAB_ARCHFLAGS_CACHE`` or ``~/.cache/sm120lab/archflags``,
keyed by sha256 of (toolkit version, front end, probe source, target, flags, schema).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from .. import paths
from ..atomic_io import write_json_atomic
from ..toolchains.compile import disassemble, first_error_line, frontend_ptx, ptxas
from ..toolchains.toolkit import Toolkit
from .probes import MACRO_PROBE, Probe, evidence, macro_report_source, macros_from_ptx, sass_opcodes
from .targets import Target

SCHEMA = 3
_ARCH_NAME_ERRORS = re.compile(
    r"Unsupported gpu architecture|invalid value for --gpu-architecture|"
    r"is not defined for option 'gpu-name'|Unknown option '?-arch|unsupported target", re.I)


def cache_root() -> Path:
    value = os.environ.get("SM120LAB_ARCHFLAGS_CACHE")
    return Path(value).expanduser() if value else paths.cache_root() / "archflags"


def full_source(probe: Probe) -> str:
    src = probe.source()
    if probe.name != MACRO_PROBE:
        src = src + "\n// ---- appended by sm120lab: macro report ----\n" + macro_report_source()
    return src


def cell_key(tk: Toolkit, probe: Probe, target: Target, flags: tuple[str, ...] = ()) -> str:
    blob = json.dumps([SCHEMA, tk.version, tk.frontend, full_source(probe), target.arch, target.code, list(flags)])
    return hashlib.sha256(blob.encode()).hexdigest()


def _classify(log: str) -> str:
    if _ARCH_NAME_ERRORS.search(log):
        return "rejected-arch"
    if "ptxas" in log:
        return "rejected-ptxas"
    return "error"


def compile_cell(tk: Toolkit, probe: Probe, target: Target, cuobjdump: str | None,
                 flags: tuple[str, ...] = (), use_cache: bool = True) -> dict:
    """Compile one cell (or read it from the cache) and return its record."""
    key = cell_key(tk, probe, target, flags)
    cache_file = cache_root() / key[:2] / f"{key}.json"
    if use_cache and cache_file.is_file():
        try:
            cell = json.loads(cache_file.read_text())
            if cell.get("sass_read") or cuobjdump is None or cell.get("status") != "accepted":
                cell["cached"] = True
                if cell.get("error"):
                    cell["error"] = first_error_line(cell["error"])
                return cell
        except json.JSONDecodeError:
            pass
    cell = {"probe": probe.name, "toolkit": tk.name, "toolkit_version": tk.version, "frontend": tk.frontend,
           "target": target.label, "arch": target.arch, "code": target.code, "flags": list(flags),
           "status": None, "stage": None, "error": None, "seconds": None, "sass": [], "stub": False,
           "feature_in_sass": False, "macros": {}, "sass_read": False, "n_instructions": None, "cached": False}
    t0 = time.perf_counter()
    fe = frontend_ptx(tk, full_source(probe), target.arch, list(flags))
    if not fe.ok:
        cell.update(status=_classify(fe.log), stage="frontend", error=first_error_line(fe.log),
                   seconds=round(time.perf_counter() - t0, 3))
    else:
        ptx = fe.output
        cell["macros"] = macros_from_ptx(ptx)
        cell["stub"] = "vprintf" in ptx
        pa = ptxas(tk, ptx, target.code)
        if not pa.ok:
            cell.update(status=_classify(pa.log), stage="ptxas", error=first_error_line(pa.log),
                       seconds=round(time.perf_counter() - t0, 3))
        else:
            cell.update(status="accepted", seconds=round(time.perf_counter() - t0, 3))
            if cuobjdump:
                dis = disassemble(cuobjdump, pa.output)
                if dis.ok:
                    ops = sass_opcodes(dis.output)
                    cell["sass"] = evidence(probe, ops)
                    cell["n_instructions"] = len(ops)
                    cell["sass_read"] = True
                    cell["has_vprintf_call"] = cell["stub"] and any(o.startswith("CALL") for o in ops)
    cell["feature_in_sass"] = bool(cell["sass"])
    if cell["status"] == "accepted" and probe.may_stub:
        cell["stub"] = cell["stub"] and not cell["feature_in_sass"]
    elif probe.name != MACRO_PROBE and not probe.may_stub:
        cell["stub"] = False
    if use_cache and cell["status"] is not None:
        write_json_atomic(cache_file, {k: v for k, v in cell.items() if k != "cached"})
    return cell
