"""The tables and figures notebook 02 shows, computed from the recorded compile matrix
(``data/archflags/matrix.json``), a live recompile of a subset, and the recorded GPU probe runs.

Every function here reads :mod:`.summary` / :mod:`.matrix` results; the notebook only prints or
draws what they return. Cell codes (:data:`.summary.CODES`): ``feature`` = accepted and the
proving opcode is in the SASS, ``stub`` = compiled into the printf+trap fallback, ``ptxas`` /
``arch`` = rejected by ptxas / unknown target name.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..constants import SM120_SMEM_LIMIT
from .summary import CODES, cell_code, find, grid

#: the feature macros section 2 reads from the macro probe
MACROS = ("__CUDA_ARCH__", "__CUDA_ARCH_SPECIFIC__", "__CUDA_ARCH_FAMILY_SPECIFIC__",
          "__CUDA_ARCH_FEAT_SM120_ALL", "__CUDA_ARCH_FEAT_SM121_ALL")
MACRO_TARGETS = ("sm_120", "sm_120a", "sm_120f", "sm_121a", "sm_121f", "compute_120f->sm_121a")
#: the live recompile's default subset (CPU only: a CUDA toolkit, no GPU)
LIVE_TARGETS = ("sm_120", "sm_120a", "sm_120f", "compute_120f->sm_121a", "compute_120a->sm_121a")
LIVE_PROBES = ("mma_nvfp4", "arch_conditional", "macros")
COLORS = {"feature": "#2ca02c", "accepted": "#98df8a", "stub": "#ff7f0e", "ptxas": "#d62728",
          "arch": "#7f7f7f", "error": "#000000"}


def toolkit_names(matrix: dict) -> list[str]:
    """The matrix's toolkits in recorded order."""
    return [t["name"] for t in matrix["toolkits"]]


def newest_toolkit(matrix: dict) -> str:
    return sorted(toolkit_names(matrix), key=lambda v: tuple(map(int, v.split("."))))[-1]


def _one_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


def live_compare(matrix: dict, toolkits=None, targets=None, probes=None, *, jobs: int = 2, enabled: bool = True):
    """Recompile a subset here (:func:`.matrix.run_matrix`) and compare each cell with the recording.

    Args:
        matrix: the recorded matrix.
        toolkits, targets, probes: the subset (None: every toolkit found here, :data:`LIVE_TARGETS`,
            :data:`LIVE_PROBES`).
        jobs: parallel compile jobs.
        enabled: False: compile nothing (the notebook's ``live_compile`` parameter).

    Returns:
        ``(live, rows, why)``: the live matrix (None when it could not run), one row per cell
        (status, SASS, seconds, ``matches recording``: yes / NO / not recorded), and the one-line
        reason it did not run ("" when it ran).
    """
    from . import matrix as mx

    if not enabled:
        return None, [], "live_compile=False"
    try:
        tks, tgs, prs = mx.resolve(toolkits, list(targets or LIVE_TARGETS), list(probes or LIVE_PROBES))
        live = mx.run_matrix(tks, tgs, prs, jobs=jobs, progress=False)
    except Exception as exc:  # noqa: BLE001 - no toolkit here: one line, no traceback
        return None, [], _one_line(exc)
    rows = []
    for c in live.get("cells", []):
        rec = find(matrix, c["toolkit"], c["probe"], c["target"])
        same = rec is not None and (rec["status"], rec["sass"], rec["stub"]) == (c["status"], c["sass"], c["stub"])
        rows.append({"toolkit": c["toolkit"], "probe": c["probe"], "target": c["target"], "status": c["status"],
                     "sass": ", ".join(c["sass"]), "seconds": c["seconds"],
                     "matches recording": "yes" if same else ("not recorded" if rec is None else "NO")})
    return live, rows, ""


def gpu_probe_run(enabled) -> tuple[dict | None, str]:
    """Run the probes on this machine's CUDA GPU (:func:`.gpu_run.run_gpu_probes`) when ``enabled``;
    ``(result, "")`` or ``(None, one-line reason)``."""
    if not enabled:
        return None, "gpu_probes=False"
    import torch

    if not torch.cuda.is_available():
        return None, "no CUDA GPU on this machine"
    try:
        from .gpu_run import run_gpu_probes

        return run_gpu_probes(), ""
    except Exception as exc:  # noqa: BLE001 - one line, no traceback
        return None, _one_line(exc)


