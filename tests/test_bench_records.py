"""Typed records of the benchmark's files and of the guide item: every recorded JSON under data/bench/
loads through its record, unchanged; the one row filter picks exactly what the raw JSON holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120lab.bench.records import (
    BENCH_SCHEMA_VERSION,
    BenchCheckDoc,
    BenchDoc,
    GpuTestsDoc,
    Op,
    Timing,
    load_bench,
    load_record,
)
from sm120lab.paths import data_dir

BENCH_JSON = sorted((data_dir() / "bench").rglob("*.json"))


def test_there_are_recorded_files_of_every_kind():
    kinds = {type(load_record(p)) for p in BENCH_JSON}
    assert kinds == {BenchDoc, BenchCheckDoc, GpuTestsDoc}
    assert len([p for p in BENCH_JSON if p.name.startswith("moe_") and not p.name.endswith("_check.json")]) >= 16


@pytest.mark.parametrize("path", BENCH_JSON, ids=lambda p: str(p.relative_to(data_dir())))
def test_every_recorded_bench_json_loads_through_its_record(path):
    raw = json.loads(path.read_text())
    rec = load_record(path)
    assert rec.schema_version == raw.get("schema_version", 1)
    if not isinstance(rec, BenchDoc):
        assert rec.model_dump(mode="json", exclude_unset=True) == raw
        return
    # every row comes back exactly as recorded (old formats included: n_reps, no calls_per_pass, ...)
    assert [r.as_dict() for r in rec.rows] == raw["rows"]
    assert rec.model == raw["model"] and rec.shape == raw["shape"]
    # the one filter selects what each of the old hand-written filters selected
    for op in {r["op"] for r in raw["rows"]}:
        for timing in (None, "cuda_graph", "eager"):
            want = [r for r in raw["rows"] if r.get("op", "moe") == op and (timing is None or r["timing"] == timing)]
            assert [r.as_dict() for r in rec.rows_for(op, timing)] == want
    for r in raw["rows"][:5]:
        hit = rec.find(r["T"], r["contender"], r["op"], r["timing"])
        assert hit is not None and hit.us_median == r["us_median"]


def test_the_old_format_is_version_1_and_the_bench_writes_the_current_one():
    old = load_bench(data_dir() / "bench" / "moe_h200_2026-12-02.json")
    assert old.schema_version == 1 and all(r.n_reps for r in old.rows) and old.rows[0].calls_per_pass is None
    from sm120lab.bench import moe

    assert "BENCH_SCHEMA_VERSION" in Path(moe.__file__).read_text()  # run_moe_bench stamps new documents
    doc = {"schema_version": BENCH_SCHEMA_VERSION, "model": "m", "shape": {"E": 2}, "rows": []}
    assert BenchDoc.model_validate(doc).schema_version == BENCH_SCHEMA_VERSION


def test_a_row_without_op_is_a_moe_row_and_unknown_keys_are_kept():
    doc = BenchDoc.model_validate({"model": "m", "shape": {"E": 2}, "rows": [
        {"T": 1, "contender": "c", "us_median": 2.0, "timing": "cuda_graph", "new_field": [1, 2]}]})
    assert doc.rows[0].op is Op.MOE and doc.rows[0].timing is Timing.CUDA_GRAPH
    assert doc.rows_for()[0].as_dict()["new_field"] == [1, 2]
    assert doc.rows_for(op="w13") == [] and doc.rows_for(timing="eager") == []


@pytest.mark.parametrize("change, where", [
    (lambda d: d.pop("shape"), "shape"),
    (lambda d: d["rows"][0].pop("us_median"), "rows.0.us_median"),
    (lambda d: d["rows"][0].update(op="gemm"), "rows.0.op"),
    (lambda d: d["rows"][0].update(T="many"), "rows.0.T"),
    (lambda d: d.update(schema_version=BENCH_SCHEMA_VERSION + 1), "schema_version"),
])
def test_a_bad_bench_file_is_a_one_line_error_naming_the_key(tmp_path, change, where):
    d = json.loads((data_dir() / "bench" / "moe_h200_2026-12-03_qwen3.5-397b-a17b.json").read_text())
    change(d)
    p = tmp_path / "moe_x.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        load_bench(p)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{p}: {where}:")
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_bench(p)


def test_guide_items_round_trip_through_their_record():
    from sm120lab import recommend
    from sm120lab.recommend.core import ITEM_SCHEMA_VERSION, Item

    items = recommend.guide("rtx-pro-6000")
    for it in items:
        d = it.to_dict()
        assert d["schema_version"] == ITEM_SCHEMA_VERSION and Item.model_validate(d) == it
        written_before = {k: v for k, v in d.items() if k != "schema_version"}  # items written before the field
        assert Item.model_validate(written_before) == it
    with pytest.raises(ValueError, match="evidence"):
        Item.model_validate({**items[0].to_dict(), "evidence": "rumour"})
