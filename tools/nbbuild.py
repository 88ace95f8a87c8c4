#!/usr/bin/env python3
"""Build a notebook from its percent-format source and execute it in place.

    python tools/nbbuild.py notebooks/src/01_nvfp4_math.py [--no-execute]

Source format (``notebooks/src/NN_name.py``)::

    # %% [markdown]
    # # Title
    # %% tags=["parameters"]
    seed = 0
    # %%
    # NBVAL_CHECK_OUTPUT
    print(...)

Writes ``notebooks/NN_name.ipynb`` and executes it from ``notebooks/`` so the stored outputs are
what nbval compares (only cells marked ``# NBVAL_CHECK_OUTPUT`` are compared under --nbval-lax).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?:\s+tags=(?P<tags>\[.*\]))?\s*$")


def parse(source: str) -> list[nbformat.NotebookNode]:
    cells: list[nbformat.NotebookNode] = []
    kind, tags, lines = None, [], []

    def flush() -> None:
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            md = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#") for l in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(md)
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in source.splitlines():
        m = HEADER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            tags = json.loads(m.group("tags")) if m.group("tags") else []
            lines = []
        elif kind is not None:
            lines.append(line)
    flush()
    return cells


def build(src: Path, execute: bool = True, timeout: int = 900) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = parse(src.read_text())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    out = src.parent.parent / (src.stem + ".ipynb")
    if execute:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(out.parent)}}).execute()
    nbformat.write(nb, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", type=Path)
    ap.add_argument("--no-execute", action="store_true")
    args = ap.parse_args()
    for src in args.sources:
        print(f"built {build(src, execute=not args.no_execute)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
