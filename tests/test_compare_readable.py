"""`sm120lab compare` reads at 80 columns and does not cry wolf: runs on different devices mark
one-sided checks and timings "not comparable (device differs)", not regressions; the output is a
compact table with short numbers, no token split inside a word, and one summary line."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from sm120lab.cli import main
from sm120lab.commands.compare import breakable, show_value
from sm120lab.runs.compare import Assessment, compare_many

REPO = Path(__file__).resolve().parents[1]
RECORDED = sorted(p for p in (REPO / "data" / "runs").iterdir() if (p / "summary.json").is_file())
CPU = {"host": "h", "gpu": {"available": False}}
H200 = {"host": "h", "gpu": {"available": True, "name": "NVIDIA H200", "compute_capability": "9.0"}}
FIG = {"value": 58.84145723806845, "unit": "us", "spread": 0.01, "lower_is_better": True}


def write_run(d: Path, env: dict, results: dict, statuses: dict | None = None) -> Path:
    (d / "results").mkdir(parents=True)
    statuses = statuses or {n: "ok" for n in results}
    (d / "summary.json").write_text(json.dumps({"notebooks": [{"name": n, "status": s} for n, s in statuses.items()]}))
    (d / "environment.json").write_text(json.dumps(env))
    for name, payload in results.items():
        (d / "results" / f"{name}.json").write_text(json.dumps(payload))
    return d


def cli(*args: str, columns: int = 80) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", str(columns))
        status = main(["compare", *args])
    return status, buf.getvalue()


def test_cpu_against_gpu_is_not_comparable_not_a_regression(tmp_path):
    gpu = write_run(tmp_path / "gpu", H200, {"03_x": {"verdicts": {"triton": "correct", "probe": "correct",
                                                                   "bad": "correct", "crash": "correct"},
                                                      "bench": {"moe_us:a:graph:T1": FIG}}})
    cpu = write_run(tmp_path / "cpu", CPU, {"03_x": {"verdicts": {"triton": "skipped", "bad": "garbage",
                                                                  "crash": "error"}}})
    [cmp] = compare_many([gpu, cpu])
    got = {c.key: c.assessment for c in cmp.changes if c.kind != "environment"}
    assert got == {"triton": Assessment.NOT_COMPARABLE, "probe": Assessment.NOT_COMPARABLE,
                   "moe_us:a:graph:T1": Assessment.NOT_COMPARABLE,
                   "bad": Assessment.REGRESSION, "crash": Assessment.REGRESSION}  # worse and crashed still count
    assert cmp.device_differs and len(cmp.not_comparable) == 3
    assert "3 not comparable (device differs: NVIDIA H200 (sm 9.0) -> none)" in cmp.summary_line()
    # same device: the skipped and missing checks are regressions again
    cpu2 = write_run(tmp_path / "gpu2", H200, {"03_x": {"verdicts": {"triton": "skipped"}}})
    [same] = compare_many([gpu, cpu2])
    assert {c.key for c in same.correctness_regressions} == {"triton", "probe", "bad", "crash"}
    assert not same.not_comparable and "not comparable" not in same.summary_line()


def test_a_lost_number_is_a_regression_on_any_device(tmp_path):
    gpu = write_run(tmp_path / "gpu", H200, {"04_x": {"bench": {"t": FIG}}})
    other = write_run(tmp_path / "b", {**H200, "gpu": {**H200["gpu"], "name": "RTX PRO 6000"}},
                      {"04_x": {"bench": {"t": {**FIG, "value": float("nan")}}}})
    [cmp] = compare_many([gpu, other])
    assert [c.assessment for c in cmp.changes if c.kind == "bench"] == [Assessment.REGRESSION]


@pytest.mark.parametrize("order", [1, -1], ids=["cpu-baseline", "h200-baseline"])
def test_recorded_cpu_and_h200_runs_print_compactly_at_80_columns(order):
    status, out = cli(*map(str, RECORDED[::order]))
    lines = out.rstrip("\n").splitlines()
    assert status == 0, out  # nothing the CPU run could not run is a regression
    assert len(lines) < 60 and max(map(len, lines)) <= 80
    flat = " ".join(line.strip() for line in lines)
    assert "not comparable (device differs" in flat and "0 regression(s) (0 of correctness" in flat
    assert flat.count("regression(s) (") == 1  # one summary (wrapped at word boundaries), at the end
    assert "regression(s) (" in " ".join(lines[-4:]) and flat.endswith("environment fact(s) differ")
    assert not re.search(r"\d\.\d{6,}", out), "floats must be short"
    # every bench key and every gpu-probe key the table shows survives whole once the breaks are undone
    joined = re.sub(r"\n\s+", "", out)
    assert "gpu-probe:griddepcontrol@sm_90a" in joined.replace(" ", "") or "5 verdicts" in out


def test_regressions_are_listed_one_per_row_with_short_numbers(tmp_path):
    a = write_run(tmp_path / "a", H200, {"04_x": {"bench": {"moe_us:triton-w4a16:graph:T1": FIG},
                                                  "verdicts": {f"check-{i}": "correct" for i in range(8)}}})
    b = write_run(tmp_path / "b", H200, {"04_x": {"bench": {"moe_us:triton-w4a16:graph:T1": {**FIG, "value": 80.123456}},
                                                  "verdicts": {f"check-{i}": "garbage" for i in range(8)}}})
    status, out = cli(str(a), str(b))
    assert status == 1
    assert out.count("regression\n") + out.count("regression ") >= 9 and "58.84 us" in out and "80.12 us" in out
    flat = " ".join(line.strip() for line in out.splitlines())
    assert "+36.2%" in out and flat.count("regression(s)") == 1 and "9 regression(s) (8 of correctness" in flat


@pytest.mark.parametrize("text, width", [("moe_us:torch-bf16-grouped:graph:T16", 20),
                                         ("gpu-probe:griddepcontrol@sm_90a", 16),
                                         ("/usr/local/cuda-13.0/bin/nvcc", 10), ("short", 30)])
def test_breakable_breaks_only_after_separators(text, width):
    lines = breakable(text, width).split("\n")
    assert all(len(line) <= width for line in lines)
    assert "".join(line.strip() for line in lines) == text
    for line in lines[:-1]:
        assert line.rstrip()[-1] in ":@/,= ", line


def test_show_value_is_short():
    assert show_value(58.84145723806845, "us") == "58.84 us" and show_value(None) == "missing"
    assert show_value(1234567.0) == "1.235e+06" and show_value("correct") == "correct"


def test_breakable_cuts_only_a_run_longer_than_the_width():
    assert breakable("abcdefghijkl:x", 8).split("\n") == ["abcdefgh", "ijkl:x"]
