"""``sm120lab run``: execute every notebook through papermill into one run folder.

Layout of a run folder ``runs/<UTC timestamp>-<host>-<gpu tag>/``::

    environment.json          envinfo.collect() at the start of the run
    summary.json              per notebook: status (ok | failed | not run), wall time, error line
    NN_name.ipynb / .html     each executed notebook and its HTML render
    results/NN_name.json      machine-readable results the notebook recorded (sm120lab.results)

``summary.json`` is rewritten atomically after every notebook, so an interrupted run keeps the
finished notebooks' results and marks the rest ``not run``. One notebook failing does not stop
the others; the exit status is non-zero if any failed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic_io import write_json_atomic, write_text_atomic
from .envinfo import collect
from .paths import notebooks_dir
from .results import RESULTS_ENV


@dataclass
class NotebookResult:
    name: str
    status: str = "not run"
    wall_s: float | None = None
    error: str | None = None
    output: str | None = None
    html: str | None = None


@dataclass
class RunSummary:
    run_dir: Path
    started_utc: str
    notebooks: list[NotebookResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        failed = [n.name for n in self.notebooks if n.status == "failed"]
        return {
            "run_dir": str(self.run_dir),
            "started_utc": self.started_utc,
            "ok": not failed and all(n.status == "ok" for n in self.notebooks),
            "failed": failed,
            "notebooks": [n.__dict__ for n in self.notebooks],
        }


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


def run_tag(env: dict[str, Any], now: dt.datetime | None = None) -> str:
    """``<UTC timestamp>-<host>-<gpu>[-drv<driver>-cuda<version>]``, e.g. ``20261202T1830Z-vm-cpu``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    gpu = env.get("gpu", {})
    if gpu.get("available"):
        name = _slug(gpu.get("name", "gpu").replace("NVIDIA", ""))
        parts = [name, f"drv{gpu.get('driver') or 'unknown'}", f"cuda{gpu.get('torch_cuda_runtime') or 'unknown'}"]
        gpu_tag = "-".join(parts)
    else:
        gpu_tag = "cpu"
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{_slug(socket.gethostname())}-{gpu_tag}"


def discover_notebooks(directory: Path | None = None, only: list[str] | None = None) -> list[Path]:
    """Notebooks in ``directory`` (sorted); ``only`` keeps those whose name starts with or equals an entry."""
    directory = directory or notebooks_dir()
    books = sorted(p for p in directory.glob("*.ipynb") if not p.name.startswith("."))
    if only:
        wanted = [o.removesuffix(".ipynb") for o in only]
        chosen = [p for p in books if any(p.stem == w or p.stem.startswith(w) for w in wanted)]
        missing = [w for w in wanted if not any(p.stem == w or p.stem.startswith(w) for p in books)]
        if missing:
            raise ValueError(f"--only: no notebook matches {missing}; available: {[p.stem for p in books]}")
        return chosen
    return books


def parameters_for(notebook: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Keep the parameters the notebook declares. ``params`` may hold global keys and per-notebook
    sections keyed by notebook stem (``{"03_grouped_gemm_correctness": {"tokens": 64}}``)."""
    import papermill

    declared = set(papermill.inspect_notebook(str(notebook)).keys())
    chosen = {k: v for k, v in params.items() if not isinstance(v, dict) and k in declared}
    section = params.get(notebook.stem)
    if isinstance(section, dict):
        unknown = set(section) - declared
        if unknown:
            raise ValueError(f"parameters {sorted(unknown)} are not declared by {notebook.name} (declares {sorted(declared)})")
        chosen.update(section)
    return chosen


def render_html(ipynb: Path) -> Path:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(ipynb, as_version=4))
    out = ipynb.with_suffix(".html")
    write_text_atomic(out, body)
    return out


def _first_error_line(exc: BaseException) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = str(getattr(exc, "evalue", exc)).strip().splitlines()
    return f"{ename}: {evalue[0] if evalue else ''}"[:500]


def execute_all(notebooks: list[Path], run_dir: Path, params: dict[str, Any] | None = None,
                kernel_name: str = "python3", progress: bool = True, timeout_s: int = 3600,
                env: dict[str, Any] | None = None) -> RunSummary:
    """Execute ``notebooks`` into ``run_dir``; return the summary (also written to summary.json).

    ``env``: the :func:`sm120lab.envinfo.collect` snapshot already taken for the run tag, if any."""
    import papermill

    params = params or {}
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results").mkdir(exist_ok=True)
    env = env or collect()
    write_json_atomic(run_dir / "environment.json", env)
    summary = RunSummary(run_dir=run_dir, started_utc=env["timestamp_utc"],
                         notebooks=[NotebookResult(name=p.stem) for p in notebooks])
    write_json_atomic(run_dir / "summary.json", summary.to_json())

    old = os.environ.get(RESULTS_ENV)
    os.environ[RESULTS_ENV] = str((run_dir / "results").resolve())
    iterator = list(zip(notebooks, summary.notebooks))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(iterator, desc="notebooks", unit="nb")
        iterator = bar
    try:
        for nb_path, res in iterator:
            if bar is not None:
                bar.set_postfix_str(nb_path.stem)
            out = run_dir / nb_path.name
            t0 = time.perf_counter()
            try:
                nb_params = parameters_for(nb_path, params)
                papermill.execute_notebook(str(nb_path), str(out), parameters=nb_params, cwd=str(nb_path.parent),
                                           kernel_name=kernel_name, progress_bar=False, execution_timeout=timeout_s)
                res.status = "ok"
            except Exception as exc:  # one notebook failing must not stop the others
                res.status = "failed"
                res.error = _first_error_line(exc)
            res.wall_s = round(time.perf_counter() - t0, 2)
            if out.exists():
                res.output = out.name
                try:
                    res.html = render_html(out).name
                except Exception as exc:  # rendering must not turn a good run into a failure
                    res.error = (res.error or "") + f" [html render failed: {_first_error_line(exc)}]"
            write_json_atomic(run_dir / "summary.json", summary.to_json())
    finally:
        if old is None:
            os.environ.pop(RESULTS_ENV, None)
        else:
            os.environ[RESULTS_ENV] = old
        write_json_atomic(run_dir / "summary.json", summary.to_json())
    return summary


def default_run_dir(base: Path | None = None, env: dict[str, Any] | None = None) -> Path:
    return (base or Path("runs")) / run_tag(env or collect())
