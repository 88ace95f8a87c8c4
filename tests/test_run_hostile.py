"""Hostile inputs against run / report / archive / compare (issue 21, second round): each ends in a
one-line error naming the argument or file, or a correct result; nothing the user did not name is
overwritten or deleted; no file outside the run folder is inlined; no page holds a live script; a
FIFO or /dev/zero never hangs a reader; an interrupted run writes report.html and says so."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from sm120lab.cli import main
from sm120lab.runs.sanitize import active_content

SECRET = "TOP-SECRET-FILE-OUTSIDE-THE-RUN"
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def run_folder(d: Path, *, notebook: nbformat.NotebookNode | None = None, env: object = None,
               results: dict | None = None) -> Path:
    (d / "results").mkdir(parents=True)
    books = [{"name": "01_a", "status": "ok", "output": "01_a.ipynb"}]
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": books}))
    (d / "environment.json").write_text(json.dumps(env if env is not None else {"gpu": {"available": False}}))
    (d / "results" / "01_a.json").write_text(json.dumps(results or {"verdicts": {"x": "correct"}}))
    nb = notebook or nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# hello")])
    nbformat.write(nb, d / "01_a.ipynb")
    return d


def cli(*argv: str) -> tuple[int, str]:
    """Run the CLI; (exit status, everything printed, SystemExit messages included)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
            if not isinstance(exc.code, int):
                print(exc.code)
    return status, buf.getvalue()


