"""Hostile inputs, third round (issue 32, item 5): each ends in a one-line error naming the argument
(or file) and what was expected, or a correct result; never a traceback, a hang, a silent success or
an overwritten file. Everything here runs on the CPU with fixed inputs."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import nbformat
import pytest

from sm120lab.cli import main


def cli(*argv: str) -> tuple[int, str]:
    """Run the CLI as the console script does; (exit status, everything printed).

    A ``SystemExit`` carrying a message is what Python would print and exit with: the status is the
    one the process would end with (``sys.exit("text")`` ends with 1).
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                status = 1
    return status, buf.getvalue()


def one_line_error(status: int, out: str, *needles: str, code: int = 2) -> None:
    assert status == code, (status, out)
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    for n in needles:
        assert n in out, (n, out)


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def books(tmp_path):
    d = tmp_path / "nbs"
    d.mkdir()
    flag = tmp_path / "ran"
    for name in ("01_a", "02_b", "03_c"):
        _notebook(d / f"{name}.ipynb", f"open({str(flag)!r}, 'a').write('{name} ')")
    return d, flag


# --- empty means nothing, never everything ---------------------------------------------------------

@pytest.mark.parametrize("only", [[""], [" "], ["01", ""], [".ipynb"]])
def test_run_only_empty_name_runs_nothing(books, tmp_path, only):
    nbs, flag = books
    out = tmp_path / "run"
    one_line_error(*cli("run", "--no-progress", "--notebooks-dir", str(nbs), "--out", str(out), "--only", *only),
                   "--only", "expected notebook names")
    assert not flag.exists() and not out.exists()


@pytest.mark.parametrize("flag,value", [("--routing", ""), ("--routing", ","), ("--routing", " , "),
                                        ("--preset", ""), ("--preset", ",")])
def test_check_sweep_with_an_empty_list_is_refused_not_a_clean_sweep(tmp_path, flag, value):
    out = tmp_path / "sweep.json"
    args = {"--routing": "uniform", "--preset": "tiny", flag: value}
    status, text = cli("check", "--sweep", "2", "--device", "cpu", "--preset", args["--preset"],
                       "--routing", args["--routing"], "--json", str(out))
    one_line_error(status, text, flag, "expected")
    assert "false-alarm sweep" not in text and not out.exists()


def test_false_alarm_sweep_refuses_empty_presets_or_families():
    from sm120lab.moe.sweep import false_alarm_sweep

    for presets, families in (([], ["uniform"]), (["tiny"], [])):
        with pytest.raises(ValueError, match="at least one"):
            false_alarm_sweep(presets, families, 1, 0, "cpu")


# --- one exit-code contract: bad arguments 2, a failed judgement 1 ------------------------------------

def _run_folder(d: Path, verdict: str) -> Path:
    (d / "results").mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": [
        {"name": "01_a", "status": "ok", "output": "01_a.ipynb"}]}))
    (d / "environment.json").write_text(json.dumps({"host": "h", "gpu": {"available": False}}))
    (d / "results" / "01_a.json").write_text(json.dumps({"verdicts": {"be": verdict}}))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a")]), d / "01_a.ipynb")
    return d


@pytest.mark.parametrize("argv, needle", [
    (["report", "{tmp}"], "RUN:"),
    (["archive", "{tmp}"], "RUN:"),
    (["roofline", "--tp", "0"], "--tp: expected"),
    (["recommend", "--users", "-1"], "--users: expected"),
    (["recommend", "--gpu", "h100"], "--gpu: expected"),
    (["upstream", "record", "vllm", "not-a-version"], "version: expected"),
    (["upstream", "show", "vllm", "9.9.9"], "no recorded facts"),
    (["toolchains", "install", "99.9"], "versions:"),
    (["dev", "kernel-aot", "--jobs", "0"], "--jobs: expected"),
    (["check", "--sweep", "0", "--device", "cpu"], "--sweep: expected"),
    (["run", "--params", "{tmp}/missing.yaml"], "--params"),
])
def test_bad_arguments_exit_2_in_every_command(tmp_path, argv, needle):
    one_line_error(*cli(*[a.format(tmp=tmp_path) for a in argv]), needle)


def test_a_message_exit_is_status_2_for_the_real_process(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "sm120lab", "report", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert proc.stdout == "" and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("RUN: ") and "Traceback" not in proc.stderr


def test_a_failed_judgement_is_status_1_not_2(tmp_path):
    good, bad = _run_folder(tmp_path / "A", "correct"), _run_folder(tmp_path / "B", "garbage")
    assert cli("compare", str(good), str(good))[0] == 0
    status, out = cli("compare", str(good), str(bad))
    assert status == 1 and "Traceback" not in out
