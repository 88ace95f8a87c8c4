"""``sm120lab run``: execute every notebook through papermill into one run folder.

Layout of a run folder ``runs/<UTC timestamp>-<host>-<gpu tag>/``::

    environment.json          envinfo.collect() at the start of the run
    summary.json              schema version, command line, per notebook: status (ok | failed |
                              not run), wall time, error line
    NN_name.ipynb / .html     each executed notebook and its HTML page (no scripts; links notebook.css)
    notebook.css              the pages' one stylesheet
    results/NN_name.json      machine-readable results the notebook recorded (sm120lab.runs.results)
    report.html               one self-contained page: summary, environment, every verdict box,
                              every notebook with its figures inline (sm120lab.runs.report)

``summary.json`` is rewritten atomically after every notebook, so an interrupted run keeps the
finished notebooks' results and marks the rest ``not run``. One notebook failing does not stop
the others; the exit status is non-zero if any failed.

A folder that already holds files is never written into silently (:class:`RunMode`): ``new``
refuses it, ``resume`` runs the missing, failed and not-run notebooks into it only when this machine
and software match its ``environment.json``, and ``overwrite`` replaces an earlier run folder.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120lab.enums import StrEnum

from ..atomic_io import write_json_atomic, write_text_atomic
from ..envinfo import collect
from ..paths import notebooks_dir
from .pages import STYLESHEET, write_stylesheet
from .records import RunSummaryRecord
from .results import (
    RESULTS_ENV,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    NotebookStatus,
    SchemaError,
    load_json,
    validate_environment,
    validate_summary,
)

#: executed notebooks are ``NN_name.ipynb``: two digits, an underscore, a name
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
#: what a run writes into its folder; ``--overwrite`` removes only these
RUN_FILES = ("summary.json", "environment.json", "report.html", "notebook.css")
RUN_DIRS = ("results", "figures")
RUN_GLOBS = ("[0-9][0-9]_*.ipynb", "[0-9][0-9]_*.html")


class RunMode(StrEnum):
    """What to do when the run folder already holds files."""

    NEW = "new"              # refuse a non-empty folder
    RESUME = "resume"        # run what is missing, failed or not run; same machine only
    OVERWRITE = "overwrite"  # replace an earlier run folder's files


class RunFolderError(ValueError):
    """The run folder cannot be used as asked; one line saying what to do instead."""


@dataclass
class NotebookResult:
    name: str
    status: NotebookStatus = NotebookStatus.NOT_RUN
    wall_s: float | None = None
    error: str | None = None
    output: str | None = None
    html: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "wall_s": self.wall_s, "error": self.error,
                "output": self.output, "html": self.html}


@dataclass
class RunSummary:
    run_dir: Path
    started_utc: str
    notebooks: list[NotebookResult] = field(default_factory=list)
    command: str | None = None
    resumed_utc: list[str] = field(default_factory=list)
    #: when Ctrl-C stopped the run (None: it was not interrupted)
    interrupted_utc: str | None = None

    def to_json(self) -> dict[str, Any]:
        failed = [n.name for n in self.notebooks if n.status is NotebookStatus.FAILED]
        out = {
            SCHEMA_KEY: SCHEMA_VERSION,
            "run_dir": str(self.run_dir),
            "started_utc": self.started_utc,
            "command": self.command,
            "ok": not failed and all(n.status is NotebookStatus.OK for n in self.notebooks),
            "failed": failed,
            "notebooks": [n.to_json() for n in self.notebooks],
        }
        if self.resumed_utc:
            out["resumed_utc"] = list(self.resumed_utc)
        out["interrupted"] = self.interrupted_utc is not None
        if self.interrupted_utc:
            out["interrupted_utc"] = self.interrupted_utc
        return RunSummaryRecord.model_validate(out).model_dump(mode="json", exclude_unset=True)


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
    """Every ``NN_name.ipynb`` in ``directory`` (sorted); ``only`` keeps those whose name starts with
    or equals an entry (``ValueError`` when an entry is empty: it would select every notebook)."""
    directory = directory or notebooks_dir()
    books = sorted(p for p in directory.glob(NOTEBOOK_GLOB) if p.is_file())
    if only is not None:
        wanted = [o.strip().removesuffix(".ipynb") for o in only]
        if not wanted or not all(wanted):  # an empty name is a prefix of every notebook: it names none
            raise ValueError(f"--only: expected notebook names or prefixes (e.g. 01 03_grouped), got {list(only)!r}; "
                             f"available: {[p.stem for p in books]}")
        chosen = [p for p in books if any(p.stem == w or p.stem.startswith(w) for w in wanted)]
        missing = [w for w in wanted if not any(p.stem == w or p.stem.startswith(w) for p in books)]
        if missing:
            raise ValueError(f"--only: no notebook matches {missing}; available: {[p.stem for p in books]}")
        return chosen
    return books


def declared_parameters(notebook: Path) -> set[str]:
    """The parameter names ``notebook`` declares (its ``parameters`` cell).

    Raises:
        ValueError: one line naming the file when it is not a readable Jupyter notebook (not JSON, not
            UTF-8, or JSON that is not an nbformat 4 notebook); nbformat would raise one of many kinds.
    """
    import nbformat
    import papermill

    try:
        nb = nbformat.read(str(notebook), as_version=4)
        nbformat.validate(nb)
        return set(papermill.inspect_notebook(str(notebook)).keys())
    except Exception as exc:  # noqa: BLE001  (NotJSONError, ValidationError, TypeError, KeyError, OSError...)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ValueError(f"{notebook}: expected a Jupyter notebook (nbformat 4 JSON), could not read it: {first}") from None


def parameters_for(notebook: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Keep the parameters the notebook declares. ``params`` may hold global keys and per-notebook
    sections keyed by notebook stem (``{"03_grouped_gemm_correctness": {"tokens": 64}}``)."""
    declared = declared_parameters(notebook)
    chosen = {k: v for k, v in params.items() if k in declared}
    section = params.get(notebook.stem)
    if isinstance(section, dict):
        unknown = set(section) - declared
        if unknown:
            raise ValueError(f"parameters {sorted(unknown)} are not declared by {notebook.name} (declares {sorted(declared)})")
        chosen.update(section)
    return chosen


