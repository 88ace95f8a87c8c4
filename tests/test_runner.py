"""`sm120lab run`: papermill execution into a run folder, failures isolated, summary written."""

import json

import nbformat
import pytest

from sm120lab.cli import main
from sm120lab.runs.execute import discover_notebooks, parameters_for, run_tag


def _notebook(path, code_cells, params=None):
    nb = nbformat.v4.new_notebook()
    cells = []
    if params is not None:
        c = nbformat.v4.new_code_cell(params)
        c.metadata["tags"] = ["parameters"]
        cells.append(c)
    cells += [nbformat.v4.new_code_cell(src) for src in code_cells]
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def books(tmp_path):
    d = tmp_path / "nbs"
    d.mkdir()
    _notebook(d / "01_ok.ipynb", [
        "from sm120lab.runs import results\nresults.record('01_ok', {'value': value * 2})\nprint('value', value)"],
        params="value = 1")
    _notebook(d / "02_fails.ipynb", ["raise RuntimeError('planted failure')"])
    _notebook(d / "03_after.ipynb", ["print('still runs')"], params="other = 'a'")
    return d


def test_run_isolates_failures_and_writes_summary(books, tmp_path, capsys):
    out = tmp_path / "run"
    status = main(["run", "--notebooks-dir", str(books), "--out", str(out), "-p", "value", "21", "--no-progress"])
    assert status == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "failed", "ok"]
    assert summary["failed"] == ["02_fails"]
    assert "planted failure" in summary["notebooks"][1]["error"]
    assert (out / "01_ok.html").exists() and (out / "03_after.html").exists()
    assert [p.name for p in out.glob("*.css")] == ["notebook.css"]  # one stylesheet for every page
    assert 'href="notebook.css"' in (out / "01_ok.html").read_text() and "<style" not in (out / "01_ok.html").read_text()
    assert json.loads((out / "results" / "01_ok.json").read_text()) == {"schema_version": 2, "value": 42}
    env = json.loads((out / "environment.json").read_text())
    assert "packages" in env and "gpu" in env
    assert "failed: 02_fails" in capsys.readouterr().out


def test_only_and_params_file_sections(books, tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("01_ok:\n  value: 5\nother: b\n")
    out = tmp_path / "run2"
    assert main(["run", "--notebooks-dir", str(books), "--out", str(out), "--only", "01", "03",
                 "--params", str(params), "--no-progress"]) == 0
    assert json.loads((out / "results" / "01_ok.json").read_text()) == {"schema_version": 2, "value": 10}
    assert not (out / "02_fails.ipynb").exists()


def test_parameters_are_filtered_to_declared_names(books):
    chosen = parameters_for(books / "03_after.ipynb", {"value": 3, "other": "x"})
    assert chosen == {"other": "x"}
    with pytest.raises(ValueError, match="not declared"):
        parameters_for(books / "01_ok.ipynb", {"01_ok": {"nope": 1}})


def test_only_rejects_unknown_names(books):
    with pytest.raises(ValueError, match="no notebook matches"):
        discover_notebooks(books, ["99"])


def test_run_tag_names_time_host_and_gpu():
    tag = run_tag({"gpu": {"available": True, "name": "NVIDIA H200", "driver": "580.159.04",
                           "torch_cuda_runtime": "13.0"}})
    assert tag.endswith("-h200-drv580.159.04-cuda13.0")
    assert run_tag({"gpu": {"available": False}}).endswith("-cpu")
