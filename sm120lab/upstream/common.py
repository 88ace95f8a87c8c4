"""Pieces every extractor uses: anchored text facts, the metadata fields of a record, anchors from ast nodes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .pyeval import Module
from .record import Anchor, TextFact, WheelInfo
from .wheelsrc import WheelSource, parse_metadata


@dataclass(frozen=True)
class FactSpec:
    """A fact found by exact text: the first of ``anchors`` found in the first of ``files`` holding one
    (``files=()``: every ``.py`` file under ``package/``, in sorted order)."""

    id: str
    claim: str
    anchors: tuple[str, ...]
    files: tuple[str, ...] = ()


#: the fact specs, as data: sm120lab/upstream/facts.yaml (per package: id, claim, anchors, files)
FACTS_YAML = Path(__file__).with_name("facts.yaml")


def load_fact_specs(package: str, path: Path = FACTS_YAML) -> tuple[FactSpec, ...]:
    """The :class:`FactSpec` list of ``package`` ("flashinfer" or "vllm") from the facts file."""
    import yaml

    entries = yaml.safe_load(path.read_text())[package]
    return tuple(FactSpec(f["id"], f["claim"], tuple(f["anchors"]), tuple(f.get("files", ()))) for f in entries)


def find_text(wheel: WheelSource, anchors: tuple[str, ...], files: tuple[str, ...], package: str) -> Anchor | None:
    """The first line holding one of ``anchors`` (files in the given order, anchors in order per file)."""
    paths = list(files) if files else sorted(n for n in wheel.names() if n.startswith(package + "/") and n.endswith(".py"))
    for path in paths:
        text = wheel.text(path)
        if text is None:
            continue
        for anchor in anchors:
            pos = text.find(anchor)
            if pos >= 0:
                lineno = text.count("\n", 0, pos) + 1
                return Anchor(file=path, line=lineno, text=text.splitlines()[lineno - 1].strip())
    return None


def find_facts(wheel: WheelSource, specs: tuple[FactSpec, ...], package: str) -> dict[str, TextFact]:
    out = {}
    for spec in specs:
        anchor = find_text(wheel, spec.anchors, spec.files, package)
        out[spec.id] = TextFact(claim=spec.claim, found=anchor is not None, anchor=anchor)
    return out


def anchor_at(module: Module, lineno: int) -> Anchor:
    return Anchor(file=module.path, line=lineno, text=module.line(lineno))


def base_fields(wheel: WheelSource, dist: str, version: str, command: str, method: str) -> dict:
    """The fields of :class:`~sm120lab.upstream.record.BaseRecord` read from the wheel's METADATA."""
    meta = parse_metadata(wheel.metadata_text())
    return {
        "dist": dist, "version": version, "command": command, "method": method,
        "wheel": WheelInfo(filename=wheel.filename, sha256=wheel.sha256, url=wheel.url),
        "requires_python": meta.requires_python, "requires_dist": meta.requires_dist, "extras": meta.extras,
    }


def run_isolated(driver: str, request: dict, what: str) -> list[dict]:
    """Run ``driver`` (Python source reading one JSON request on stdin, printing a JSON list) in a fresh
    interpreter with a bare environment; RuntimeError naming ``what`` with the driver's last error line."""
    proc = subprocess.run([sys.executable, "-c", driver], input=json.dumps(request), capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(proc.stdout)
