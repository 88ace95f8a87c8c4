"""Run folders as evidence: compare gates on every lost piece of evidence, inputs are validated
against their schema version, run folders are never overwritten silently, bad files and paths get
one-line errors, writes honour the umask, and the report and archive keep every figure."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import random
import re
import tempfile
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sm120lab.cli import main
from sm120lab.runs.compare import Assessment, against_recorded, compare_many, compare_runs, load_run
from sm120lab.runs.results import SCHEMA_VERSION, SchemaError
from sm120lab.runs.sanitize import active_content

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "data" / "runs"
VERDICTS = ["correct", "degraded", "garbage", "skipped", "error"]
RAN = {"correct": 0, "degraded": 1, "garbage": 2}


def write_run(d: Path, statuses: dict[str, str], results: dict[str, object], env: dict | None = None,
              raw: dict[str, bytes] | None = None) -> Path:
    """A run folder as `sm120lab run` writes it (results written verbatim, so tests can break them)."""
    (d / "results").mkdir(parents=True, exist_ok=True)
    summary = {"schema_version": SCHEMA_VERSION, "started_utc": "2026-01-01T00:00:00+00:00",
               "notebooks": [{"name": n, "status": s} for n, s in statuses.items()]}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "environment.json").write_text(json.dumps(env or {"host": "h", "gpu": {"available": False}}))
    for name, payload in results.items():
        (d / "results" / f"{name}.json").write_text(json.dumps(payload))
    for rel, data in (raw or {}).items():
        (d / rel).write_bytes(data)
    return d


def compare_cli(*args: str) -> tuple[int, str]:
    """Run `sm120lab compare` and return (exit status, everything it printed)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            status = main(["compare", *args])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (print(exc.code) or 2)
    return status, buf.getvalue()


BENCH = {"t": {"value": 100.0, "unit": "us", "spread": 0.01, "lower_is_better": True}}


@pytest.fixture
def baseline(tmp_path):
    return write_run(tmp_path / "A", {"03_x": "ok"}, {"03_x": {"verdicts": {"be": "correct"}, "bench": BENCH}})


# --- compare: every loss of correctness evidence fails the gate -----------------------------------

@pytest.mark.parametrize("case", ["failed-notebook", "missing-verdict", "error", "skipped", "worse"])
def test_compare_fails_on_lost_correctness_evidence(baseline, tmp_path, case):
    statuses = {"03_x": "failed" if case == "failed-notebook" else "ok"}
    verdict = {"failed-notebook": None, "missing-verdict": None, "error": "error", "skipped": "skipped",
               "worse": "garbage"}[case]
    results = {} if case == "failed-notebook" else {"03_x": {"verdicts": {} if verdict is None else {"be": verdict},
                                                             "bench": BENCH}}
    other = write_run(tmp_path / "B", statuses, results)
    [cmp] = compare_many([baseline, other])
    assert cmp.correctness_regressions, cmp.changes
    status, out = compare_cli(str(baseline), str(other))
    assert status == 1 and "Traceback" not in out


def test_compare_passes_when_nothing_got_worse(baseline, tmp_path):
    other = write_run(tmp_path / "B", {"03_x": "ok", "04_new": "ok"},
                      {"03_x": {"verdicts": {"be": "correct", "new-be": "garbage"}, "bench": BENCH}})
    assert compare_cli(str(baseline), str(other))[0] == 0
    fixed = write_run(tmp_path / "C", {"03_x": "ok"}, {"03_x": {"verdicts": {"be": "correct"}, "bench": BENCH}})
    broken = write_run(tmp_path / "D", {"03_x": "ok"}, {"03_x": {"verdicts": {"be": "error"}, "bench": BENCH}})
    [cmp] = compare_many([broken, fixed])
    assert [c.assessment for c in cmp.changes if c.kind == "verdict"] == [Assessment.FIX]


