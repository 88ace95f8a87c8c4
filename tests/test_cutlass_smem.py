"""sm120lab.cutlass_smem: recorded SM120 stage-count data, its arithmetic, the patch spec, the plot.

The compile of all FlashInfer SM120 instantiations takes ~15-30 min on 2 cores, so these tests
check the recorded results (data/cutlass_smem/*.json) against arithmetic redone in Python and
against the real wheel text; tests/test_cutlass_smem_compile.py does one small real compile.
"""

from __future__ import annotations

import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from sm120lab.cutlass_smem import analysis, plot, store
from sm120lab.cutlass_smem.build import PROBE_AFTER, instrument
from sm120lab.cutlass_smem.stage_patch import apply_to_text, load_spec, version_matches

LIMIT = 101_376

RESULTS = store.recorded()
UNPATCHED = [r for r in RESULTS if not r["patched"]]
PATCHED = [r for r in RESULTS if r["patched"]]


def _ids(results):
    return [f"{r['flashinfer_version']}{'-patched' if r['patched'] else ''}" for r in results]


def test_recorded_results_exist_for_065_before_and_after():
    versions = {(r["flashinfer_version"], r["patched"]) for r in RESULTS}
    assert ("0.6.5", False) in versions and ("0.6.5", True) in versions
    for r in RESULTS:
        assert r["records"], "a result without kernel records"
        assert "envinfo" in r and r["command"].startswith("sm120lab cutlass-smem")


def test_limit_is_cutlass_sm120_capacity():
    for r in RESULTS:
        assert {rec["capacity"] for rec in r["records"]} == {LIMIT}


def test_some_unpatched_065_config_overflows_and_patched_all_fit():
    before = store.load("0.6.5")
    after = store.load("0.6.5", patched=True)
    assert any(rec["kernel_smem"] > LIMIT for rec in before["records"])
    assert all(rec["kernel_smem"] <= LIMIT for rec in after["records"])
    for r in PATCHED:
        assert all(rec["kernel_smem"] <= LIMIT for rec in r["records"]), r["flashinfer_version"]


def test_overflow_is_within_alignment_padding():
    """Every overflowing kernel's parts fit; the 1024-B alignment padding pushes it over."""
    over = [analysis.derive(rec) for r in UNPATCHED for rec in r["records"] if rec["kernel_smem"] > LIMIT]
    assert over
    for d in over:
        assert d["parts_bytes"] <= LIMIT < d["kernel_smem"]
        assert 0 < d["padding"] < 2 * 1024
        assert d["kernel_smem"] % 1024 == 0 and d["kernel_align"] == 1024


@pytest.mark.parametrize("result", UNPATCHED, ids=_ids(UNPATCHED))
def test_cutlass_stage_formula_reproduces_recorded_stages(result):
    for rec in result["records"]:
        assert analysis.cutlass_stage_count(rec, result["cutlass_version"]) == rec["stages"], rec["kernel_type"][:120]


@pytest.mark.parametrize("result", RESULTS, ids=_ids(RESULTS))
def test_layout_model_reproduces_sizeof(result):
    for rec in result["records"]:
        assert analysis.model_kernel_smem(rec) == rec["kernel_smem"] == rec["kernel_smem_const"]


def _expected_stage_bytes(rec, cutlass_version):
    """Bytes per stage from the tile and the formats: NVFP4 = 4-bit E2M1 + one UE4M3 byte per
    16 elements along K; MXFP8 activations (FP8xFP4 kernels) = 8-bit + one UE8M0 per 32;
    CUTLASS 4.5 pads the SFB tile to N >= 128 (sm120_blockscaled_mma_builder.inl)."""
    m, n, k = rec["tile_m"], rec["tile_n"], rec["tile_k"]
    vec = 32 if rec["mxfpx"] else 16
    n_sf = max(n, 128) if Version(cutlass_version).release[:2] >= (4, 5) else n
    a = m * k * rec["bits_a"] // 8
    b = n * k * rec["bits_b"] // 8
    return a + b + m * k // vec + n_sf * k // vec