def headline_rows(verdict_df, over: dict, kinds: dict, over_after: dict, live_rows: list[dict], live_why: str,
                  gpu: dict | None, gpu_why: str, smem_limit: int = SM120_SMEM_LIMIT) -> list[tuple[str, str, str, str]]:
    """Notebook 02's verdict box as ``(claim, value, status, why)`` rows (status: a
    :class:`sm120lab.runs.answer.Status` value): each claim's verdict, the FlashInfer tiles over the
    shared-memory limit, whether the live recompile matches the recording, the GPU probe results."""
    rows = [(row["claim"], row["verdict"], "info", "recorded compile matrix: " + "; ".join(row["evidence"].split(" | ")[:2]))
            for _, row in verdict_df.iterrows()]
    if over:
        tiles = sorted({f"{d['tile']} {d['epilogue']}" for ds in over.values() for d in ds})
        worst = max((d for ds in over.values() for d in ds), key=lambda d: d["kernel_smem"])
        rows.append((f"FlashInfer SM120 NVFP4 grouped-GEMM tiles over the {smem_limit:,} B limit",
                     f"{len(tiles)} tiles: {', '.join(tiles)} ({worst['kernel_smem']:,} B)", "bad",
                     "; ".join(f"FlashInfer {v}: {len(ds)} of {kinds[v]} kernel types" for v, ds in sorted(over.items()))
                     + "; with the stage-count patch: "
                     + ", ".join(f"{n} over ({v})" for v, n in sorted(over_after.items()))))
    else:
        rows.append(("FlashInfer SM120 shared-memory overflow", "not run", "not_run",
                     "no CUTLASS shared-memory data in data/cutlass_smem/ (sm120lab cutlass-smem)"))
    if live_rows:
        n_same = sum(r["matches recording"] == "yes" for r in live_rows)
        rows.append(("the recorded matrix holds on this machine", "yes" if n_same == len(live_rows) else "NO",
                     "ok" if n_same == len(live_rows) else "bad",
                     f"{n_same} of {len(live_rows)} cells recompiled with CUDA "
                     f"{', '.join(sorted({r['toolkit'] for r in live_rows}))} match"))
    else:
        rows.append(("the recorded matrix holds on this machine", "not run", "not_run", live_why))
    if gpu is not None:
        ok = [r for r in gpu["results"] if r.get("ok")]
        rows.append((f"probe kernels run correctly on this GPU ({gpu.get('device', 'CUDA GPU')})",
                     f"{len(ok)} of {len(gpu['results'])}", "ok" if len(ok) == len(gpu["results"]) else "bad",
                     ", ".join(f"{r['probe']}@{r['target']}: {'ok' if r.get('ok') else 'FAILED'}"
                               for r in gpu["results"])))
    else:
        rows.append(("probe kernels run correctly on this GPU", "not run", "not_run", gpu_why))
    return rows


def recording_text(matrix: dict) -> str:
    """When, where and by which command the matrix was recorded, and its toolkits."""
    import pandas as pd

    return (f"recorded: {matrix['envinfo']['timestamp_utc']} on {matrix['envinfo']['host']} by: {matrix['command']}\n"
            + pd.DataFrame(matrix["toolkits"])[["name", "version", "frontend", "origin"]].to_string(index=False))


def macro_table(matrix: dict):
    """Section 2: the feature macros each toolkit defines per target (read from the macro probe's compile)."""
    import pandas as pd

    rows = []
    for tk in toolkit_names(matrix):
        for tg in MACRO_TARGETS:
            c = find(matrix, tk, "macros", tg)
            if c is None or not c["macros"]:
                rows.append({"toolkit": tk, "target": tg, **{m: "" for m in MACROS}, "note": c["status"] if c else "-"})
                continue
            rows.append({"toolkit": tk, "target": tg, **{m: c["macros"].get(m, "-") for m in MACROS}, "note": ""})
    return pd.DataFrame(rows).rename(columns=lambda s: s.replace("__CUDA_ARCH", "").strip("_") or s)