def one_line_error(status: int, out: str, *needles: str) -> None:
    assert status not in (0, None), out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    for n in needles:
        assert n in out, (n, out)


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail instead of hanging (a FIFO read blocks forever)."""
    def boom(*_):
        raise TimeoutError(f"still running after {seconds} s: a read blocked")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --- data loss ---------------------------------------------------------------------------------------

def test_archive_dot_overwrite_inside_a_run_folder_keeps_every_other_archive(tmp_path, monkeypatch):
    root = tmp_path / "data" / "runs"
    for name in ("20260101T000000Z-a-cpu", "20260102T000000Z-b-cpu"):
        run_folder(root / name)
    before = tree(root)
    run = run_folder(tmp_path / "runs" / "20260103T000000Z-c-cpu")
    monkeypatch.chdir(run)
    assert cli("archive", ".", "--dest", str(root), "--overwrite")[0] == 0
    assert cli("archive", ".", "--dest", str(root), "--overwrite")[0] == 0  # replacing its own archive only
    after = tree(root)
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(p.name for p in root.iterdir()) == ["20260101T000000Z-a-cpu", "20260102T000000Z-b-cpu",
                                                      "20260103T000000Z-c-cpu"]
    monkeypatch.chdir(root / "20260101T000000Z-a-cpu")  # inside an archive: nothing to do, nothing touched
    one_line_error(*cli("archive", ".", "--dest", str(root), "--overwrite"), "already archived")
    assert {k: v for k, v in tree(root).items() if k in before} == before


def test_archive_of_sub_dotdot_resolves_and_leaves_no_partial(tmp_path):
    run = run_folder(tmp_path / "runs" / "20260103T000000Z-c-cpu")
    (run / "sub").mkdir()
    root = tmp_path / "archive"
    assert cli("archive", str(run / "sub" / ".."), "--dest", str(root), "--overwrite")[0] == 0
    assert sorted(p.name for p in root.iterdir()) == ["20260103T000000Z-c-cpu"]
    one_line_error(*cli("archive", str(run), "--dest", str(run / "inside")), "inside the run folder")
    assert not (run / "inside").exists()


def test_archive_overwrite_never_replaces_a_folder_that_is_not_an_archive(tmp_path):
    run = run_folder(tmp_path / "runs" / "20260103T000000Z-c-cpu")
    root = tmp_path / "archive"
    (root / run.name).mkdir(parents=True)
    (root / run.name / "mine.txt").write_text("keep")
    one_line_error(*cli("archive", str(run), "--dest", str(root), "--overwrite"), "not an archived run")
    assert (root / run.name / "mine.txt").read_text() == "keep"


def test_json_and_out_never_overwrite_a_runs_own_files(tmp_path):
    a, b = run_folder(tmp_path / "A"), run_folder(tmp_path / "B")
    before_a, before_b = tree(a), tree(b)
    one_line_error(*cli("compare", str(a), str(b), "--json", str(a / "summary.json")), "--json", "inside the run")
    one_line_error(*cli("compare", str(a), str(b), "--json", str(b / "results" / "x.json")), "--json")
    one_line_error(*cli("report", str(a), "--out", str(a / "summary.json")), "--out", "inside the run")
    assert tree(a) == before_a and tree(b) == before_b
    assert cli("report", str(a))[0] == 0 and (a / "report.html").is_file()  # its own report.html is fine
    assert cli("compare", str(a), str(b), "--json", str(tmp_path / "diff.json"))[0] == 0


# --- security ----------------------------------------------------------------------------------------

HOSTILE_HTML = ('<b onclick="steal()">bold</b><script>steal()</script><img src=x onerror="steal()">'
                '<a href="javascript:steal()">link</a><iframe srcdoc="<script>steal()</script>"></iframe>'
                '<svg><script>steal()</script></svg><style>body{display:none}</style><table><tr><td>kept</td></tr></table>')


def hostile_notebook() -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# title\n" + HOSTILE_HTML),
        nbformat.v4.new_code_cell("x", outputs=[
            nbformat.v4.new_output("display_data", data={"text/html": HOSTILE_HTML, "text/plain": "x"}),
            nbformat.v4.new_output("display_data", data={"text/markdown": HOSTILE_HTML}),
            nbformat.v4.new_output("display_data", data={"application/javascript": "steal()", "text/plain": "js"}),
            nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg onload='steal()'></svg>"}),
            nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(PNG).decode()})])])


def test_no_live_script_in_the_report_or_any_archived_page(tmp_path):
    run = run_folder(tmp_path / "20260101T000000Z-x-cpu", notebook=hostile_notebook())
    assert cli("report", str(run))[0] == 0
    page = (run / "report.html").read_text()
    assert active_content(page) == [] and "steal()" not in page
    assert "<td>kept</td>" in page and "<script" not in page and "onerror" not in page and "onclick" not in page
    dest = tmp_path / "archive"
    assert cli("archive", str(run), "--dest", str(dest))[0] == 0
    for html in (dest / run.name).glob("*.html"):
        text = html.read_text()
        assert active_content(text) == [] and "<script" not in text, html.name


@pytest.mark.parametrize("rel", ["../outside.png", "/ABS", "figures/../../outside.png", "figures/link.png"])
def test_a_figure_path_leading_out_of_the_run_is_not_inlined(tmp_path, rel):
    outside = tmp_path / "outside.png"
    outside.write_bytes(PNG + SECRET.encode())
    rel = rel.replace("/ABS", str(outside))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={"text/plain": "[figure]"}, metadata={"sm120lab_figure": rel})])])
    run = run_folder(tmp_path / "runs" / "R", notebook=nb)
    (run / "figures").mkdir()
    (run / "figures" / "link.png").symlink_to(outside)
    assert cli("report", str(run))[0] == 0
    page = (run / "report.html").read_text()
    secret64 = base64.b64encode(PNG + SECRET.encode()).decode()
    assert secret64 not in page and "figure not shown" in page


# --- hangs and memory --------------------------------------------------------------------------------

@pytest.mark.parametrize("odd", ["fifo", "dev-zero", "folder", "link-outside", "dangling"])
def test_odd_files_give_one_line_not_a_hang(tmp_path, odd):
    a, b = run_folder(tmp_path / "A"), run_folder(tmp_path / "B")
    target = b / "results" / "02_b.json"
    if odd == "fifo":
        os.mkfifo(target)
    elif odd == "dev-zero":
        target.symlink_to("/dev/zero")
    elif odd == "folder":
        target.mkdir()
    elif odd == "link-outside":
        (tmp_path / "elsewhere.json").write_text(json.dumps({"verdicts": {"x": SECRET}}))
        target.symlink_to(tmp_path / "elsewhere.json")
    else:
        target.symlink_to(tmp_path / "gone.json")
    with deadline(60):
        one_line_error(*cli("compare", str(a), str(b)), "02_b.json")
        status, out = cli("report", str(b))
        assert status == 0 and SECRET not in (b / "report.html").read_text()
        one_line_error(*cli("archive", str(b), "--dest", str(tmp_path / "arch")), "02_b.json")
    assert not list((tmp_path / "arch").glob("*.partial")) if (tmp_path / "arch").exists() else True


def test_a_notebook_or_summary_that_is_a_fifo_or_dev_zero_does_not_hang(tmp_path):
    b = run_folder(tmp_path / "B")
    (b / "01_a.ipynb").unlink()
    os.mkfifo(b / "01_a.ipynb")
    with deadline(60):
        assert cli("report", str(b))[0] == 0 and "notebook unreadable" in (b / "report.html").read_text()
        one_line_error(*cli("archive", str(b), "--dest", str(tmp_path / "arch")), "01_a.ipynb")
        (b / "summary.json").unlink()
        (b / "summary.json").symlink_to("/dev/zero")
        one_line_error(*cli("report", str(b)), "summary.json")
        one_line_error(*cli("compare", str(b), str(b)), "summary.json")


# --- tracebacks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("env", [{"gpu": {"available": "yes"}}, {"gpu": {"available": True, "name": ["H200"]}},
                                 {"packages": {"torch": 2}}, {"gpu": {"available": True, "total_memory_bytes": "x"}},
                                 {"sm120lab": "0.1"}, [], "text", {"nvcc": [1]}])
def test_wrong_types_in_environment_json(tmp_path, env):
    run = run_folder(tmp_path / "R", env=env)
    status, out = cli("report", str(run))
    assert status == 0 and "Traceback" not in out
    assert "environment unreadable" in (run / "report.html").read_text()
    one_line_error(*cli("archive", str(run), "--dest", str(tmp_path / "arch")), "environment.json")
    assert not (tmp_path / "arch").exists() or not list((tmp_path / "arch").iterdir())


@pytest.mark.parametrize("payload", [b'{"cells": [', "é".encode("latin-1") * 20, b"\x00\x01\x02", b"[]",
                                     b'{"cells": "x", "nbformat": 4, "nbformat_minor": 5, "metadata": {}}'])
def test_truncated_or_binary_notebook_is_one_line_naming_it(tmp_path, payload):
    run = run_folder(tmp_path / "R")
    (run / "01_a.ipynb").write_bytes(payload)
    one_line_error(*cli("archive", str(run), "--dest", str(tmp_path / "arch")), "01_a.ipynb")
    assert cli("report", str(run))[0] == 0


@pytest.mark.parametrize("data, why", [("!!not base64!!", "not valid base64"),
                                       (base64.b64encode(b"GIF89a not a png").decode(), "not a PNG")])
def test_broken_figure_names_the_notebook_not_the_destination(tmp_path, data, why):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={"image/png": data, "text/plain": "fig"})])])
    run = run_folder(tmp_path / "R", notebook=nb)
    status, out = cli("archive", str(run), "--dest", str(tmp_path / "arch"))
    one_line_error(status, out, str(run / "01_a.ipynb"), why)
    assert "arch" not in out.split(":")[0]
    assert not (tmp_path / "arch").exists() or not list((tmp_path / "arch").iterdir())
    assert cli("report", str(run))[0] == 0 and "figure not shown" in (run / "report.html").read_text()


# --- silent success --------------------------------------------------------------------------------

def _notebooks(d: Path) -> Path:
    d.mkdir()
    started = d / "02_started"  # written by 02 once its kernel runs, so a test can interrupt it mid-cell
    for name, params, code in (("01_a", "value = 1", "print(value)"),
                               ("02_b", None, f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('1')\n"
                                              "time.sleep(60)")):
        nb = nbformat.v4.new_notebook()
        if params:
            cell = nbformat.v4.new_code_cell(params)
            cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
        nb.cells.append(nbformat.v4.new_code_cell(code))
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, d / f"{name}.ipynb")
    return d


def test_run_refuses_a_parameter_no_notebook_declares(tmp_path):
    books = _notebooks(tmp_path / "nbs")
    out = tmp_path / "run"
    one_line_error(*cli("run", "--notebooks-dir", str(books), "--out", str(out), "-p", "no_such_param", "5",
                        "--no-progress"), "-p no_such_param", "value")
    assert not out.exists()
    params = tmp_path / "p.yaml"
    params.write_text("99_nothing: {value: 2}\n")
    one_line_error(*cli("run", "--notebooks-dir", str(books), "--out", str(out), "--params", str(params),
                        "--no-progress"), "99_nothing")
    params.write_text("01_a: {nope: 2}\n")
    one_line_error(*cli("run", "--notebooks-dir", str(books), "--out", str(out), "--params", str(params),
                        "--no-progress"), "nope")
    assert not out.exists()


# --- interrupted run -------------------------------------------------------------------------------

def _without_kernel_logs(text: str) -> str:
    """``text`` without the Jupyter kernel's own log records: each line opened by ``[IPKernelApp]`` (or another
    ``[...App]`` logger) and a traceback that starts on the very next line, through its exception line."""
    kept, state = [], None  # None, "header" (after a kernel log line), "tb" (inside its traceback)
    for line in text.splitlines():
        if re.match(r"^\[\w*App\]", line):
            state = "header"
            continue
        if state == "header" and line.startswith("Traceback"):
            state = "tb"
            continue
        if state == "tb":
            if line[:1].isspace():
                continue
            if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line):
                state = None
                continue
        state = None
        kept.append(line)
    return "\n".join(kept)


def test_kernel_log_records_are_told_apart_from_ours():
    kernel = ("[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.\n[IPKernelApp] ERROR | Exception in message handler:\n"
              "Traceback (most recent call last):\n  File \"/x/ipykernel/kernelbase.py\", line 508, in dispatch_shell\n"
              "    await result\nKeyboardInterrupt\n")
    ours = "Traceback (most recent call last):\n  File \"/x/sm120lab/runs/runner.py\", line 1\nKeyboardInterrupt\n"
    last = "interrupted: notebook 02 stopped; report ... --resume\n"
    assert _without_kernel_logs(kernel + last).strip() == last.strip()
    assert "KeyboardInterrupt" in _without_kernel_logs(ours + kernel + last)
    assert "/sm120lab/" in _without_kernel_logs(kernel + ours + last)


def test_interrupted_run_writes_report_and_says_interrupted(tmp_path):
    books = _notebooks(tmp_path / "nbs")
    out = tmp_path / "run"
    # SIGINT as in a terminal: under nohup (or a CI runner that ignores it) the child would inherit SIG_IGN, and
    # Python then never raises KeyboardInterrupt (the failure seen once in CI: the run went on and exited 0)
    proc = subprocess.Popen([sys.executable, "-m", "sm120lab", "run", "--notebooks-dir", str(books), "--out", str(out),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        t0 = time.monotonic()
        # wait until 02's kernel runs its sleeping cell (a fixed delay after 01 raced the kernel's start-up
        # on a loaded CI box: the signal then landed before 02 ran)
        while time.monotonic() - t0 < 120 and not (books / "02_started").is_file():
            time.sleep(0.2)
        assert (books / "02_started").is_file(), "notebook 02 never started"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("interrupted:") and "--resume" in last and "report.html" in last
    # no traceback of ours: the Jupyter kernel, interrupted by the same Ctrl-C, may log its own records on the
    # stderr it inherits ("[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel." and a traceback of
    # ipykernel's message handler: the failure of 2026-12-06, run 2 of scripts/ci_repeat.sh); those are not ours
    ours = _without_kernel_logs(text.replace(str(out), ""))
    assert "KeyboardInterrupt" not in ours and "Traceback" not in ours and "/sm120lab/" not in ours, ours
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["interrupted_utc"]
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "not run"]
    page = (out / "report.html").read_text()
    assert 'id="interrupted"' in page and "--resume" in page


def test_matrix_checks_every_combination_parameter_before_running(tmp_path):
    books = _notebooks(tmp_path / "nbs")
    matrix = tmp_path / "m.yaml"
    matrix.write_text("combinations:\n  - {label: a, params: {value: 2}}\n  - {label: b, params: {typo: 3}}\n")
    one_line_error(*cli("run", "--notebooks-dir", str(books), "--only", "01", "--matrix", str(matrix),
                        "--out", str(tmp_path / "runs"), "--no-progress"), "--matrix combination b: typo")
    assert not (tmp_path / "runs").exists()


def test_a_swallowed_ctrl_c_still_stops_the_run_after_its_notebook(tmp_path, monkeypatch):
    """A Ctrl-C that code under papermill catches (it can land in the kernel's start-up) must not be lost:
    the notebook it landed in finishes, the rest are 'not run', and the run says interrupted."""
    import os

    import papermill

    from sm120lab.runs.execute import execute_all

    books = _notebooks(tmp_path / "nbs")
    (books / "03_c.ipynb").write_bytes((books / "01_a.ipynb").read_bytes())
    ran = []

    def fake_execute(src, dst, **kw):
        ran.append(Path(src).stem)
        if len(ran) == 1:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass  # swallowed, as a library might
        Path(dst).write_bytes(Path(src).read_bytes())

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    nbs = sorted(books.glob("*.ipynb"))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (CI may run under nohup)
    try:
        with pytest.raises(KeyboardInterrupt):
            execute_all(nbs, tmp_path / "run", report=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)
    assert ran == ["01_a"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "not run", "not run"]


def test_after_ctrl_c_the_dead_kernels_task_logs_nothing(caplog):
    """The failure of 2026-12-07 (run 2 of scripts/ci_repeat.sh on b0948c1): after Ctrl-C the cell's asyncio task
    died with the kernel, and asyncio logged "Task exception was never retrieved" with a traceback when it was
    collected; nbclient logged "Kernel died" through papermill's logger. After quiet_after_interrupt neither
    logger emits a record (read with caplog: pytest's handler stands where stderr's last-resort handler would)."""
    import asyncio
    import logging

    from sm120lab.runs import execute

    saved = {n: logging.getLogger(n).level for n in execute.INTERRUPT_NOISE_LOGGERS}
    for n in saved:  # an earlier in-process interrupted run (a test above) leaves them silenced for its process
        logging.getLogger(n).setLevel(logging.NOTSET)
    loop = asyncio.new_event_loop()

    async def dies():
        raise RuntimeError("Kernel died")

    def dead_task():
        t = loop.create_task(dies())
        loop.run_until_complete(asyncio.sleep(0))
        assert t.done()
        return t

    def noise():
        return [r for r in caplog.records if r.name in ("asyncio", "papermill")]

    try:
        caplog.set_level(logging.DEBUG)
        task = dead_task()
        del task  # collected with its exception never retrieved: asyncio logs it
        logging.getLogger("papermill").error("Kernel died while waiting for execute reply.")
        assert [r.name for r in noise()] == ["asyncio", "papermill"]  # the noise, before
        assert "never retrieved" in noise()[0].getMessage()
        caplog.clear()
        task = dead_task()
        execute.quiet_after_interrupt()
        del task
        logging.getLogger("papermill").error("Kernel died while waiting for execute reply.")
        assert noise() == []
    finally:
        loop.close()
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)
