"""sm120lab.archflags.lesson: the tables, figure and records notebook 02 shows, on the recorded data
(``data/archflags/matrix.json``, ``data/cutlass_smem/*.json``) and on small hand-made inputs."""

from __future__ import annotations

import json
import shutil

import matplotlib
import pytest

from sm120lab.archflags import lesson
from sm120lab.constants import SM120_SMEM_LIMIT
from sm120lab.cutlass_smem import analysis, store
from sm120lab.paths import data_dir

matplotlib.use("Agg")


def test_smem_overflow_reads_the_recording():
    over, kinds, over_after = lesson.smem_overflow()
    assert set(over) == set(kinds) == {r["flashinfer_version"] for r in store.recorded() if not r["patched"]}
    # the seed's two FINALIZE tiles: 4 of 40 kernel types in 0.6.5, 2 of 44 in 0.7.4; none after the patch
    assert (len(over["0.6.5"]), kinds["0.6.5"]) == (4, 40)
    assert (len(over["0.7.4"]), kinds["0.7.4"]) == (2, 44)
    assert over_after == {"0.6.5": 0, "0.7.4": 0}
    for rows in over.values():
        assert rows and all(d["kernel_smem"] > SM120_SMEM_LIMIT and not d["fits"] for d in rows)
        assert {d["tile"] for d in rows} <= {"128x256x128", "256x128x128"}
        assert {d["epilogue"] for d in rows} == {"FINALIZE"}


def test_smem_overflow_empty_folder_and_compile_reuses_the_recording(tmp_path):
    assert lesson.smem_overflow(data_dir=tmp_path) == ({}, {}, {})
    # compile_cutlass=True reuses a recorded result (no compile): copy one version in and ask for it
    shutil.copy(store.result_path("0.6.5"), tmp_path / "0.6.5.json")
    over, kinds, over_after = lesson.smem_overflow(True, versions=("0.6.5",), data_dir=tmp_path)
    assert kinds == {"0.6.5": 40} and len(over["0.6.5"]) == 4 and over_after == {}


def test_plot_smem_stages_draws_every_unpatched_config(tmp_path):
    fig = lesson.plot_smem_stages()
    ax = fig.axes[0]
    n_bars = sum(1 for r in store.recorded() if not r["patched"]
                 for d in analysis.configs(r) if d["act_type"] == "nvfp4")
    assert len(ax.get_xticks()) == n_bars > 0
    assert ax.get_xlabel().startswith("kernel config")
    assert any(list(line.get_ydata()) == [SM120_SMEM_LIMIT] * 2 for line in ax.get_lines())
    assert lesson.plot_smem_stages(tmp_path) is None
    shutil.copy(store.result_path("0.6.5", patched=True), tmp_path / "0.6.5-patched.json")
    assert lesson.plot_smem_stages(tmp_path) is None  # patched results only: nothing to draw
    shutil.copy(store.result_path("0.6.5"), tmp_path / "0.6.5.json")
    assert len(lesson.plot_smem_stages(tmp_path).axes[0].get_xticks()) == len(
        [d for d in analysis.configs(store.load("0.6.5")) if d["act_type"] == "nvfp4"])
    assert not list(tmp_path.glob("*.png"))  # drawn into the notebook's figure, nothing saved


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
    over, _, _ = lesson.smem_overflow()
    rec = lesson.results_record(verdict_table(matrix), matrix, cells, over, gpu)
    assert rec["recorded_matrix"]["cells"] == len(matrix["cells"])
    assert sum(rec["recorded_matrix"]["codes"].values()) == len(matrix["cells"])
    assert rec.get("gpu_probes") == gpu
    assert ("gpu_probes" in rec) == (gpu is not None)
