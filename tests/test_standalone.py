"""The project stands alone: no tracked source file cites files a reader of this repository does not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Files outside the repository (a sibling checkout, scratch folders) and private working documents.
FORBIDDEN = re.compile(
    r"\.\./shared|(?<![\w.])shared/research|(?<![\w$])/tmp/|\blandscape\.md\b|\bMETHOD\.md\b|\bKINDS\.md\b|"
    r"\bHOPPER\.md\b|\bH200\.md\b|\bseed-report\.md\b|(?<![\w/])archflags\.md\b|\bmoe_contract\.md\b|"
    # Text about how the project was developed, rather than about what it shows.
    r"\b[Ii]ssue #?\d+ (?:writes|reads)\b|\bearlier session\b|\bdevice budget\b"
)
SOURCE_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".cfg", ".cu", ".h", ".cpp", ".ipynb"}


def tracked_sources() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.splitlines():
        path = ROOT / name
        # Recorded runs and data files hold machine paths from the environments they were made in.
        if name.startswith("data/") or name == "tests/test_standalone.py" or not path.is_file():
            continue
        if path.suffix in SOURCE_SUFFIXES or path.name in {"Makefile", "run"}:
            files.append(path)
    return files


def test_no_citations_of_files_outside_the_repo():
    hits = []
    for path in tracked_sources():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = FORBIDDEN.search(line)
            # A test may name a forbidden path as a string it checks for ("/tmp/" in a list of bad words).
            if match and not (path.parent.name == "tests" and line[max(match.start() - 1, 0)] in "\"'"):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    assert not hits, "files cite what a reader does not have:\n" + "\n".join(hits)
