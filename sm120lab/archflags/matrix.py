"""The probe x toolkit x target matrix, compiled in parallel (a thread pool: each compile is a
subprocess), cached per cell (:mod:`.cell`), written atomically as JSON with envinfo and the command."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ..atomic_io import write_json_atomic
from ..toolchains import discover, find_sass_tool, get_toolkit
from ..toolchains.toolkit import Toolkit
from .cell import compile_cell
from .probes import PROBES, Probe, get_probe
from .targets import Target, default_targets, parse_target

DEFAULT_JSON = Path("data") / "archflags" / "matrix.json"  # relative to the repository root


def default_json() -> Path:
    """The committed matrix: ``<repo>/data/archflags/matrix.json`` (``$SM120LAB_ROOT`` honoured)."""
    from ..paths import repo_root

    return repo_root() / DEFAULT_JSON


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


def cell_key(cell: dict) -> tuple[str, str, str]:
    """A cell's identity: ``(toolkit, probe, target)``."""
    return (cell["toolkit"], cell["probe"], cell["target"])


class MatrixFileError(ValueError):
    """The existing matrix file cannot be read or merged (message names the file)."""


def read_matrix(path: str | os.PathLike) -> dict | None:
    """The matrix at ``path``, or None when there is no file; raises :class:`MatrixFileError`."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MatrixFileError(f"--json: {path} exists but is not a readable matrix JSON "
                              f"({type(exc).__name__}); move it away or pass another --json") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or \
            not all(isinstance(c, dict) and {"toolkit", "probe", "target"} <= set(c) for c in data["cells"]):
        raise MatrixFileError(f"--json: {path} exists but is not an archflags matrix (no 'cells' list of "
                              "toolkit/probe/target cells); move it away or pass another --json")
    return data


def merge_matrix(old: dict, new: dict) -> dict:
    """``old`` with ``new``'s cells replacing the cells of the same (toolkit, probe, target) and
    the rest kept: a partial run never shrinks the matrix. Toolkits, targets and probes are united;
    each merge is listed under ``updates``."""
    cells = {cell_key(c): c for c in old["cells"]}
    for c in new["cells"]:
        cells[cell_key(c)] = c
    merged = dict(old)
    tk = {t["name"]: t for t in old.get("toolkits", [])} | {t["name"]: t for t in new.get("toolkits", [])}
    merged["toolkits"] = list(tk.values())
    merged["targets"] = list(dict.fromkeys([*old.get("targets", []), *new.get("targets", [])]))
    merged["probes"] = {**old.get("probes", {}), **new.get("probes", {})}
    if new.get("triton"):
        merged["triton"] = new["triton"]
    merged["cells"] = list(cells.values())
    return merged


def write_matrix(result: dict, path: str | os.PathLike | None = None, command: str | None = None,
                 *, replace: bool = False) -> tuple[Path, int]:
    """Write ``result`` to ``path`` atomically, merged into the matrix already there unless
    ``replace``; returns ``(path, cells kept from the earlier file)``.

    Raises:
        MatrixFileError: the existing file is not a matrix.
        OSError: ``path`` cannot be written.
    """
    from .. import envinfo
    from ..cmdline import command_line

    path = default_json() if path is None else path
    command = command if command is not None else command_line("sm120lab")
    out = dict(result)
    out["command"] = command
    out["envinfo"] = envinfo.collect()
    old = None if replace else read_matrix(path)
    kept = 0
    if old is not None:
        new_keys = {cell_key(c) for c in result["cells"]}
        kept = sum(cell_key(c) not in new_keys for c in old["cells"])
        merged = merge_matrix(old, out)
        merged["command"], merged["envinfo"] = old.get("command"), old.get("envinfo")
        merged["updates"] = [*old.get("updates", []), {
            "command": command, "cells": len(result["cells"]), "envinfo": out["envinfo"],
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
        out = merged
    return write_json_atomic(path, out), kept