def test_nan_bench_is_a_regression_not_an_improvement(baseline, tmp_path):
    nan = {"t": {**BENCH["t"], "value": float("nan")}}
    other = write_run(tmp_path / "B", {"03_x": "ok"}, {"03_x": {"verdicts": {"be": "correct"}, "bench": nan}})
    [cmp] = compare_many([baseline, other])
    [ch] = [c for c in cmp.changes if c.kind == "bench"]
    assert ch.assessment == Assessment.REGRESSION and "finite" in ch.detail
    assert compare_cli(str(baseline), str(other))[0] == 1


@pytest.mark.parametrize("lower_is_better, after, expected", [(True, 500.0, Assessment.REGRESSION),
                                                               (False, 500.0, Assessment.IMPROVEMENT),
                                                               (False, -1.0, Assessment.REGRESSION)])
def test_zero_baseline_does_not_hide_the_change(tmp_path, lower_is_better, after, expected):
    fig = {"value": 0.0, "unit": "us", "spread": 0.01, "lower_is_better": lower_is_better}
    a = write_run(tmp_path / "A", {"03_x": "ok"}, {"03_x": {"bench": {"t": fig}}})
    b = write_run(tmp_path / "B", {"03_x": "ok"}, {"03_x": {"bench": {"t": {**fig, "value": after}}}})
    [cmp] = compare_many([a, b])
    assert [c.assessment for c in cmp.changes] == [expected]


