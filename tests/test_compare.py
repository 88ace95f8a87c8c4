"""`sm120lab run --matrix` and `sm120lab compare`: folders per combination, differences, regressions."""

import json

import nbformat
import pytest

from sm120lab.cli import main
from sm120lab.runs.compare import compare_many, load_run, timeline
from sm120lab.runs.matrix import load_matrix

BODY = """
import os
from sm120lab.runs import results
flavor = os.environ.get('SM120LAB_TEST_FLAVOR', 'none')
results.record_verdicts('01_probe', {'backend-x': 'correct', 'backend-y': 'correct' if flavor == 'a' else 'degraded'})
results.record_compile_matrix('01_probe', {'mma|13.0|sm_120': 'rejected-ptxas', 'mma|13.0|sm_120f': 'accepted' if flavor == 'a' else 'rejected-arch'})
results.record_bench('01_probe', {'moe_us_T1': {'value': 100.0 if flavor == 'a' else 101.0, 'unit': 'us', 'spread': 0.03}})
print(flavor)
"""


@pytest.fixture
def matrix_runs(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(BODY)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nbdir / "01_probe.ipynb")
    matrix = tmp_path / "m.yaml"
    matrix.write_text("axes:\n  SM120LAB_TEST_FLAVOR: [a, b]\n")
    base = tmp_path / "runs"
    assert main(["run", "--notebooks-dir", str(nbdir), "--matrix", str(matrix), "--out", str(base), "--no-progress"]) == 0
    index = json.loads((base / "matrix.json").read_text())
    return [r["run_dir"] for r in index["runs"]]


def test_matrix_makes_one_folder_per_combination_and_compare_reports(matrix_runs, tmp_path):
    assert len(matrix_runs) == 2 and matrix_runs[0] != matrix_runs[1]
    assert all(r.endswith(("flavora", "flavorb")) for r in matrix_runs)
    [cmp] = compare_many(matrix_runs)
    by_key = {(c.kind, c.key): c for c in cmp.changes}
    assert by_key[("environment", "env:SM120LAB_TEST_FLAVOR")].after == "b"
    assert by_key[("verdict", "backend-y")].assessment == "regression"
    assert ("verdict", "backend-x") not in by_key
    assert by_key[("compile", "mma|13.0|sm_120f")].after == "rejected-arch"
    assert by_key[("bench", "moe_us_T1")].assessment == "within-noise"  # +1% inside a 5% band
    # the CLI exits 1 on the correctness regression and writes JSON
    out = tmp_path / "diff.json"
    assert main(["compare", *matrix_runs, "--json", str(out)]) == 1
    assert json.loads(out.read_text())[0]["changes"]


def test_planted_regressions_are_flagged(matrix_runs):
    a, b = matrix_runs
    assert main(["compare", a, a]) == 0  # a run against itself: nothing
    path = f"{a}/results/01_probe.json"
    res = json.loads(open(path).read())
    res["verdicts"]["backend-x"] = "garbage"
    res["bench"]["moe_us_T1"]["value"] = 150.0
    open(path, "w").write(json.dumps(res))
    [cmp] = compare_many([matrix_runs[1], a])
    assess = {(c.kind, c.key): c.assessment for c in cmp.changes}
    assert assess[("verdict", "backend-x")] == "regression"
    assert assess[("bench", "moe_us_T1")] == "regression"
    assert main(["compare", b, a]) == 1
    rows = timeline(matrix_runs)
    assert {r["kind"] for r in rows} == {"verdict", "compile", "bench"}


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no summary.json"):
        load_run(tmp_path)
    with pytest.raises(ValueError, match="at least two"):
        compare_many([tmp_path])
    bad = tmp_path / "m.yaml"
    bad.write_text("axes:\n  X: []\n")
    with pytest.raises(ValueError, match="non-empty"):
        load_matrix(bad)
    bad.write_text("combinations:\n  - label: a\n  - label: a\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_matrix(bad)
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2


def test_archive_keeps_results_html_and_a_report(matrix_runs, tmp_path):
    from sm120lab.runs.archive import archive_run

    dest = archive_run(matrix_runs[0], tmp_path / "archive")
    assert (dest / "results" / "01_probe.json").exists() and (dest / "summary.json").exists()
    assert (dest / "01_probe.html").is_file() and "<script" not in (dest / "01_probe.html").read_text()
    assert (dest / "report.html").is_file()
    assert load_run(dest).results["01_probe"]["verdicts"]["backend-x"] == "correct"