def plot_matrix(matrix: dict):
    """Section 3's figure: one panel per toolkit, probes x targets coloured by cell code."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    tks = toolkit_names(matrix)
    cmap = ListedColormap([COLORS[c] for c in CODES])
    fig, axes = plt.subplots(len(tks), 1, figsize=(13, 3.8 * len(tks)), squeeze=False)
    for ax, tk in zip(axes[:, 0], tks):
        g = grid(matrix, tk)
        ax.imshow(g.map(CODES.index).to_numpy(), cmap=cmap, vmin=0, vmax=len(CODES) - 1, aspect="auto")
        ax.set_xticks(range(g.shape[1]), [c.replace("->", "→") for c in g.columns], fontsize=8, rotation=30, ha="right")
        ax.set_yticks(range(g.shape[0]), g.index, fontsize=8)
        for (i, j), code in np.ndenumerate(g.to_numpy()):
            ax.text(j, i, code, ha="center", va="center", fontsize=6,
                    color="white" if code in ("ptxas", "arch", "error") else "black")
        ax.set_title(f"CUDA {tk} ({next(t['frontend'] for t in matrix['toolkits'] if t['name'] == tk)})")
        ax.set_xlabel("compile target")
        ax.set_ylabel("probe kernel")
    handles = [Patch(color=COLORS[c], label=c) for c in CODES]
    fig.legend(handles=handles, loc="upper center", ncol=len(CODES), title="cell outcome", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def sass_evidence_table(cells, toolkit: str):
    """The SASS opcodes behind the ``feature`` cells of one toolkit (CUDA probes), targets per (probe, SASS)."""
    ev = cells[(cells.toolkit == toolkit) & (cells.code == "feature") & (cells.frontend != "triton")]
    return (ev.assign(sass=ev["sass"].map(", ".join)).groupby(["probe", "sass"])["target"]
            .agg(lambda s: " ".join(t for t in s if "->" not in t)).reset_index())


def toolkit_diff_text(matrix: dict) -> str:
    """Each pair of consecutive toolkits: the cells both accept or reject, and those whose code or SASS differ."""
    tks = toolkit_names(matrix)
    lines = []
    for older, newer in zip(tks, tks[1:]):
        both, diffs = 0, []
        for c in matrix["cells"]:
            if c["toolkit"] != older:
                continue
            o = find(matrix, newer, c["probe"], c["target"])
            if o is None or "arch" in (cell_code(c), cell_code(o)):
                continue
            both += 1
            if (cell_code(c), c["sass"]) != (cell_code(o), o["sass"]):
                diffs.append(f"{c['probe']} {c['target']}: {older} {cell_code(c)} vs {newer} {cell_code(o)}")
        lines.append(f"{older} vs {newer}: {both} cells accepted-or-rejected by both, {len(diffs)} differ")
        lines += [f"    {line}" for line in diffs]
    return "\n".join(lines)


def describe_cells(matrix: dict, toolkits, probes, targets) -> str:
    """:func:`.summary.describe` of every (toolkit, probe, target) cell, one per line."""
    from .summary import describe

    return "\n".join(describe(find(matrix, tk, p, tg)) for tk in toolkits for p in probes for tg in targets)


def stub_in_probe_text() -> str:
    """Section 5: whether the arch-conditional probe's source holds CUTLASS's run-time error text
    (the ``printf`` the stub prints before ``trap``)."""
    from .probes import get_probe

    found = "Arch conditional MMA instruction used without targeting" in get_probe("arch_conditional").source()
    return f"stub message in the probe source: {found}"


def triton_text(cells) -> str:
    """Section 6: the Triton rows (the MMA instruction each dot lowers to), or why there are none."""
    tri = cells[cells.frontend == "triton"]
    if tri.empty:
        return "no Triton rows in the recorded matrix (recorded with --no-triton or without Triton)"
    return tri.assign(instruction=tri["ptx_instructions"].map(lambda xs: ", ".join(xs) or "-"))[
        ["toolkit", "probe", "target", "status", "shared", "instruction"]].to_string(index=False)


def verdicts_text(verdict_df) -> str:
    """Section 7: each claim's verdict and the cells that decide it."""
    lines = []
    for _, row in verdict_df.iterrows():
        lines.append(f"[{row['verdict']}] {row['claim']}")
        lines += [f"      {e}" for e in row["evidence"].split(" | ")]
    return "\n".join(lines)