MALFORMED = {
    "results-is-a-list": ("results/03_x.json", b"[1, 2]"),
    "bench-without-value": ("results/03_x.json", json.dumps({"bench": {"t": {"unit": "us"}}}).encode()),
    "verdicts-is-a-list": ("results/03_x.json", json.dumps({"verdicts": ["correct"]}).encode()),
    "verdict-not-a-string": ("results/03_x.json", json.dumps({"verdicts": {"be": 1}}).encode()),
    "answer-not-a-list": ("results/03_x.json", json.dumps({"answer": {"claim": "x"}}).encode()),
    "newer-schema": ("results/03_x.json", json.dumps({"schema_version": SCHEMA_VERSION + 1}).encode()),
    "binary-results": ("results/03_x.json", bytes(range(256))),
    "summary-notebooks-ints": ("summary.json", b'{"notebooks": [1]}'),
    "summary-is-a-list": ("summary.json", b"[]"),
    "summary-bad-status": ("summary.json", b'{"notebooks": [{"name": "03_x", "status": "fine"}]}'),
    "environment-gpu-list": ("environment.json", b'{"gpu": []}'),
    "truncated-json": ("results/03_x.json", b'{"verdicts": {"be": "corr'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_gets_one_line_naming_the_file(baseline, tmp_path, case):
    rel, data = MALFORMED[case]
    other = write_run(tmp_path / "B", {"03_x": "ok"}, {"03_x": {"verdicts": {"be": "correct"}}}, raw={rel: data})
    with pytest.raises(SchemaError, match=rel.split("/")[-1]):
        load_run(other)
    status, out = compare_cli(str(baseline), str(other))
    assert status == 2
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1 and str(other / rel) in out


def test_recorded_runs_without_schema_version_still_load_and_notebook_06_can_compare():
    runs = sorted(p for p in RECORDED.iterdir() if (p / "summary.json").is_file())
    assert runs, "data/runs holds no recorded run"
    for r in runs:
        run = load_run(r)
        assert run.summary["notebooks"] and run.results
    cmps = against_recorded(runs[-1], RECORDED)
    assert [c.other for c in cmps] == [runs[-1].name] * (len(runs) - 1)  # itself is skipped
    assert all(c.baseline != runs[-1].name for c in cmps)


def test_against_recorded_leaves_out_notebooks_still_running(tmp_path, monkeypatch):
    recorded = tmp_path / "recorded"
    write_run(recorded / "r1", {"01_a": "ok", "06_cmp": "ok"}, {"01_a": {"verdicts": {"be": "correct"}}})
    current = write_run(tmp_path / "now", {"01_a": "ok", "06_cmp": "not run"}, {"01_a": {"verdicts": {"be": "correct"}}})
    monkeypatch.setenv("SM120LAB_RESULTS_DIR", str(current / "results"))
    [cmp] = against_recorded(recorded_root=recorded)
    assert cmp.regressions == []  # 06 is the notebook running now, not a failure
    [cmp] = against_recorded(current, recorded)
    assert [c.key for c in cmp.regressions] == ["notebook"]


def test_compare_rejects_unwritable_json_and_bad_min_rel(baseline):
    status, out = compare_cli(str(baseline), str(baseline), "--json", "/proc/no/such.json")
    assert status != 0 and "--json" in out and "Traceback" not in out
    with pytest.raises(SystemExit):
        main(["compare", str(baseline), str(baseline), "--min-rel", "nan"])


# --- property tests: random well-formed and malformed run folders ---------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])
verdict_maps = st.dictionaries(KEYS, st.sampled_from([*VERDICTS, "slow"]), max_size=4)
figures = st.fixed_dictionaries({
    "value": st.floats(allow_nan=True, allow_infinity=True, width=64) | st.integers(-5, 5),
    "unit": st.just("us"),
    "spread": st.none() | st.floats(0, 1),
    "lower_is_better": st.booleans()})
results_st = st.fixed_dictionaries({}, optional={
    "verdicts": verdict_maps,
    "compile_matrix": st.dictionaries(KEYS, st.sampled_from(["accepted", "rejected-arch"]), max_size=3),
    "bench": st.dictionaries(KEYS, figures, max_size=3),
    "answer": st.lists(st.fixed_dictionaries({"claim": st.text(max_size=5), "value": st.text(max_size=5),
                                              "status": st.sampled_from(["ok", "bad", "not_run"]),
                                              "why": st.text(max_size=5)}), max_size=2)})
run_st = st.tuples(st.dictionaries(st.sampled_from(["01_a", "03_x"]), st.sampled_from(["ok", "failed", "not run"]),
                                   min_size=1),
                   st.dictionaries(st.sampled_from(["01_a", "03_x"]), results_st))


def _expected_correctness_regression(a_stat, b_stat, a_res, b_res) -> bool:
    """The rule of issue 12, stated independently: any loss of correctness evidence."""
    if any(s == "ok" and b_stat.get(n) != "ok" for n, s in a_stat.items()):
        return True
    for nb in set(a_res) | set(b_res):
        va, vb = a_res.get(nb, {}).get("verdicts", {}), b_res.get(nb, {}).get("verdicts", {})
        for key, before in va.items():
            after = vb.get(key)
            if after == before:
                continue
            if (after is None or (after == "error")
                    or (after == "skipped" and before in RAN)
                    or (before in RAN and after in RAN and RAN[after] > RAN[before])):
                return True
    return False


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(run_st, run_st)
def test_property_compare_never_crashes_and_gates_every_lost_verdict(run_a, run_b):
    with tempfile.TemporaryDirectory() as tmp:
        a = write_run(Path(tmp) / "A", *run_a)
        b = write_run(Path(tmp) / "B", *run_b)
        [cmp] = compare_many([a, b])
        expected = _expected_correctness_regression(run_a[0], run_b[0], run_a[1], run_b[1])
        assert bool(cmp.correctness_regressions) == expected, cmp.changes
        for ch in cmp.changes:
            if ch.kind == "bench" and ch.after is not None and not math.isfinite(ch.after):
                assert ch.assessment != Assessment.IMPROVEMENT
        status, out = compare_cli(str(a), str(b))
        assert "Traceback" not in out
        assert status == (1 if cmp.regressions else 0)
        assert compare_runs(load_run(a), load_run(a)).changes == []  # a run against itself: nothing


def _corruptions():
    not_object = st.one_of(st.just([]), st.integers(), st.text(max_size=3), st.none())
    not_mapping = st.one_of(st.lists(st.integers(), max_size=2), st.integers(), st.text(max_size=3),
                            st.just({"x": [1]}))
    bad_section = {
        "verdicts": not_mapping, "compile_matrix": not_mapping, "bench": not_mapping,
        "answer": st.one_of(st.integers(), st.text(max_size=3), st.just({"x": [1]}), st.just([1])),
        "schema_version": st.one_of(st.text(max_size=3), st.integers(max_value=0),
                                    st.integers(min_value=SCHEMA_VERSION + 1), st.just(True), st.just([])),
    }
    return st.one_of(
        st.tuples(st.just("results/03_x.json"), not_object.map(lambda v: json.dumps(v).encode())),
        st.tuples(st.just("results/03_x.json"), st.sampled_from(sorted(bad_section)).flatmap(
            lambda k: bad_section[k].map(lambda v: json.dumps({k: v}).encode()))),
        st.tuples(st.just("results/03_x.json"), figures.flatmap(
            lambda f: st.sampled_from(["value", "spread", "lower_is_better"]).map(
                lambda k: json.dumps({"bench": {"t": {**f, k: "x"}}}).encode()))),
        st.tuples(st.sampled_from(["summary.json", "results/03_x.json", "environment.json"]),
                  st.binary(min_size=1, max_size=40).filter(lambda b: not _is_json_object(b))),
        st.tuples(st.just("summary.json"), st.sampled_from([
            b'{"notebooks": {}}', b'{"notebooks": [{"name": 3, "status": "ok"}]}', b'{"notebooks": [[]]}',
            b'{"notebooks": [{"name": "a", "status": "ok"}, {"name": "a", "status": "ok"}]}',
            b'{"notebooks": [], "schema_version": "2"}', b'{"notebooks": [], "started_utc": 5}'])),
    )


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(run_st, _corruptions())
def test_property_malformed_run_folder_is_one_line_naming_the_file(run_a, corruption):
    rel, data = corruption
    with tempfile.TemporaryDirectory() as tmp:
        a = write_run(Path(tmp) / "A", *run_a)
        b = write_run(Path(tmp) / "B", {"03_x": "ok"}, {"03_x": {}}, raw={rel: data})
        for order in ((a, b), (b, a)):
            status, out = compare_cli(*map(str, order))
            assert status == 2, (rel, data, out)
            assert "Traceback" not in out and len(out.strip().splitlines()) == 1
            assert str(b / rel) in out


# --- run folders: never overwritten silently -------------------------------------------------------

def _notebook(path: Path, code: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def books(tmp_path):
    d = tmp_path / "nbs"
    d.mkdir()
    _notebook(d / "01_ok.ipynb", "from sm120lab.runs import results\nresults.record('01_ok', {'v': 1})")
    flag = tmp_path / "fail-flag"
    flag.write_text("1")
    _notebook(d / "02_flaky.ipynb", f"import pathlib\nassert not pathlib.Path({str(flag)!r}).exists(), 'planted'")
    _notebook(d / "scratch.ipynb", "raise SystemExit('not a numbered notebook: never run')")
    return d, flag


def _run(*args: str) -> int:
    try:
        return main(["run", "--no-progress", *args])
    except SystemExit as exc:  # main prints the message on stderr and exits 2 (cmdline.UsageError)
        print(exc)
        return exc.code if isinstance(exc.code, int) else 1


def test_run_refuses_non_empty_out_and_leaves_it_byte_identical(books, tmp_path, capsys):
    nbs, _ = books
    earlier = write_run(tmp_path / "earlier", {"01_ok": "ok"}, {"01_ok": {"v": 7}})
    before = _tree(earlier)
    assert _run("--notebooks-dir", str(nbs), "--only", "01", "--out", str(earlier)) == 2
    assert "--resume" in capsys.readouterr().out
    assert _tree(earlier) == before
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("my notes")
    for flag in ([], ["--overwrite"], ["--resume"]):
        assert _run("--notebooks-dir", str(nbs), "--out", str(other), *flag) == 2
    assert _tree(other) == {"notes.txt": b"my notes"}


def test_resume_runs_only_failed_notebooks_on_the_same_machine(books, tmp_path):
    nbs, flag = books
    out = tmp_path / "run"
    assert _run("--notebooks-dir", str(nbs), "--out", str(out)) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [(n["name"], n["status"]) for n in summary["notebooks"]] == [("01_ok", "ok"), ("02_flaky", "failed")]
    assert summary["schema_version"] == SCHEMA_VERSION and summary["command"].startswith("sm120lab")
    assert (out / "report.html").is_file()
    first_01 = (out / "01_ok.ipynb").read_bytes()
    env_before = (out / "environment.json").read_bytes()
    flag.unlink()
    assert _run("--notebooks-dir", str(nbs), "--out", str(out), "--resume") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "ok"] and summary["resumed_utc"]
    assert (out / "01_ok.ipynb").read_bytes() == first_01  # not re-run
    assert (out / "environment.json").read_bytes() == env_before
    # another machine: refused, nothing touched
    env = json.loads(env_before)
    env["host"] = "another-host"
    (out / "environment.json").write_text(json.dumps(env))
    before = _tree(out)
    assert _run("--notebooks-dir", str(nbs), "--out", str(out), "--resume") == 2
    assert _tree(out) == before


def test_overwrite_replaces_an_earlier_run_only(books, tmp_path):
    nbs, flag = books
    flag.unlink()
    earlier = write_run(tmp_path / "earlier", {"01_ok": "failed", "09_gone": "ok"}, {"09_gone": {"v": 1}},
                        raw={"notes.txt": b"keep"})
    assert _run("--notebooks-dir", str(nbs), "--out", str(earlier), "--overwrite") == 0
    summary = json.loads((earlier / "summary.json").read_text())
    assert [n["name"] for n in summary["notebooks"]] == ["01_ok", "02_flaky"]
    assert not (earlier / "results" / "09_gone.json").exists()
    assert (earlier / "notes.txt").read_bytes() == b"keep"


@pytest.mark.parametrize("name, content, arg", [
    ("p.yaml", b"a: [1, 2\n", "--params"),
    ("p.yaml", bytes(range(256)), "--params"),
    ("p.yaml", b"- 1\n- 2\n", "--params"),
    ("m.yaml", b"axes: {X: [1\n", "--matrix"),
    ("m.yaml", b"\x00\x01binary", "--matrix"),
    ("m.yaml", b"combinations:\n  - {label: a, env: [1]}\n", "--matrix"),
])
def test_bad_params_and_matrix_files_get_one_line_errors(books, tmp_path, capsys, name, content, arg):
    nbs, _ = books
    f = tmp_path / name
    f.write_bytes(content)
    assert _run("--notebooks-dir", str(nbs), arg, str(f), "--out", str(tmp_path / "o")) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith(arg) and len(out.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_unwritable_out_is_one_line(books, tmp_path, capsys):
    nbs, _ = books
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub", Path("/proc/sm120lab-run")):
        assert _run("--notebooks-dir", str(nbs), "--only", "01", "--out", str(out)) == 2
        text = capsys.readouterr().out.strip().splitlines()
        assert text[-1].startswith("--out:") and "Traceback" not in "\n".join(text)
    assert blocker.read_text() == "x"


def test_discovery_runs_every_numbered_notebook_only(books):
    from sm120lab.runs.execute import discover_notebooks

    nbs, _ = books
    _notebook(nbs / "07_new.ipynb", "print(7)")
    assert [p.name for p in discover_notebooks(nbs)] == ["01_ok.ipynb", "02_flaky.ipynb", "07_new.ipynb"]
    assert [p.stem for p in discover_notebooks(REPO / "notebooks")][:6] == sorted(
        p.stem for p in (REPO / "notebooks").glob("0[1-6]_*.ipynb"))


# --- atomic writes honour the umask ---------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002])
def test_atomic_writes_use_the_umask(tmp_path, umask):
    from sm120lab.atomic_io import write_json_atomic
    from sm120lab.runs.results import record

    old = os.umask(umask)
    try:
        p = write_json_atomic(tmp_path / f"a{umask}.json", {"x": 1})
        os.environ["SM120LAB_RESULTS_DIR"] = str(tmp_path / "results")
        record(f"01_u{umask}", {"x": 1})
        plain = tmp_path / f"plain{umask}"
        plain.write_text("x")
    finally:
        os.umask(old)
        os.environ.pop("SM120LAB_RESULTS_DIR", None)
    want = plain.stat().st_mode & 0o777
    assert want == 0o666 & ~umask
    assert p.stat().st_mode & 0o777 == want
    assert (tmp_path / "results" / f"01_u{umask}.json").stat().st_mode & 0o777 == want
    os.chmod(p, 0o600)
    write_json_atomic(p, {"x": 2})
    assert p.stat().st_mode & 0o777 == 0o600  # an existing file keeps its bits


# --- the environment filter is the package's one -------------------------------------------------

def test_relevant_env_is_one_filter_taking_a_mapping(seed):
    from sm120lab.envinfo import relevant_env

    rng = random.Random(seed)
    keep = {"FLASHINFER_CUDA_ARCH_LIST": "12.0f", "VLLM_USE_FLASHINFER_MOE_FP4": "1", "TORCH_CUDA_ARCH_LIST": "12.0",
            "TRITON_CACHE_DIR": "/c", "SM120LAB_SEED": "3", "CUDA_HOME": "/usr/local/cuda",
            "VLLM_TEST_FORCE_FP8_MARLIN": "1"}
    noise = {f"X{rng.randrange(10**6)}": "1" for _ in range(10)} | {"VLLM_LOGGING_LEVEL": "DEBUG", "PATH": "/bin"}
    assert relevant_env({**noise, **keep}) == dict(sorted(keep.items()))
    assert relevant_env() == relevant_env(dict(os.environ))


# --- report.html and archive keep every figure -----------------------------------------------------

def _png(width: int, height: int, seed: int) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    im = Image.new("RGB", (width, height), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def figure_run(tmp_path, seed):
    d = tmp_path / "20260101T000000Z-box-cpu"
    answer = [{"claim": "FlashInfer CUTLASS NVFP4 MoE", "value": "not run", "status": "not_run",
               "why": "flashinfer not installed"}]
    write_run(d, {"01_a": "ok", "02_b": "failed"},
              {"01_a": {"schema_version": SCHEMA_VERSION, "answer": answer, "verdicts": {"x": "correct"}}})
    small, big = _png(64, 48, seed), _png(2400, 300, seed + 1)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\nsome *prose*"),
                nbformat.v4.new_code_cell("plot()", outputs=[
                    nbformat.v4.new_output("display_data", data={
                        "image/png": base64.b64encode(small).decode(), "text/plain": "<Figure size 640x480 with 1 Axes>"}),
                    nbformat.v4.new_output("stream", text="\x1b[31mred\x1b[0m " + "y" * 9000),
                    nbformat.v4.new_output("display_data", data={
                        "image/png": base64.b64encode(big).decode(), "text/plain": "<Figure size 2400x300 with 1 Axes>"}),
                    nbformat.v4.new_output("display_data", data={"text/html": "<table><tr><td>cell</td></tr></table>"})])]
    nbformat.write(nb, d / "01_a.ipynb")
    (d / "01_a.html").write_text("<html>rendered</html>")
    summary = json.loads((d / "summary.json").read_text())
    summary["notebooks"][0].update(output="01_a.ipynb", html="01_a.html")
    summary["notebooks"][1].update(error="RuntimeError: planted")
    (d / "summary.json").write_text(json.dumps(summary))
    return d, small


def test_report_is_self_contained_with_verdicts_environment_and_figures(figure_run):
    from sm120lab.runs.report import build_report

    d, small = figure_run
    page = build_report(d)
    assert (page.index('id="verdicts-table"') < page.index("<h2>Summary") < page.index("<h2>Environment")
            < page.index("<h2>Verdict boxes") < page.index('id="01_a"'))
    assert "FlashInfer CUTLASS NVFP4 MoE" in page and "flashinfer not installed" in page
    assert "RuntimeError: planted" in page and "no verdict box" in page
    assert page.count("data:image/png;base64,") == 2 and base64.b64encode(small).decode() in page
    assert "\x1b[" not in page and "<td>cell</td>" in page and "y" * 9000 in page
    assert not re.search(r"(src|href)=\"(https?:)?//[^\"]*\.(js|css)", page) and "<script" not in page  # nothing loaded
    assert not re.search(r"src=\"(https?:)?//", page)
    assert main(["report", str(d)]) == 0 and (d / "report.html").read_text() == page


def test_archive_keeps_every_figure_the_html_and_whole_text(figure_run, tmp_path):
    from PIL import Image

    from sm120lab.runs.archive import MAX_FIGURE_PX, archive_run

    d, small = figure_run
    dest = archive_run(d, tmp_path / "archive")
    figs = sorted((dest / "figures").glob("*.png"))
    assert len(figs) == 2
    with Image.open(figs[0]) as a, Image.open(io.BytesIO(small)) as b:  # a palette PNG, same pixels
        assert a.size == b.size and a.convert("RGB").tobytes() == b.convert("RGB").tobytes()
    assert figs[0].stat().st_size <= len(small)
    with Image.open(figs[1]) as im:
        assert im.width == MAX_FIGURE_PX and im.height == round(300 * MAX_FIGURE_PX / 2400)
    text = (dest / "01_a.ipynb").read_text()
    assert "<Figure size" not in text and "image/png" not in text and "trimmed" not in text
    assert "y" * 9000 in text and "<td>cell</td>" in text
    page_01 = (dest / "01_a.html").read_text()  # rendered again from the archived notebook, figures as files
    assert "figures/20260101T000000Z-box-cpu" not in page_01 and 'src="figures/01_a-c001-0.png"' in page_01
    assert active_content(page_01) == [] and "<script" not in page_01
    page = (dest / "report.html").read_text()  # verdicts, summary, environment; links the notebook pages
    assert 'href="01_a.html"' in page and "data:image" not in page and "y" * 9000 not in page
    assert (dest / "notebook.css").is_file() and 'href="notebook.css"' in page_01 and "<style" not in page_01
    assert load_run(dest).results["01_a"]["verdicts"] == {"x": "correct"}
    # an existing archive is never replaced silently
    before = _tree(dest)
    with pytest.raises(FileExistsError, match="--overwrite"):
        archive_run(d, tmp_path / "archive")
    with pytest.raises(SystemExit, match="--overwrite"):
        main(["archive", str(d), "--dest", str(tmp_path / "archive")])
    assert _tree(dest) == before
    assert main(["archive", str(d), "--dest", str(tmp_path / "archive"), "--overwrite"]) == 0
    assert not list((tmp_path / "archive").glob("*.partial")) and not list((tmp_path / "archive").glob("*.replaced"))


def test_vanished_compile_cell_and_bench_figure_fail_unless_bench_is_informational(tmp_path):
    a = write_run(tmp_path / "A", {"02_y": "ok"}, {"02_y": {"compile_matrix": {"p|13.0|sm_120f": "accepted"},
                                                          "bench": BENCH}})
    gone = write_run(tmp_path / "B", {"02_y": "ok"}, {"02_y": {"bench": BENCH}})
    [cmp] = compare_many([a, gone])
    assert [(c.kind, c.assessment) for c in cmp.regressions] == [("compile", Assessment.REGRESSION)]
    assert compare_cli(str(a), str(gone))[0] == 1
    slower = write_run(tmp_path / "C", {"02_y": "ok"}, {"02_y": {"compile_matrix": {"p|13.0|sm_120f": "accepted"},
                                                               "bench": {"t": {**BENCH["t"], "value": 200.0}}}})
    assert compare_cli(str(a), str(slower))[0] == 1
    assert compare_cli(str(a), str(slower), "--bench-informational")[0] == 0
    nan = write_run(tmp_path / "D", {"02_y": "ok"}, {"02_y": {"compile_matrix": {"p|13.0|sm_120f": "accepted"},
                                                            "bench": {"t": {**BENCH["t"], "value": float("nan")}}}})
    assert compare_cli(str(a), str(nan), "--bench-informational")[0] == 1  # a lost number is never informational


def test_report_command_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match="^RUN: .*no summary.json"):
        main(["report", str(tmp_path)])
    bad = write_run(tmp_path / "B", {"01_a": "ok"}, {}, raw={"summary.json": b"[]"})
    with pytest.raises(SystemExit, match="summary.json: expected a JSON object"):
        main(["report", str(bad)])