@pytest.mark.parametrize("result", RESULTS, ids=_ids(RESULTS))
def test_bytes_per_stage_from_tile_and_nvfp4_sizes(result):
    for rec in result["records"]:
        # sm120_blockscaled_mma_builder.inl l.144-145: SmemAllocType = uint8_t for the MXF8F6F4
        # MMA (FP8 x FP4 kernels, IsMXFPX), else the 4-bit E2M1 type for NVFP4 x NVFP4.
        assert analysis.dtype_label(rec["act"]) == ("fp8" if rec["mxfpx"] else "nvfp4")
        assert rec["bits_a"] == rec["bits_b"] == (8 if rec["mxfpx"] else 4)
        assert rec["bits_sf"] == 8
        assert analysis.per_stage_bytes(rec) == _expected_stage_bytes(rec, result["cutlass_version"])
        assert rec["mainloop_tensors"] >= rec["stages"] * analysis.per_stage_bytes(rec)


def test_patch_lowers_only_the_overflowing_configs_by_one_stage():
    for after in PATCHED:
        before = store.load(after["flashinfer_version"])
        for row in analysis.before_after(before, after):
            if row["fits_before"]:
                assert (row["stages_after"], row["smem_after"]) == (row["stages_before"], row["smem_before"])
            else:
                assert row["stages_after"] == row["stages_before"] - 1 and row["fits_after"]


@pytest.mark.network
def test_spec_anchor_matches_exactly_once_in_real_065_wheel():
    pytest.importorskip("packaging")
    from sm120lab.toolchains.pypi_wheels import fetch_wheel

    spec = load_spec()
    assert spec["package"] == "flashinfer-python" and spec["import_name"] == "flashinfer"
    assert version_matches(spec, "0.6.5")
    root = fetch_wheel("flashinfer-python", "0.6.5", quiet=True)
    for patch in spec["patches"]:
        text = (root / patch["file"]).read_text()
        assert text.count(patch["anchor"]) == 1
        patched = apply_to_text(text, patch)
        assert patched.count(patch["replacement"]) == 1
        cont = "\\\n"  # backslash-newline: every line stays inside the launcher macro
        assert patched.count(cont) == text.count(cont) - patch["anchor"].count(cont) + patch["replacement"].count(cont)
        # macro continuation: every new line of the replacement ends inside the macro
        assert all(line.rstrip().endswith("\\") for line in patch["replacement"].split("\n")[:-1])


def test_spec_accepted_by_patch_engine_parser():
    engine = pytest.importorskip("sm120lab.patches.spec")
    text = load_spec.__globals__["SPEC_PATH"].read_text()
    parsed = engine.parse_spec_file(text, "flashinfer_sm120_stage_count.yaml")
    (patch,) = parsed["patches"]
    assert patch.id == "fi-sm120-moe-stage-count" and patch.classification == "needed" and patch.default_apply


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii", exclude_characters="\r"), max_size=200),
       st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=10**6 - 1))
def test_apply_and_instrument_require_exactly_one_anchor(noise, copies, tag):
    patch = {"id": "x", "anchor": f"ANCHOR_{tag}", "replacement": "NEW"}
    noise = noise.replace(patch["anchor"], "")
    text = noise + (patch["anchor"] + noise) * copies
    if copies == 1:
        assert apply_to_text(text, patch) == noise + "NEW" + noise
    else:
        with pytest.raises(ValueError, match=f"occurs {copies} times"):
            apply_to_text(text, patch)
    launcher = noise.replace(PROBE_AFTER, "") + "\n" + (f"  {PROBE_AFTER}  \\\n") * copies + "tail"
    if copies == 1:
        out = instrument(launcher)
        assert out.count("SM120LAB_SMEM_PROBE(") == 1 and out.endswith("tail")
    else:
        with pytest.raises(ValueError):
            instrument(launcher)


