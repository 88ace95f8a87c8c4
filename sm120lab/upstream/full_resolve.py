"""Does a vLLM release install with its pinned FlashInfer and torch? The real resolver's answer.

``pip install --dry-run --ignore-installed --report`` over the whole dependency tree of
``vllm==V flashinfer-python==F torch==T`` (the exact pins read from vLLM's own wheel), run on the
package index the recording machine reached. The result is kept per release in
``data/upstream/resolve/vllm-<V>.json`` with its date, the pip that resolved, and, when it fails,
the exact requirement the index could not satisfy. A failure says something about *that* index
(which may be a partial mirror) at that date, never about PyPI; the guide words it so
(:func:`reason`). Tests and the guide only read these records (``make test`` stays offline).

    sm120lab upstream full-resolve 0.33.0 0.34.0    # writes data/upstream/resolve/vllm-0.33.0.json, ...
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from ..paths import data_dir

#: what a record calls the index it resolved against (never a URL: the machine's configuration is not the project's)
WHERE = "the package index this machine reached"
SCHEMA = 1
_MISSING = (re.compile(r"No matching distribution found for (\S+)"),
            re.compile(r"Could not find a version that satisfies the requirement (\S+)"))


def resolve_dir() -> Path:
    return data_dir() / "upstream" / "resolve"


def path_for(version: str) -> Path:
    return resolve_dir() / f"vllm-{version}.json"


def missing_requirement(output: str) -> str | None:
    """The requirement pip could not satisfy, read from its output (``llguidance<1.8.0,>=1.7.0``), or None."""
    for pattern in _MISSING:
        hits = pattern.findall(output)
        if hits:
            return hits[-1]
    return None


def requirements_of(version: str) -> list[str]:
    """``vllm==V`` and the exact FlashInfer and torch pins its recorded wheel metadata gives."""
    from . import load

    rec = load("vllm", version)
    reqs = [f"vllm=={version}"]
    for dist in ("flashinfer-python", "torch"):
        spec = (rec.pins or {}).get(dist, "")
        if spec.startswith("==") and "," not in spec:
            reqs.append(f"{dist}{spec}")
    return reqs


def resolve(version: str, *, timeout_s: float = 1800.0, pip: list[str] | None = None) -> dict:
    """Run the real resolver for vLLM ``version`` and its pins (module docstring); the record, not written."""
    reqs = requirements_of(version)
    pip = pip or [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check", "--report",
               str(report), *reqs]
        started = datetime.now(timezone.utc)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            out, rc = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired:
            out, rc = f"timed out after {timeout_s:g} s", None
        installs = {}
        if rc == 0 and report.exists():
            doc = json.loads(report.read_text())
            installs = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in doc.get("install", [])}
    pip_version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout.split()[1:2]
    missing = None if rc == 0 else missing_requirement(out)
    last = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("ERROR")] or out.strip().splitlines()[-1:]
    return {
        "schema_version": SCHEMA, "kind": "resolve", "dist": "vllm", "version": version,
        "requirements": reqs, "ok": rc == 0, "where": WHERE,
        "date_utc": started.strftime("%Y-%m-%d"), "resolver": f"pip {pip_version[0] if pip_version else '?'} "
        "install --dry-run --ignore-installed --report (the whole dependency tree)",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}", "platform": sys.platform,
        "n_installs": len(installs), "installs": installs, "missing": missing,
        # a local build (torch 2.13.0+cpu) satisfies an ==2.13.0 pin; it came from a wheel folder this
        # machine's pip configuration names, not from an index a new user would reach
        "local_versions": sorted(f"{k}=={v}" for k, v in installs.items() if "+" in v),
        "error": None if rc == 0 else (last[-1][:300] if last else f"exit {rc}"),
        "command": f"sm120lab upstream full-resolve {version}",
    }


def write(record: dict) -> Path:
    from ..atomic_io import write_json_atomic

    path = path_for(record["version"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)
    return path


def load_resolve(version: str) -> dict | None:
    """The recorded resolve of vLLM ``version``, or None when none was recorded (or it is unreadable)."""
    try:
        doc = json.loads(path_for(version).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "resolve" or doc.get("version") != version:
        return None
    return doc


def reason(doc: dict) -> str:
    """One sentence: what was resolved, where, when, and what failed (never a claim about PyPI)."""
    what = " ".join(doc["requirements"])
    head = f"a full pip resolve of `{what}` (whole dependency tree, {doc['date_utc']}, on {doc['where']})"
    if doc["ok"]:
        return f"{head} succeeded ({doc['n_installs']} packages)"
    if doc.get("missing"):
        return f"{head} failed: that index had no distribution for {doc['missing']}"
    return f"{head} failed: {doc.get('error')}"
