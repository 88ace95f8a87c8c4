"""Property tests: random malformed run folders (wrong types, odd files, hostile names and payloads)
fed to `report`, `archive` and `compare`. Each ends in a clean result or a one-line error; no page
holds active content; no byte of a file outside the run folder reaches a page or an archive; no
`.partial` folder is left behind; nothing blocks."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import nbformat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_run_hostile import HOSTILE_HTML, PNG, SECRET, cli, deadline, run_folder

from sm120lab.runs.sanitize import active_content

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=6) | st.sampled_from([HOSTILE_HTML, "../../x", "/etc/passwd", "ok", "not run", "01_a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)
names = st.sampled_from(["01_a", "02_b", "<script>x</script>", "../up", "03_ü名", "", ".hidden", "04_" + "x" * 300])
hostile = st.sampled_from([HOSTILE_HTML, "ok", "<img src=x onerror=steal()>", "../../outside.png", "ü名"])
statuses = st.sampled_from(["ok", "failed", "not run", "fine", 3, None])


def _maybe_broken(valid, broken: bool):
    """The valid shape with hostile strings, or (when this part is the broken one) any JSON or a
    shape with wrong field types."""
    return st.one_of(json_values, valid.flatmap(lambda v: _retype(v))) if broken else valid


def _retype(value: dict):
    """``value`` with one of its keys set to random JSON (a wrong type, most of the time)."""
    if not isinstance(value, dict) or not value:
        return st.just(value)
    return st.tuples(st.sampled_from(sorted(value)), json_values).map(lambda kv: {**value, kv[0]: kv[1]})


def summaries(broken: bool):
    entry = st.fixed_dictionaries({"name": st.sampled_from(["01_a", "02_b"]),
                                   "status": st.sampled_from(["ok", "failed", "not run"])},
                                  optional={"error": hostile, "wall_s": st.floats(0, 9)})
    valid = st.fixed_dictionaries({"schema_version": st.just(2), "notebooks": st.lists(
        entry, min_size=1, max_size=2, unique_by=lambda e: e["name"]).map(
        lambda es: [{**e, "output": e["name"] + ".ipynb"} for e in es])},
        optional={"command": hostile, "interrupted": st.booleans(), "started_utc": hostile})
    if broken:
        bad_entry = st.fixed_dictionaries({"name": st.one_of(names, json_values), "status": statuses},
                                          optional={"output": st.one_of(names.map(lambda n: n + ".ipynb"), json_values),
                                                    "error": json_values, "wall_s": json_values})
        return st.one_of(json_values, valid.flatmap(_retype),
                         st.fixed_dictionaries({"notebooks": st.lists(bad_entry, min_size=1, max_size=2)}))
    return valid


def environments(broken: bool):
    valid = st.fixed_dictionaries({"gpu": st.fixed_dictionaries({"available": st.booleans(), "name": hostile,
                                                                 "total_memory_bytes": st.integers(0, 2**40)}),
                                   "packages": st.dictionaries(hostile, hostile, max_size=2),
                                   "env": st.dictionaries(hostile, hostile, max_size=2), "host": hostile})
    return _maybe_broken(valid, broken)


def results(broken: bool):
    answer = st.fixed_dictionaries({"claim": hostile, "status": st.sampled_from(["ok", "bad", "warn", "not_run"]),
                                    "value": hostile, "why": hostile})
    valid = st.fixed_dictionaries({"answer": st.lists(answer, max_size=2),
                                   "verdicts": st.dictionaries(hostile, st.sampled_from(["correct", "garbage"]), max_size=2)})
    return _maybe_broken(valid, broken)


outputs = st.sampled_from([
    {"output_type": "display_data", "data": {"text/html": HOSTILE_HTML}, "metadata": {}},
    {"output_type": "display_data", "data": {"text/markdown": HOSTILE_HTML}, "metadata": {}},
    {"output_type": "display_data", "data": {"image/png": "!!"}, "metadata": {}},
    {"output_type": "display_data", "data": {"text/plain": "f"}, "metadata": {"sm120lab_figure": "../outside.png"}},
    {"output_type": "display_data", "data": {"text/plain": "f"}, "metadata": {"sm120lab_figure": "figures/link.png"}},
    {"output_type": "stream", "name": "stdout", "text": "\x1b[31m<script>steal()</script>"},
    {"output_type": "error", "ename": "E", "evalue": "<img src=x onerror=steal()>", "traceback": ["<b>tb</b>"]},
    {"output_type": "display_data", "data": {"application/javascript": "steal()"}, "metadata": {}},
])
good_notebooks = (
    st.lists(outputs, max_size=4).map(lambda outs: json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": HOSTILE_HTML},
                  {"cell_type": "code", "metadata": {}, "source": "x", "execution_count": 1, "outputs": outs}]}).encode()))
odd_files = st.lists(st.tuples(st.sampled_from(["summary.json", "environment.json", "results/01_a.json",
                                                "results/zz.json", "01_a.ipynb", "figures/link.png"]),
                               st.sampled_from(["fifo", "dev-zero", "outside", "folder", "dangling"])), max_size=2)


def _plant(path: Path, kind: str, outside: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        return
    if os.path.lexists(path):  # a file, link or FIFO planted earlier at the same place: replace it
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "outside":
        path.symlink_to(outside)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(path.parent / "no-such-target")


def _check(status: int, out: str, error_status: int | None = None) -> None:
    """No traceback; an error (any non-zero status, or exactly ``error_status``) is one line."""
    assert "Traceback" not in out, out
    if status and (error_status is None or status == error_status):
        assert len(out.strip().splitlines()) == 1, out


@st.composite
def run_parts(draw):
    broken = draw(st.sampled_from([None, "summary", "environment", "results", "notebook"]))
    return {"summary": draw(summaries(broken == "summary")), "env": draw(environments(broken == "environment")),
            "result": draw(results(broken == "results")),
            "notebook": draw(st.one_of(st.binary(max_size=40), json_values.map(lambda v: json.dumps(v).encode()))
                             if broken == "notebook" else good_notebooks),
            "odd": draw(st.one_of(st.just([]), odd_files))}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parts=run_parts(), folder=st.sampled_from(["20260101T000000Z-box-cpu", "<b onmouseover=steal()>r", "run ü"]))
def test_report_archive_compare_on_malformed_run_folders(parts, folder):
    summary, env, result, notebook, odd = (parts[k] for k in ("summary", "env", "result", "notebook", "odd"))
    with tempfile.TemporaryDirectory() as tmp, deadline(120):
        tmp = Path(tmp)
        outside = tmp / "outside.png"
        outside.write_bytes(PNG + SECRET.encode())
        good = run_folder(tmp / "good")
        run = tmp / "runs" / folder
        (run / "results").mkdir(parents=True)
        (run / "figures").mkdir()
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "environment.json").write_text(json.dumps(env))
        (run / "results" / "01_a.json").write_text(json.dumps(result))
        (run / "01_a.ipynb").write_bytes(notebook)
        (run / "figures" / "link.png").symlink_to(outside)
        for rel, kind in odd:
            _plant(run / rel, kind, outside)

        status, out = cli("report", str(run))
        _check(status, out)
        if status == 0:
            page = (run / "report.html").read_text()
            assert active_content(page) == [] and SECRET not in page
            assert nbformat  # the page parsed; figures from outside are never inlined (checked by SECRET)

        arch = tmp / "archive"
        status, out = cli("archive", str(run), "--dest", str(arch))
        _check(status, out)
        if arch.exists():
            assert not list(arch.glob("*.partial")) and not list(arch.glob("*.replaced"))
            for f in arch.rglob("*"):
                if f.is_file():
                    data = f.read_bytes()
                    assert SECRET.encode() not in data, f
                    if f.suffix == ".html":
                        assert active_content(data.decode("utf-8")) == [], f

        for order in ((good, run), (run, good)):
            status, out = cli("compare", *map(str, order))
            _check(status, out, error_status=2)  # 1 is a judged regression, with its table
            assert status in (0, 1, 2)
