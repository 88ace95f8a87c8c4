"""The offline install proof: pip's own resolver run over stub wheels built from the recorded metadata.

For every recorded version of every recorded dist (the *universe*: vllm, flashinfer-python, torch,
b12x, flashinfer-cubin, ...) a metadata-only wheel is written to a temporary folder: a valid
``py3-none-any`` wheel whose METADATA carries the recorded Requires-Python, Provides-Extra and those
Requires-Dist lines that name a dist of the universe (markers kept), plus WHEEL and RECORD. Then::

    python -m pip install --dry-run --no-index --find-links <stubs> --ignore-installed \
        --only-binary=:all: --python-version 3.12 --target <empty temp folder> --report <json> <requirements>

runs with no network and no pip configuration (``--target``: pip before 23.3, e.g. 23.2.1, refuses
``--python-version`` without it, "Can not use any platform or abi specific options unless installing
via '--target'"; with ``--dry-run`` nothing is written there). When pip fails for any reason other
than a resolver answer (a refused option, a crash, a timeout, no report), :class:`PipFailed` is raised:
a tool's failure is not the answer "does not install together". Requirements on packages OUTSIDE the recorded universe
are dropped, so a success proves that the recorded releases' mutual pins agree (vLLM's exact
flashinfer-python / torch pins, FlashInfer's own requirements on torch, ...), not that the whole
dependency closure installs. A version some release pins but the registry did not serve when recording
(``index.unavailable``) has no stub, so pip refuses it exactly as it would against PyPI.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..cmdline import ToolError
from . import store

PYTHON_VERSION = "3.12"

#: what pip prints when its resolver answered "no" (anything else from a failed pip is a tool failure)
RESOLVER_ANSWERS = ("ResolutionImpossible", "Cannot install", "No matching distribution found",
                    "Could not find a version that satisfies", "The conflict is caused by",
                    "requires a different Python")


class PipFailed(ToolError):
    """pip did not answer (refused its options, crashed, timed out, wrote no report): no verdict."""


@dataclass(frozen=True)
class ResolveResult:
    """``ok``: pip resolved the requirements; ``detail``: one line (pip's last error line when not);
    ``resolved``: ``{canonical name: version}`` pip would install (empty when not ok)."""

    ok: bool
    detail: str
    resolved: dict[str, str] = field(default_factory=dict)
    requirements: tuple[str, ...] = ()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def stub_metadata(dist: str, version: str, requires_python: str | None, requires_dist: list[str],
                  extras: list[str], universe: set[str]) -> str:
    """METADATA text of a stub: the recorded fields, Requires-Dist restricted to ``universe``."""
    lines = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    lines += [f"Provides-Extra: {e}" for e in extras]
    for raw in requires_dist:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in universe:
            lines.append(f"Requires-Dist: {raw}")
    return "\n".join(lines) + "\n"


def write_stub_wheel(folder: Path, dist: str, version: str, metadata: str) -> Path:
    """A valid ``<name>-<version>-py3-none-any.whl`` holding only a dist-info folder."""
    stem = f"{canonicalize_name(dist).replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sm120lab-upstream\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "\n".join([_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def build_stubs(folder: Path) -> list[Path]:
    """One stub wheel per recorded dist-version into ``folder``."""
    idx = store.index()
    universe = set(idx.dists)
    out = []
    for dist, entries in idx.dists.items():
        for version in entries:
            rec = store.load(dist, version)
            meta = stub_metadata(dist, version, rec.requires_python, rec.requires_dist, list(rec.extras), universe)
            out.append(write_stub_wheel(folder, dist, version, meta))
    return out


def _check_requirements(requirements) -> tuple[str, ...]:
    if isinstance(requirements, str) or not requirements:
        raise ValueError(f"requirements: expected a non-empty list like ['vllm==0.34.0'], got {requirements!r}")
    for r in requirements:
        try:
            Requirement(r)
        except (InvalidRequirement, TypeError):
            raise ValueError(f"requirements: expected PEP 508 requirements like 'vllm==0.34.0', got {r!r}") from None
    return tuple(requirements)


def _failure_line(output: str, rc: int) -> str:
    """pip's last ERROR line, preceded by the conflict's causes when pip lists them, and followed by a
    note when the missing version is one the registry did not serve at recording time."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or [f"pip exited {rc}"]
    causes = []
    if "The conflict is caused by:" in lines:
        for ln in lines[lines.index("The conflict is caused by:") + 1:]:
            if ln.startswith(("To fix", "Additionally", "ERROR")) or ln.endswith(":"):
                break
            causes.append(ln)
    first = next((e for e in errors if "Cannot install" in e or "No matching distribution" in e), errors[-1])
    detail = first + (" The conflict is caused by: " + "; ".join(causes) if causes else "")
    for gone in store.index().unavailable:
        if f"{gone.dist}=={gone.version}" in detail:
            detail += f" ({gone.dist} {gone.version}: {gone.reason} when recorded)"
    return detail


def pip_version(pip: list[str]) -> str:
    """``pip --version``'s version word, or ``"?"``."""
    try:
        out = subprocess.run([*pip, "--version"], capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out[1] if len(out) > 1 and out[0] == "pip" else "?"


def check_install(requirements: list[str], python_version: str = PYTHON_VERSION, timeout: float = 300, *,
                  pip: list[str] | None = None) -> ResolveResult:
    """Whether pip's resolver installs ``requirements`` together, judged offline on the recorded metadata.

    Args:
        requirements: PEP 508 lines, e.g. ``["vllm==0.34.0", "flashinfer-python==0.7.3"]``.
        python_version: the target interpreter pip resolves for (``--python-version``).
        timeout: seconds before pip is given up on.

        pip: the pip to run (default ``python -m pip`` of this interpreter).

    Returns:
        :class:`ResolveResult`. Requirements on packages outside the recorded universe are dropped from the
        stubs (see the module docstring): this proves the mutual pins, not the whole closure.

    Raises:
        PipFailed: pip gave no resolver answer (it refused an option, crashed, timed out or wrote no
            report); one line naming pip's version and its error.
    """
    reqs = _check_requirements(requirements)
    pip = list(pip) if pip else [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="sm120lab-resolve-") as tmp:
        folder = Path(tmp) / "stubs"
        folder.mkdir()
        build_stubs(folder)
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--dry-run", "--no-index", "--find-links", str(folder),
               "--ignore-installed", "--only-binary=:all:", "--python-version", python_version,
               "--target", str(Path(tmp) / "target"),  # pip < 23.3 takes --python-version only with --target
               "--report", str(report), "--disable-pip-version-check", "--no-cache-dir", *reqs]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"})
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise PipFailed(f"pip {pip_version(pip)} gave no answer in {timeout:g} s; the check did not run "
                            "(not an answer)") from None
        except OSError as exc:
            raise PipFailed(f"could not run pip ({' '.join(pip)}): {exc.strerror or exc}; the check did not run") from None
        output = (proc.stdout or "") + "\n" + (proc.stderr or "")
        if proc.returncode != 0:
            if not any(marker in output for marker in RESOLVER_ANSWERS):
                raise PipFailed(f"pip {pip_version(pip)} failed to run the check, so there is no answer (exit "
                                f"{proc.returncode}): {_failure_line(output, proc.returncode)}")
            return ResolveResult(False, _failure_line(output, proc.returncode), {}, reqs)
        try:
            data = json.loads(report.read_text())
        except (OSError, ValueError) as exc:
            raise PipFailed(f"pip {pip_version(pip)} exited 0 but wrote no readable --report ({exc}); "
                            "the check did not run") from None
        resolved = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
                    for item in data.get("install", [])}
        shown = ", ".join(f"{k}=={v}" for k, v in sorted(resolved.items()))
        return ResolveResult(True, f"pip resolves: {shown}", resolved, reqs)