def test_plot_stage_bytes_draws_one_bar_stack_per_config():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sm120lab.cutlass_smem import plot_stage_bytes

    fig, ax = plt.subplots()
    out = plot_stage_bytes(ax=ax)
    assert out is ax
    n_configs = sum(len([d for d in analysis.configs(r) if d["act_type"] == "nvfp4"]) for r in UNPATCHED)
    assert len(ax.get_xticks()) == n_configs
    assert any(abs(line.get_ydata()[0] - LIMIT) < 1e-6 for line in ax.get_lines())
    plt.close(fig)


def test_cli_prints_recorded_table(capsys):
    from sm120lab.cli import main

    assert main(["cutlass-smem", "--flashinfer", "0.6.5"]) == 0
    out = capsys.readouterr().out
    assert "CUTLASS 4.2.1" in out and re.search(r"OVER by \d+", out)


def test_bad_arguments_are_named():
    from sm120lab.toolchains.pypi_wheels import fetch_wheel

    with pytest.raises(ValueError, match="version"):
        fetch_wheel("flashinfer-python", "not a version")
    with pytest.raises(ValueError, match="dist"):
        fetch_wheel("", "0.6.5")
    with pytest.raises(FileNotFoundError, match="cutlass-smem"):
        store.load("0.0.1")


def test_recorded_overflow_reads_the_recording():
    over, kinds, over_after = store.recorded_overflow()
    assert set(over) == set(kinds) == {r["flashinfer_version"] for r in store.recorded() if not r["patched"]}
    # the seed's two FINALIZE tiles: 4 of 40 kernel types in 0.6.5, 2 of 44 in 0.7.4; none after the patch
    assert (len(over["0.6.5"]), kinds["0.6.5"]) == (4, 40)
    assert (len(over["0.7.4"]), kinds["0.7.4"]) == (2, 44)
    assert over_after == {"0.6.5": 0, "0.7.4": 0}
    for rows in over.values():
        assert rows and all(d["kernel_smem"] > LIMIT and not d["fits"] for d in rows)
        assert {d["tile"] for d in rows} <= {"128x256x128", "256x128x128"}
        assert {d["epilogue"] for d in rows} == {"FINALIZE"}


def test_recorded_overflow_empty_folder_and_compile_reuses_the_recording(tmp_path):
    assert store.recorded_overflow(data_dir=tmp_path) == ({}, {}, {})
    # compile_cutlass=True reuses a recorded result (no compile): copy one version in and ask for it
    shutil.copy(store.result_path("0.6.5"), tmp_path / "0.6.5.json")
    over, kinds, over_after = store.recorded_overflow(True, versions=("0.6.5",), data_dir=tmp_path)
    assert kinds == {"0.6.5": 40} and len(over["0.6.5"]) == 4 and over_after == {}


def test_stage_bytes_figure_draws_every_unpatched_config(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    fig = plot.stage_bytes_figure()
    ax = fig.axes[0]
    n_bars = sum(1 for r in store.recorded() if not r["patched"]
                 for d in analysis.configs(r) if d["act_type"] == "nvfp4")
    assert len(ax.get_xticks()) == n_bars > 0
    assert ax.get_xlabel().startswith("kernel config")
    assert any(list(line.get_ydata()) == [LIMIT] * 2 for line in ax.get_lines())
    assert plot.stage_bytes_figure(tmp_path) is None
    shutil.copy(store.result_path("0.6.5", patched=True), tmp_path / "0.6.5-patched.json")
    assert plot.stage_bytes_figure(tmp_path) is None  # patched results only: nothing to draw
    shutil.copy(store.result_path("0.6.5"), tmp_path / "0.6.5.json")
    assert len(plot.stage_bytes_figure(tmp_path).axes[0].get_xticks()) == len(
        [d for d in analysis.configs(store.load("0.6.5")) if d["act_type"] == "nvfp4"])
    assert not list(tmp_path.glob("*.png"))  # drawn into the notebook's figure, nothing saved
