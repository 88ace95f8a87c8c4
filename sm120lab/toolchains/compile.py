"""The three compile steps every probe goes through, for any discovered toolkit:

1. front end, CUDA C++ -> PTX for a virtual arch (``compute_120f``): ``nvcc -ptx -arch=...``
   where the toolkit has a full nvcc, else NVRTC (:mod:`sm120lab.toolchains.nvrtc`);
2. ``ptxas -arch=sm_XX`` of the same toolkit, PTX -> cubin (this is also what ``nvcc -c`` runs);
3. ``cuobjdump -sass`` (13.2+ from PyPI, :func:`~sm120lab.toolchains.discover.find_sass_tool`).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .nvrtc import compile_ptx as nvrtc_compile_ptx
from .toolkit import Toolkit


@dataclass
class StepResult:
    ok: bool
    log: str
    seconds: float
    output: bytes | str | None = None


_TMP_DIR = re.compile(r"/\S*?sm120lab-(?:nvcc|ptxas)-[^/\s]+/")


def first_error_line(log: str) -> str | None:
    """The first line of a compiler log that says error/fatal, else the first non-empty one
    (temporary folder names removed, so the line is the same on every machine)."""
    lines = [_TMP_DIR.sub("", line).strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        low = line.lower()
        if "error" in low or "fatal" in low:
            return line
    return lines[0] if lines else None


def frontend_ptx(tk: Toolkit, source: str, arch: str, options: list[str] | None = None,
                 timeout: float = 600) -> StepResult:
    """CUDA C++ source text -> PTX text for virtual architecture ``arch``."""
    options = list(options or [])
    t0 = time.perf_counter()
    if tk.frontend == "nvrtc":
        incs = [f"-I{d}" for d in tk.include_dirs]
        res = nvrtc_compile_ptx(tk.nvrtc_lib, source, arch, incs + options, timeout=timeout)
        return StepResult(res["rc"] == 0, res.get("log") or "", time.perf_counter() - t0, res.get("ptx"))
    with tempfile.TemporaryDirectory(prefix="sm120lab-nvcc-") as tmp:
        src = Path(tmp) / "probe.cu"
        out = Path(tmp) / "probe.ptx"
        src.write_text(source)
        cmd = [tk.nvcc, "-ptx", f"-arch={arch}", *options, str(src), "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return StepResult(False, f"nvcc timed out after {timeout} s", time.perf_counter() - t0)
        ok = proc.returncode == 0 and out.is_file()
        return StepResult(ok, (proc.stderr + proc.stdout).replace(str(src), "probe.cu"),
                          time.perf_counter() - t0, out.read_text() if ok else None)


def ptxas(tk: Toolkit, ptx: str, sm: str, options: list[str] | None = None, timeout: float = 600) -> StepResult:
    """PTX text -> cubin bytes for real architecture ``sm`` (``sm_121a``)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sm120lab-ptxas-") as tmp:
        src = Path(tmp) / "probe.ptx"
        out = Path(tmp) / "probe.cubin"
        src.write_text(ptx)
        cmd = [tk.ptxas, f"-arch={sm}", *(options or []), str(src), "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return StepResult(False, f"ptxas timed out after {timeout} s", time.perf_counter() - t0)
        ok = proc.returncode == 0 and out.is_file()
        log = (proc.stderr + proc.stdout).replace(str(src), "probe.ptx")
        return StepResult(ok, log, time.perf_counter() - t0, out.read_bytes() if ok else None)


def disassemble(cuobjdump: str, cubin: bytes, timeout: float = 120) -> StepResult:
    """cubin bytes -> SASS text (``cuobjdump -sass``)."""
    t0 = time.perf_counter()
    fd, path = tempfile.mkstemp(prefix="sm120lab-", suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(cubin)
        proc = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(path)
    return StepResult(proc.returncode == 0, proc.stderr, time.perf_counter() - t0, proc.stdout)
