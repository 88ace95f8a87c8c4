"""Runs say what made them: the sm120lab version, commit and dirty flag; an archived report carries
the archive's final name; notebook 06's overview neither counts its own unfinished run as finished
nor shows missing values for a CPU run's driver and CUDA."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sm120lab.envinfo import collect, provenance, provenance_text
from sm120lab.runs.compare import run_overview

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_provenance_reads_the_checkout_commit_and_dirty_flag():
    prov = provenance()
    assert prov["commit"] == _git("rev-parse", "HEAD") and len(prov["commit"]) == 40
    assert prov["dirty"] is bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert prov["reason"] is None and prov["version"]
    assert collect()["sm120lab"]["commit"] == prov["commit"]


def test_provenance_outside_a_checkout_says_why(tmp_path):
    pkg = tmp_path / "site-packages" / "sm120lab"
    pkg.mkdir(parents=True)
    prov = provenance(pkg)
    assert prov["commit"] is None and prov["dirty"] is None and "not a git checkout" in prov["reason"]
    assert prov["version"]
    assert "no commit (" in provenance_text({"sm120lab": prov})


@pytest.mark.parametrize("env, expected", [
    ({"sm120lab": {"version": "0.1.0", "commit": "a" * 40, "dirty": True, "reason": None}},
     "0.1.0, commit aaaaaaaaaaaa (uncommitted changes)"),
    ({"sm120lab": {"version": "0.1.0", "commit": "b" * 40, "dirty": False, "reason": None}},
     "0.1.0, commit bbbbbbbbbbbb (clean)"),
    ({"packages": {"sm120lab": "0.1.0"}}, "0.1.0, commit not recorded (run made before sm120lab recorded it)"),
    ({"packages": ["not", "a", "mapping"]}, "version not recorded, commit not recorded"),
])
def test_provenance_text(env, expected):
    assert provenance_text(env).startswith(expected)


def _run_folder(d: Path, statuses: dict[str, str], gpu: dict) -> Path:
    (d / "results").mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "started_utc": "2026-01-01T00:00:00+00:00",
                                                "notebooks": [{"name": n, "status": s} for n, s in statuses.items()]}))
    (d / "environment.json").write_text(json.dumps({"gpu": gpu, "packages": {"torch": "2.13.0"}}))
    return d


def test_overview_counts_the_running_run_apart_and_has_no_missing_values(tmp_path):
    statuses = {f"0{i}_nb": "ok" for i in range(1, 6)} | {"06_compare_runs": "not run", "07_kernel": "not run"}
    running = _run_folder(tmp_path / "now", statuses, {"available": False})
    gpu = _run_folder(tmp_path / "gpu", {"01_nb": "ok", "02_nb": "failed"},
                      {"available": True, "name": "NVIDIA H200", "driver": "580.1", "torch_cuda_runtime": "13.0"})
    mine, other = run_overview([running, gpu], in_progress=running)
    assert mine["notebooks"] == "5 ok of 5 finished, 2 still running"
    assert mine["driver"] == mine["cuda"] == "none (no GPU)" and mine["flashinfer"] == "not installed"
    assert other["notebooks"] == "1 ok of 2" and other["driver"] == "580.1" and other["cuda"] == "13.0"
    assert all(v is not None for row in (mine, other) for v in row.values())
    [alone] = run_overview([running])  # not the running run: its not-run notebooks count
    assert alone["notebooks"] == "5 ok of 7"


def test_archived_report_is_titled_with_the_final_name(tmp_path):
    from sm120lab.runs.archive import archive_run

    run = _run_folder(tmp_path / "20260101T000000Z-box-cpu", {"01_nb": "ok"}, {"available": False})
    dest = archive_run(run, tmp_path / "archive")
    page = (dest / "report.html").read_text()
    assert "<title>sm120lab run 20260101T000000Z-box-cpu</title>" in page and ".partial" not in page
