"""sm120lab doctor: runs on this CPU box, and its verdicts follow the facts (random facts)."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from sm120lab import doctor
from sm120lab.cli import main as cli_main

VERDICTS = {"yes", "no", "slow", "risky", "emulated"}

versions = st.one_of(st.none(), st.sampled_from(["0.6.5", "0.6.6", "0.6.7", "0.7.4"]))
facts = st.fixed_dictionaries({
    "cc": st.one_of(st.none(), st.sampled_from([[8, 0], [8, 9], [9, 0], [10, 0], [10, 3], [11, 0], [12, 0], [12, 1]])),
    "gpu_reason": st.just("test"),
    "nvcc_max": st.one_of(st.none(), st.sampled_from(["12.4.131", "12.8.93", "12.9.86", "13.0.88"])),
    "versions": st.fixed_dictionaries({
        "torch": st.just("2.13.0"), "triton": st.one_of(st.none(), st.sampled_from(["3.2.0", "3.6.0", "3.9.0"])),
        "flashinfer-python": versions, "vllm": st.one_of(st.none(), st.just("0.17.0")),
        "nvidia-cutlass-dsl": st.one_of(st.none(), st.just("4.4.1"))}),
    "env": st.one_of(st.just({}), st.sampled_from([{"FLASHINFER_CUDA_ARCH_LIST": a} for a in ("12.0", "12.0a", "12.0f", "9.0 12.0")])),
    "b12x": st.booleans(),
    "flashinfer_patches": st.fixed_dictionaries({
        "needed_missing": st.lists(st.just("fi-sm120-moe-stage-count"), max_size=1),
        "needed_applied": st.just([]),
        "harmful_applied": st.lists(st.sampled_from(["fi-trtllm-launcher-major-ge-10", "fi-jit-trtllm-gen-moe-major-12"]), max_size=2, unique=True)}),
    "vllm_patches": st.just({}),
})


@settings(deadline=None)
@given(f=facts)
def test_verdicts_follow_the_facts(f):
    rows = doctor.verdicts(f)
    assert [r["backend"] for r in rows] == list(doctor.BACKENDS)
    v = {r["backend"]: r for r in rows}
    assert {r["verdict"] for r in rows} <= VERDICTS
    assert v["torch-bf16"]["verdict"] == "yes"
    if f["cc"] is None:
        assert all(r["verdict"] == "no" for r in rows[:-1])
        return
    major = f["cc"][0]
    fi, vl, tr = f["versions"]["flashinfer-python"], f["versions"]["vllm"], f["versions"]["triton"]
    if fi is None:
        assert {v[b]["verdict"] for b in ("FLASHINFER_CUTLASS", "FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL")} == {"no"}
    if vl is None:
        assert v["Marlin (W4A16)"]["verdict"] == "no" and v["vLLM CUTLASS grouped"]["verdict"] == "no"
    if major == 12:
        # patches cannot give SM120 the SM100-only kernels
        assert v["FLASHINFER_TRTLLM"]["verdict"] == v["FLASHINFER_CUTEDSL"]["verdict"] == "no"
        if f["flashinfer_patches"]["harmful_applied"] and fi is not None:
            assert "revert" in v["FLASHINFER_TRTLLM"]["why"]
        nat = v["Triton dot_scaled W4A4"]["verdict"]
        assert (nat == "yes") == (tr == "3.9.0")
        if fi and f["nvcc_max"] and f["nvcc_max"] >= "12.9":
            literal = f["env"].get("FLASHINFER_CUDA_ARCH_LIST") in ("12.0", "9.0 12.0")
            cut = v["FLASHINFER_CUTLASS"]
            if literal and fi in ("0.6.5", "0.6.6"):
                assert cut["verdict"] == "no" and "fi-cuda-arch-list-suffix" in cut["needs"]
            elif f["flashinfer_patches"]["needed_missing"]:
                assert cut["verdict"] == "slow" and "fi-sm120-moe-stage-count" in cut["needs"]
            else:
                assert cut["verdict"] == "yes"
        if fi and f["nvcc_max"] is None:
            assert v["FLASHINFER_CUTLASS"]["verdict"] == "no" and "nvcc" in v["FLASHINFER_CUTLASS"]["why"]
        assert (v["b12x"]["verdict"] == "yes") == (f["b12x"] and f["versions"]["nvidia-cutlass-dsl"] is not None)
    else:
        assert v["b12x"]["verdict"] == "no"
    if major < 10 or major == 11:
        assert v["FLASHINFER_TRTLLM"]["verdict"] == "no"


def test_doctor_runs_here_without_gpu_or_flashinfer(tmp_path, capsys):
    path = tmp_path / "doctor.json"
    assert cli_main(["doctor", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    report = json.loads(path.read_text())
    for b in doctor.BACKENDS:
        assert b in out
    assert [r["backend"] for r in report["verdicts"]] == list(doctor.BACKENDS)
    assert [r["backend"] for r in report["verdicts_if_sm120"]] == list(doctor.BACKENDS)
    f = report["facts"]
    assert set(f) >= {"cc", "driver", "cuda_runtime", "nvcc", "versions", "env", "smem_per_block_optin"}
    assert report["envinfo"]["packages"]["torch"] is not None
    if f["cc"] is None:
        assert "GPU        none" in out
        assert [r["verdict"] for r in report["verdicts"]][:-1] == ["no"] * (len(doctor.BACKENDS) - 1)
    for n in f["nvcc"]:
        assert n["path"] in out


def test_relevant_env_keeps_moe_switches_and_drops_the_rest():
    import random
    import string

    rng = random.Random()
    noise = {"X_" + "".join(rng.choices(string.ascii_uppercase, k=8)): "1" for _ in range(20)}
    keep = {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "throughput",
            "FLASHINFER_CUDA_ARCH_LIST": "12.0f", "TORCH_CUDA_ARCH_LIST": "12.0", "VLLM_TEST_FORCE_FP8_MARLIN": "0"}
    env = {**noise, **keep, "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert doctor.relevant_env(env) == dict(sorted(keep.items()))


def test_doctor_audits_an_importable_flashinfer_and_names_the_needed_patch(tmp_path, monkeypatch):
    """A real flashinfer 0.6.5 tree on sys.path (files from the PyPI wheel) plus a user spec with
    one `needed` patch: the doctor must report it, and judge FLASHINFER_CUTLASS 'slow' on SM120."""
    import importlib
    import random
    import shutil
    import sys

    import pytest

    pytest.importorskip("yaml")
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("a real flashinfer is installed here")
    from tests.test_patches import _needed_spec
    from sm120lab.patches.wheels import fetch_for_audit

    root = fetch_for_audit("flashinfer", "0.6.5")
    site = tmp_path / "site"
    shutil.copytree(root, site, ignore=shutil.ignore_patterns(".absent"))
    d, pid, _ = _needed_spec(tmp_path, root, random.Random())
    monkeypatch.setenv("SM120LAB_PATCH_SPECS", str(d))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        report = doctor.run(str(tmp_path / "d.json"))
    finally:
        sys.modules.pop("flashinfer", None)
    f = report["facts"]
    assert f["versions"]["flashinfer-python"] == "0.6.5"
    assert f["flashinfer_patches"]["available"] and pid in f["flashinfer_patches"]["needed_missing"]
    sm120 = {r["backend"]: r for r in report["verdicts_if_sm120"]}
    if f["nvcc_max"]:
        assert sm120["FLASHINFER_CUTLASS"]["verdict"] == "slow" and pid in sm120["FLASHINFER_CUTLASS"]["needs"]
    assert sm120["FLASHINFER_TRTLLM"]["verdict"] == "no"