def check_parameters(notebooks: list[Path], params: dict[str, Any], arg: str = "-p") -> None:
    """Refuse a parameter no notebook of the run declares, before anything runs.

    A key is a parameter when a notebook declares it, else a per-notebook section when it names one
    of ``notebooks`` (its keys must then be declared by that notebook).

    Args:
        notebooks: the notebooks of the run.
        params: global parameters and per-notebook sections.
        arg: where the parameters came from, for the message (``-p``, ``--matrix combination b``).

    Raises:
        ValueError: one line naming the parameter (``-p NAME``) and what the notebooks declare.
    """
    declared = {p.stem: declared_parameters(p) for p in notebooks}
    everything = set().union(*declared.values()) if declared else set()
    for key, value in params.items():
        if key in everything:
            continue
        if key in declared and isinstance(value, dict):
            unknown = sorted(set(value) - declared[key])
            if unknown:
                raise ValueError(f"--params: section {key}: {unknown} not declared by {key} "
                                 f"(declares {sorted(declared[key]) or 'nothing'})")
            continue
        if isinstance(value, dict):
            raise ValueError(f"--params: section {key} names no notebook of this run "
                             f"(notebooks: {', '.join(sorted(declared))})")
        raise ValueError(f"{arg} {key}: no notebook of this run declares this parameter "
                         f"(declared: {', '.join(sorted(everything)) or 'none'})")


def render_html(ipynb: Path, stylesheet: str | None = None) -> Path:
    """Write ``ipynb``'s page (:func:`sm120lab.runs.pages.render_page`, no scripts) beside it."""
    from .pages import read_notebook, render_page

    out = ipynb.with_suffix(".html")
    write_text_atomic(out, render_page(read_notebook(ipynb), stylesheet=stylesheet, title=ipynb.stem))
    return out


def _first_error_line(exc: BaseException) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = str(getattr(exc, "evalue", exc)).strip().splitlines()
    return f"{ename}: {evalue[0] if evalue else ''}"[:500]


def machine_facts(env: dict[str, Any]) -> dict[str, Any]:
    """What must match for ``--resume``: host, GPU, driver, CUDA, nvccs, package versions, env vars."""
    from .compare import environment_facts

    return {"host": env.get("host"), "python": env.get("python"), **environment_facts(env)}


def _is_run_folder(run_dir: Path) -> bool:
    return (run_dir / "summary.json").is_file()


def _remove_run_files(run_dir: Path) -> None:
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        if (run_dir / name).is_dir():
            shutil.rmtree(run_dir / name)
    for pattern in RUN_GLOBS:
        for f in run_dir.glob(pattern):
            f.unlink()


