"""Typed records of the run folder (pydantic v2): every recorded file in data/runs/ loads through its
record, version 1 files (no schema_version) included; validation is strict and names the key; the
summary a run writes goes through its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120lab.runs.files import SchemaError
from sm120lab.runs.records import (
    SCHEMA_VERSION,
    EnvironmentRecord,
    NotebookResultsRecord,
    RunSummaryRecord,
    parse,
)
from sm120lab.runs.results import load_environment, load_results, load_summary

RECORDED = sorted(p for p in (Path(__file__).resolve().parents[1] / "data" / "runs").iterdir()
                  if (p / "summary.json").is_file())


@pytest.mark.parametrize("run", RECORDED, ids=[p.name[:24] for p in RECORDED])
def test_every_recorded_run_file_loads_through_its_typed_record(run):
    summary = load_summary(run / "summary.json", run)
    assert summary.schema_version in (1, 2) and len(summary.notebooks) == 7
    assert {n.status for n in summary.notebooks} <= {"ok", "failed", "not run"}
    env = load_environment(run / "environment.json", run)
    assert env.packages and "torch" in env.packages and env.gpu is not None
    for f in sorted((run / "results").glob("*.json")):
        res = load_results(f, run)
        raw = json.loads(f.read_text())
        # nothing is lost: unknown keys are kept and the record dumps back to the file's content
        assert res.model_dump(mode="json", exclude_unset=True) == raw
        if res.bench:
            assert all(isinstance(fig.value, float) and fig.unit for fig in res.bench.values())
        assert res.answer, f"{f.name} has no verdict box"


@pytest.mark.parametrize("model, obj, needle", [
    (RunSummaryRecord, {"notebooks": [], "schema_version": "2"}, "schema_version"),
    (RunSummaryRecord, {"notebooks": [], "schema_version": True}, "schema_version"),
    (RunSummaryRecord, {"notebooks": [], "schema_version": SCHEMA_VERSION + 1}, "newer than this sm120lab"),
    (RunSummaryRecord, {"notebooks": [{"name": "../x", "status": "ok"}]}, "notebooks[0].name"),
    (RunSummaryRecord, {"notebooks": [{"name": "01_a", "status": "fine"}]}, "notebooks[0].status"),
    (RunSummaryRecord, {"notebooks": [{"name": "a", "status": "ok"}, {"name": "a", "status": "ok"}]}, "twice"),
    (NotebookResultsRecord, {"bench": {"t": {"value": "1"}}}, "bench.t.value"),
    (NotebookResultsRecord, {"bench": {"t": {"value": 1.0, "spread": -1}}}, "bench.t.spread"),
    (NotebookResultsRecord, {"verdicts": {"x": 1}}, "verdicts.x"),
    (EnvironmentRecord, {"gpu": {"available": "yes"}}, "gpu.available"),
    (EnvironmentRecord, {"gpu": {"device_count": True}}, "gpu.device_count"),
    (EnvironmentRecord, [], "expected a JSON object"),
])
def test_records_are_strict_and_name_the_key(model, obj, needle):
    with pytest.raises(SchemaError) as err:
        parse(model, obj, "f.json")
    text = str(err.value)
    assert text.startswith("f.json: ") and needle in text and "\n" not in text


def test_a_nan_bench_value_loads_so_compare_can_call_it_lost():
    rec = parse(NotebookResultsRecord, {"bench": {"t": {"value": float("nan"), "unit": "us"}}}, "f")
    assert rec.bench["t"].value != rec.bench["t"].value and rec.schema_version == 1


def test_the_written_summary_goes_through_its_record(tmp_path):
    from sm120lab.runs.execute import NotebookResult, RunSummary
    from sm120lab.runs.results import NotebookStatus

    s = RunSummary(run_dir=tmp_path, started_utc="t", notebooks=[NotebookResult("01_a", NotebookStatus.OK, 1.5)])
    out = s.to_json()
    assert out["schema_version"] == SCHEMA_VERSION and out["notebooks"][0]["status"] == "ok"
    assert parse(RunSummaryRecord, out, "summary.json").notebooks[0].wall_s == 1.5
    s.notebooks.append(NotebookResult("01_a"))
    with pytest.raises(Exception, match="twice"):
        s.to_json()


@pytest.mark.parametrize("key", ["\x1e", "a\nb", "\u2028"])
def test_an_unprintable_key_stays_on_one_line(key):
    """A hostile key in a record (seen: ``env: {"\\x1e": false}``, which str.splitlines breaks) is named by
    its repr, so the error is still one line; same for the bench records."""
    from pydantic import ValidationError

    from sm120lab.bench.records import BenchDoc, _one_line

    with pytest.raises(SchemaError) as err:
        parse(EnvironmentRecord, {"env": {key: False}}, "environment.json")
    assert len(str(err.value).splitlines()) == 1 and repr(key) in str(err.value)
    with pytest.raises(ValidationError) as bad:
        BenchDoc.model_validate({"model": "m", "shape": {"E": 2}, "rows": [], "floor_us": {key: {"moe": "x"}}})
    msg = _one_line("b.json", bad.value)
    assert len(msg.splitlines()) == 1 and repr(key) in msg
