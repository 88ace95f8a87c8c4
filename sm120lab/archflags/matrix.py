"""The probe x toolkit x target matrix, compiled in parallel (a thread pool: each compile is a
subprocess), cached per cell (:mod:`.cell`), written atomically as JSON with envinfo and the command."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterable

from ..atomic_io import write_json_atomic
from ..toolchains import discover, find_sass_tool, get_toolkit
from ..toolchains.toolkit import Toolkit
from .cell import compile_cell
from .probes import PROBES, Probe, get_probe
from .targets import Target, default_targets, parse_target

DEFAULT_JSON = Path("data") / "archflags" / "matrix.json"


def resolve(toolkits: Iterable[str] | None, targets: Iterable[str] | None,
            probes: Iterable[str] | None) -> tuple[list[Toolkit], list[Target], list[Probe]]:
    """Names -> objects, with clear errors; None means every one available / the defaults."""
    tks = [get_toolkit(n) for n in toolkits] if toolkits else discover()
    if not tks:
        raise ValueError("no CUDA toolkit found: install one with `sm120lab toolchains install 12.9`")
    tgs = [parse_target(t) for t in targets] if targets else default_targets()
    prs = [get_probe(p) for p in probes] if probes else list(PROBES.values())
    return tks, tgs, prs


def run_matrix(toolkits: list[Toolkit], targets: list[Target], probes: list[Probe], *, jobs: int = 2,
               use_cache: bool = True, install_sass_tools: bool = True,
               progress: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Compile every cell; return ``{"cells": [...], "toolkits": [...], "targets": [...], ...}``."""
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    try:
        cuobjdump = find_sass_tool(install_if_missing=install_sass_tools)
    except (RuntimeError, OSError) as exc:  # offline and no cuobjdump: cells keep status, lose SASS
        print(f"archflags: no SASS tool ({exc}); cells will have no SASS evidence", file=sys.stderr)
        cuobjdump = None
    work = [(tk, pr, tg) for tk in toolkits for pr in probes for tg in targets]
    t0 = time.perf_counter()
    cells: list[dict] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(work), desc="archflags cells", unit="cell", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(compile_cell, tk, pr, tg, cuobjdump, (), use_cache): (tk, pr, tg) for tk, pr, tg in work}
        for fut in as_completed(futs):
            cells.append(fut.result())
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    order = {(tk.name, pr.name, tg.label): i for i, (tk, pr, tg) in enumerate(work)}
    cells.sort(key=lambda c: order[(c["toolkit"], c["probe"], c["target"])])
    return {
        "schema": "sm120lab.archflags/1",
        "toolkits": [tk.to_dict() for tk in toolkits],
        "targets": [tg.label for tg in targets],
        "probes": {pr.name: pr.feature for pr in probes},
        "sass_tool": cuobjdump,
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "cells_compiled": sum(not c["cached"] for c in cells),
        "cells": cells,
    }


def write_matrix(result: dict, path: str | os.PathLike = DEFAULT_JSON, command: str | None = None) -> Path:
    from .. import envinfo
    out = dict(result)
    out["command"] = command if command is not None else " ".join(sys.argv)
    out["envinfo"] = envinfo.collect()
    return write_json_atomic(path, out)