def live_text(live: dict | None, rows: list[dict], why: str) -> str:
    """Section 8: the live recompile's cells against the recording (:func:`live_compare`), with the
    cell count and wall time, or why it did not run.

    Args:
        live: the live matrix (its ``wall_seconds`` is read), or None when it did not run.
        rows: :func:`live_compare`'s rows.
        why: :func:`live_compare`'s one-line reason ("" when it ran).

    Returns:
        The table and ``"N cells in S s"``, or ``"live compile not run: <why>"``.
    """
    import pandas as pd

    if not rows:
        return f"live compile not run: {why}"
    return (pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.2f}")
            + f"\n{len(rows)} cells in {live['wall_seconds']:.1f} s")


def live_statuses(rows: list[dict]) -> dict[str, str]:
    """The live recompile as the run folder records it: ``{"probe|toolkit|target": status}``."""
    return {f"{r['probe']}|{r['toolkit']}|{r['target']}": r["status"] for r in rows}


def gpu_verdicts(gpu: dict | None) -> dict[str, str]:
    """The GPU probe run as verdicts: ``{"gpu-probe:probe@target": "correct" | "garbage"}`` (a probe
    is correct when its result matched the CPU reference, ``ok``); empty when no probe ran."""
    if gpu is None:
        return {}
    return {f"gpu-probe:{r['probe']}@{r['target']}": "correct" if r.get("ok") else "garbage" for r in gpu["results"]}


def gpu_probes_text(gpu: dict | None, gpu_why: str, data: Path | None = None) -> str:
    """Section 9: the recorded probe run (``archflags/h200_probes.json``), the archived runs' probe
    results, then this run's (``data``: the data folder, default :func:`sm120lab.paths.data_dir`)."""
    import pandas as pd

    from ..paths import data_dir

    data = data_dir() if data is None else data
    lines = []
    recorded = data / "archflags" / "h200_probes.json"
    if recorded.is_file():
        rec = json.loads(recorded.read_text())
        lines.append(f"data/archflags/{recorded.name}: {rec['device']} (cc {rec['compute_capability']}), "
                     f"{rec['envinfo']['timestamp_utc']}")
        lines.append(pd.DataFrame([{k: r.get(k) for k in ("probe", "target", "ok", "max_abs_err", "error")}
                                   for r in rec["results"]]).to_string(index=False))
    for run_results in sorted((data / "runs").glob("*/results/02_arch_flags.json")):
        probes_run = json.loads(run_results.read_text()).get("gpu_probes")
        if probes_run:
            lines.append(f"run {run_results.parts[-3]}: " + ", ".join(
                f"{r['probe']} {'ok' if r.get('ok') else 'FAILED'}" for r in probes_run["results"]))
    lines.append("this run: " + (", ".join(f"{r['probe']}@{r['target']} {'ok' if r.get('ok') else 'FAILED'}"
                                           for r in gpu["results"]) if gpu is not None else f"not run ({gpu_why})"))
    return "\n".join(lines)


def results_record(verdict_df, matrix: dict, cells, over: dict, gpu: dict | None = None) -> dict:
    """What notebook 02 records: the claims' verdicts, the recorded matrix's size and codes, the tiles over the limit,
    and the GPU probe run when there was one (``gpu_probes``)."""
    record = {
        "claims": verdict_df[["claim", "verdict"]].to_dict("records"),
        "recorded_matrix": {"toolkits": toolkit_names(matrix), "cells": len(cells),
                            "codes": cells["code"].value_counts().to_dict()},
        "smem_over_limit": {v: sorted({f"{d['tile']} {d['epilogue']} swap_ab={d['swap_ab']}" for d in ds})
                            for v, ds in over.items()},
    }
    if gpu is not None:
        record["gpu_probes"] = gpu
    return record
