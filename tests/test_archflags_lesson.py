"""sm120lab.archflags.lesson: the texts and records notebook 02 shows, on the recorded data
(``data/archflags/matrix.json``, ``data/cutlass_smem/*.json``) and on small hand-made inputs."""

from __future__ import annotations

import json

import pytest

from sm120lab.archflags import lesson
from sm120lab.cutlass_smem import recorded_overflow
from sm120lab.paths import data_dir


def test_stub_in_probe_text():
    assert lesson.stub_in_probe_text() == "stub message in the probe source: True"


ROWS = [{"toolkit": "13.0", "probe": "mma_nvfp4", "target": "sm_120a", "status": "accepted", "sass": "OMMA",
         "seconds": 1.234, "matches recording": "yes"},
        {"toolkit": "13.0", "probe": "mma_nvfp4", "target": "sm_120", "status": "rejected-ptxas", "sass": "",
         "seconds": 0.5, "matches recording": "NO"}]


def test_live_text_and_statuses():
    text = lesson.live_text({"wall_seconds": 3.04}, ROWS, "")
    lines = text.splitlines()
    assert lines[-1] == "2 cells in 3.0 s"
    assert "1.23" in lines[1] and "rejected-ptxas" in lines[2] and len(lines) == 4
    assert lesson.live_text(None, [], "no CUDA toolkit") == "live compile not run: no CUDA toolkit"
    assert lesson.live_statuses(ROWS) == {"mma_nvfp4|13.0|sm_120a": "accepted",
                                          "mma_nvfp4|13.0|sm_120": "rejected-ptxas"}


def test_live_compare_disabled_compiles_nothing():
    matrix = json.loads((data_dir() / "archflags" / "matrix.json").read_text())
    assert lesson.live_compare(matrix, enabled=False) == (None, [], "live_compile=False")


GPU = {"device": "NVIDIA H200", "results": [{"probe": "mma_fp8", "target": "sm_90", "ok": True},
                                            {"probe": "wgmma", "target": "sm_90a", "ok": False}]}


def test_gpu_verdicts():
    assert lesson.gpu_verdicts(GPU) == {"gpu-probe:mma_fp8@sm_90": "correct", "gpu-probe:wgmma@sm_90a": "garbage"}
    assert lesson.gpu_verdicts(None) == {}


def test_gpu_probes_text_reads_the_recorded_run():
    text = lesson.gpu_probes_text(None, "no CUDA GPU on this machine")
    assert text.startswith("data/archflags/h200_probes.json: ")
    assert text.splitlines()[-1] == "this run: not run (no CUDA GPU on this machine)"
    assert lesson.gpu_probes_text(GPU, "").splitlines()[-1] == "this run: mma_fp8@sm_90 ok, wgmma@sm_90a FAILED"


@pytest.mark.parametrize("gpu", [None, GPU])
def test_results_record_carries_the_gpu_run(gpu):
    from sm120lab.archflags.summary import cells_frame
    from sm120lab.archflags.verdicts import verdict_table

    matrix = json.loads((data_dir() / "archflags" / "matrix.json").read_text())
    cells = cells_frame(matrix)
    over, _, _ = recorded_overflow()
    rec = lesson.results_record(verdict_table(matrix), matrix, cells, over, gpu)
    assert rec["recorded_matrix"]["cells"] == len(matrix["cells"])
    assert sum(rec["recorded_matrix"]["codes"].values()) == len(matrix["cells"])
    assert rec.get("gpu_probes") == gpu
    assert ("gpu_probes" in rec) == (gpu is not None)