def prepare_run_dir(run_dir: Path, mode: RunMode, env: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Make ``run_dir`` ready for a run in ``mode``; nothing is changed when it refuses.

    Args:
        run_dir: the run folder.
        mode: see :class:`RunMode`.
        env: this machine's :func:`sm120lab.envinfo.collect` snapshot.

    Returns:
        ``(environment to record, earlier summary or None)``; on resume, the earlier run's
        environment and summary.

    Raises:
        RunFolderError: the folder is not empty (``new``), is not a run folder (``resume`` /
            ``overwrite``), was made on another machine or software (``resume``), or cannot be written.
    """
    mode = RunMode(mode)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"{run_dir} exists and is not a folder; choose a folder path")
    busy = run_dir.is_dir() and any(run_dir.iterdir())
    earlier = None
    if busy:
        if mode is RunMode.NEW:
            what = "an earlier run folder" if _is_run_folder(run_dir) else "a folder with other files"
            raise RunFolderError(f"{run_dir} is not empty ({what}); pass --resume to run its missing or "
                                 "failed notebooks, --overwrite to replace that run, or choose a new folder")
        if not _is_run_folder(run_dir):
            raise RunFolderError(f"{run_dir} is not empty and is not a run folder (no summary.json); "
                                 f"--{mode.value} only applies to run folders; choose a new folder")
        if mode is RunMode.RESUME:
            try:
                earlier = validate_summary(load_json(run_dir / "summary.json"), run_dir / "summary.json")
                env_path = run_dir / "environment.json"
                old_env = validate_environment(load_json(env_path), env_path) if env_path.exists() else None
            except SchemaError as exc:
                raise RunFolderError(f"cannot resume: {exc}") from None
            if old_env is None:
                raise RunFolderError(f"cannot resume {run_dir}: no environment.json to match this machine against")
            old, new = machine_facts(old_env), machine_facts(env)
            differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            if differ:
                shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in differ[:4])
                more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
                raise RunFolderError(f"cannot resume {run_dir}: it was made on another machine or software "
                                     f"({shown}{more}); choose a new folder")
            env = old_env
    try:
        if busy and mode is RunMode.OVERWRITE:
            _remove_run_files(run_dir)
        (run_dir / "results").mkdir(parents=True, exist_ok=True)
        if not os.access(run_dir / "results", os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise RunFolderError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}") from None
    return env, earlier


def execute_all(notebooks: list[Path], run_dir: Path, params: dict[str, Any] | None = None,
                kernel_name: str = "python3", progress: bool = True, timeout_s: int = 3600,
                env: dict[str, Any] | None = None, mode: RunMode = RunMode.NEW,
                command: str | None = None, report: bool = True) -> RunSummary:
    """Execute ``notebooks`` into ``run_dir``; return the summary (also written to summary.json).

    Args:
        notebooks: the ``NN_name.ipynb`` files to run, in order.
        run_dir: the run folder (see :func:`prepare_run_dir` for what happens when it holds files).
        params: papermill parameters (global and per-notebook sections, :func:`parameters_for`).
        kernel_name: Jupyter kernel.
        progress: show a progress bar.
        timeout_s: per-cell execution limit.
        env: the :func:`sm120lab.envinfo.collect` snapshot already taken for the run tag, if any.
        mode: :class:`RunMode` for a folder that is not empty.
        command: the command line to record (:func:`sm120lab.cmdline.command_line`).
        report: also write ``report.html`` (:mod:`sm120lab.runs.report`).

    Returns:
        The :class:`RunSummary`.

    Raises:
        RunFolderError: the folder is refused; nothing in it was changed.
        ValueError: a parameter no notebook declares (:func:`check_parameters`); nothing was changed.
        KeyboardInterrupt: Ctrl-C; the summary (``"interrupted": true``, unfinished notebooks
            ``not run``) and ``report.html`` were written first.
    """
    import papermill
    from traitlets.config import Config

    # kernels talk over local IPC sockets, not plain TCP (ipykernel warns at each TCP start without CurveZMQ keys)
    kernel_config = Config({"KernelManager": {"transport": "ipc"}})
    params = params or {}
    check_parameters(notebooks, params)
    env, earlier = prepare_run_dir(run_dir, mode, env or collect())
    write_stylesheet(run_dir)  # the one stylesheet every notebook page links
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if earlier is None:
        write_json_atomic(run_dir / "environment.json", env)
        summary = RunSummary(run_dir=run_dir, started_utc=env["timestamp_utc"], command=command,
                             notebooks=[NotebookResult(name=p.stem) for p in notebooks])
        todo = list(zip(notebooks, summary.notebooks))
    else:
        kept = {nb["name"]: NotebookResult(name=nb["name"], status=NotebookStatus(nb["status"]),
                                           wall_s=nb.get("wall_s"), error=nb.get("error"),
                                           output=nb.get("output"), html=nb.get("html"))
                for nb in earlier["notebooks"]}
        for p in notebooks:
            kept.setdefault(p.stem, NotebookResult(name=p.stem))
        summary = RunSummary(run_dir=run_dir, started_utc=earlier.get("started_utc") or now,
                             command=earlier.get("command"), resumed_utc=[*earlier.get("resumed_utc", []), now],
                             notebooks=[kept[k] for k in sorted(kept)])
        todo = [(p, kept[p.stem]) for p in notebooks if kept[p.stem].status is not NotebookStatus.OK]
        for p, res in todo:  # a failed attempt's partial results are replaced, never merged into
            (run_dir / "results" / f"{p.stem}.json").unlink(missing_ok=True)
            res.status, res.error, res.wall_s = NotebookStatus.NOT_RUN, None, None
    write_json_atomic(run_dir / "summary.json", summary.to_json())

    old = os.environ.get(RESULTS_ENV)
    os.environ[RESULTS_ENV] = str((run_dir / "results").resolve())
    iterator: Any = todo
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(todo, desc="notebooks", unit="nb")
        iterator = bar
    interrupted = False
    # Ctrl-C is remembered as well as raised: code under papermill (the kernel's start-up) may catch the
    # KeyboardInterrupt, and the run must still stop after the notebook it landed in
    sigint: list[bool] = []  # non-empty once Ctrl-C came

    def on_sigint(signum, frame):
        sigint.append(True)
        quiet_after_interrupt()
        raise KeyboardInterrupt

    # only over Python's own handler: a SIGINT that the caller ignores (nohup) or handles stays theirs
    prev_handler = (signal.signal(signal.SIGINT, on_sigint)
                    if threading.current_thread() is threading.main_thread()
                    and signal.getsignal(signal.SIGINT) is signal.default_int_handler else None)
    try:
        for nb_path, res in iterator:
            if bar is not None:
                bar.set_postfix_str(nb_path.stem)
            out = run_dir / nb_path.name
            t0 = time.perf_counter()
            try:
                nb_params = parameters_for(nb_path, params)
                papermill.execute_notebook(str(nb_path), str(out), parameters=nb_params, cwd=str(nb_path.parent),
                                           kernel_name=kernel_name, progress_bar=False, execution_timeout=timeout_s,
                                           config=kernel_config)
                res.status = NotebookStatus.OK
            except KeyboardInterrupt:
                res.status, res.error = NotebookStatus.NOT_RUN, "interrupted (Ctrl-C) while it ran"
                res.wall_s = round(time.perf_counter() - t0, 2)
                raise
            except Exception as exc:  # one notebook failing must not stop the others
                res.status = NotebookStatus.FAILED
                res.error = _first_error_line(exc)
            res.wall_s = round(time.perf_counter() - t0, 2)
            if out.exists():
                res.output = out.name
                try:
                    res.html = render_html(out, stylesheet=STYLESHEET).name
                except Exception as exc:  # rendering must not turn a good run into a failure
                    res.error = (res.error or "") + f" [html render failed: {_first_error_line(exc)}]"
            write_json_atomic(run_dir / "summary.json", summary.to_json())
            if sigint:  # a Ctrl-C that something under papermill swallowed
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
        quiet_after_interrupt()
        summary.interrupted_utc = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    finally:
        if prev_handler is not None:
            signal.signal(signal.SIGINT, prev_handler)
        if bar is not None:
            bar.close()
        if old is None:
            os.environ.pop(RESULTS_ENV, None)
        else:
            os.environ[RESULTS_ENV] = old
        write_json_atomic(run_dir / "summary.json", summary.to_json())
    if report:
        try:
            from .report import write_report

            write_report(run_dir)
        except Exception as exc:  # the report must not turn a good run into a failure
            print(f"report.html not written: {_first_error_line(exc)}", file=sys.stderr)
    if interrupted:
        raise KeyboardInterrupt
    return summary


#: the libraries that log about a kernel that Ctrl-C stopped (nbclient's "Kernel died while waiting for execute
#: reply" through papermill's logger, asyncio's "Task exception was never retrieved" with the DeadKernelError of the
#: cell's task, printed whenever that task is garbage-collected)
INTERRUPT_NOISE_LOGGERS = ("asyncio", "papermill", "traitlets", "nbclient")


def quiet_after_interrupt() -> None:
    """Silence :data:`INTERRUPT_NOISE_LOGGERS` for the rest of the process and collect the dead cell tasks now.

    Ctrl-C stops the notebook's kernel with the run; the libraries then log that death, with a traceback, after
    the fact (seen once in CI, 2026-12-07: run 2 of ``scripts/ci_repeat.sh`` on b0948c1). The user asked for the
    stop, and the run's one-line ``interrupted:`` message is the answer, so after a Ctrl-C those records are
    dropped (the process exits with 130 right after)."""
    for name in INTERRUPT_NOISE_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    gc.collect()


def default_run_dir(base: Path | None = None, env: dict[str, Any] | None = None) -> Path:
    return (base or Path("runs")) / run_tag(env or collect())
