"""sm120lab doctor: runs on this CPU box, and its verdicts follow the facts (random facts)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sm120lab import doctor
from sm120lab.cli import main as cli_main

VERDICTS = {"yes", "no", "slow", "risky", "emulated"}

versions = st.one_of(st.none(), st.sampled_from(["0.6.5", "0.6.6", "0.6.7", "0.7.4"]))
facts = st.fixed_dictionaries({
    "cc": st.one_of(st.none(), st.sampled_from([[8, 0], [8, 9], [9, 0], [10, 0], [10, 3], [11, 0], [12, 0], [12, 1]])),
    "gpu_reason": st.just("test"),
    "nvcc_max": st.one_of(st.none(), st.sampled_from(["12.4.131", "12.8.93", "12.9.86", "13.0.88"])),
    "cuda_runtime": st.one_of(st.none(), st.sampled_from(["12.8", "12.9", "13.0"])),
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
    assert [r["backend"] for r in rows] == doctor.backend_order()
    v = {r["backend"]: r for r in rows}
    assert {r["verdict"] for r in rows} <= VERDICTS
    for b in doctor.CPU_OK:
        assert v[b]["verdict"] == "yes"
    if f["cc"] is None:
        assert all(r["verdict"] == "no" for r in rows if r["backend"] not in doctor.CPU_OK)
        return
    major = f["cc"][0]
    fi, vl, tr = f["versions"]["flashinfer-python"], f["versions"]["vllm"], f["versions"]["triton"]
    if fi is None:
        assert {v[b]["verdict"] for b in ("flashinfer-cutlass", "flashinfer-trtllm", "flashinfer-cutedsl",
                                          "flashinfer-sm12x-w4a4", "flashinfer-sm12x-w4a16")} == {"no"}
    if vl is None:
        assert v["vllm-marlin"]["verdict"] == "no" and v["vllm-cutlass-fp4"]["verdict"] == "no"
    if tr is None:
        assert v["triton-w4a16"]["verdict"] == v["triton-w4a4"]["verdict"] == "no"
    if major == 12:
        # patches cannot give SM120 the SM100-only kernels
        assert v["flashinfer-trtllm"]["verdict"] == v["flashinfer-cutedsl"]["verdict"] == "no"
        if f["flashinfer_patches"]["harmful_applied"] and fi is not None:
            assert "revert" in v["flashinfer-trtllm"]["why"]
        assert (v["triton-w4a4"]["verdict"] == "yes") == (tr == "3.9.0")
        if fi and f["nvcc_max"] and f["nvcc_max"] >= "12.9":
            literal = f["env"].get("FLASHINFER_CUDA_ARCH_LIST") in ("12.0", "9.0 12.0")
            cut = v["flashinfer-cutlass"]
            if literal and fi in ("0.6.5", "0.6.6"):
                assert cut["verdict"] == "no" and "fi-cuda-arch-list-suffix" in cut["needs"]
            elif f["flashinfer_patches"]["needed_missing"]:
                assert cut["verdict"] == "slow" and "fi-sm120-moe-stage-count" in cut["needs"]
            else:
                assert cut["verdict"] == "yes"
        if fi and f["nvcc_max"] is None:
            assert v["flashinfer-cutlass"]["verdict"] == "no" and "nvcc" in v["flashinfer-cutlass"]["why"]
        sm12x_ok = (fi == "0.7.4" and f["versions"]["nvidia-cutlass-dsl"] is not None
                    and f["cuda_runtime"] is not None and f["cuda_runtime"] >= "13.0")
        assert (v["flashinfer-sm12x-w4a4"]["verdict"] == "yes") == sm12x_ok
        assert v["flashinfer-sm12x-w4a16"]["verdict"] == v["flashinfer-sm12x-w4a4"]["verdict"]
    else:
        assert v["flashinfer-sm12x-w4a4"]["verdict"] == v["flashinfer-sm12x-w4a16"]["verdict"] == "no"
    if major < 10 or major == 11:
        assert v["flashinfer-trtllm"]["verdict"] == "no"


def test_one_rule_per_registry_backend_under_the_registry_name():
    from sm120lab.moe.backends import backend_names

    assert set(doctor.RULES) == set(backend_names()) | set(doctor.NO_ADAPTER)
    assert not set(doctor.NO_ADAPTER) & set(backend_names())
    assert doctor.backend_order()[:len(backend_names())] == backend_names()
    assert [a.value for a in doctor.Answer] == ["yes", "slow", "risky", "emulated", "no"]


def test_doctor_runs_here_and_predicts_without_gpu(tmp_path, capsys):
    path = tmp_path / "doctor.json"
    assert cli_main(["doctor", "--measure", "off", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    report = json.loads(path.read_text())
    for b in doctor.backend_order():
        assert b in out
    assert [r["backend"] for r in report["verdicts"]] == doctor.backend_order()
    assert [r["backend"] for r in report["verdicts_if_sm120"]] == doctor.backend_order()
    f = report["facts"]
    assert set(f) >= {"cc", "driver", "cuda_runtime", "nvcc", "versions", "env", "smem_per_block_optin"}
    assert report["envinfo"]["packages"]["torch"] is not None and "measured" not in report
    assert report["command"] == "sm120lab doctor --measure off --json " + str(path)
    if f["cc"] is None:
        assert "GPU        none" in out
        assert all(r["verdict"] == "no" for r in report["verdicts"] if r["backend"] not in doctor.CPU_OK)
    for n in f["nvcc"]:
        assert n["path"] in out


def test_doctor_measures_real_verdicts_and_fails_on_garbage(tmp_path, capsys, monkeypatch):
    """--measure runs the harness: the CPU-capable backends are judged correct, the others are
    skipped with their reason, and a backend measured garbage makes the doctor exit 1."""
    from sm120lab.moe import backends as registry
    from sm120lab.moe.faults import all_faults

    path = tmp_path / "doctor.json"
    assert cli_main(["doctor", "--measure", "cpu", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    measured = report["measured"]
    assert {measured[b]["verdict"] for b in doctor.CPU_OK} == {"correct"}
    assert all(m["verdict"] in ("correct", "skipped") for m in measured.values())
    assert all(m["reason"] for m in measured.values() if m["verdict"] == "skipped")
    assert "measured" in capsys.readouterr().out
    fault = all_faults(include_subtle=False)[0]
    registry.all_backends()
    monkeypatch.setitem(registry._REGISTRY, fault.name, fault)
    monkeypatch.setitem(doctor.RULES, fault.name, doctor.RULES["torch-bf16"])
    assert cli_main(["doctor", "--measure", "cpu"]) == 1
    err = capsys.readouterr().err
    assert f"{fault.name}: garbage" in err


def test_doctor_bad_json_path_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert cli_main(["doctor", "--measure", "off", "--json", str(tmp_path / "f" / "d.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--json: cannot write") and "\n" not in err


def test_doctor_env_is_the_envinfo_filter(monkeypatch):
    from sm120lab.envinfo import relevant_env

    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "12.0f")
    monkeypatch.setenv("SOMETHING_ELSE_ENTIRELY", "1")
    env = doctor.gather()["facts"]["env"]
    assert env == relevant_env() and env["FLASHINFER_CUDA_ARCH_LIST"] == "12.0f"
    assert "SOMETHING_ELSE_ENTIRELY" not in env


def test_doctor_audits_an_importable_flashinfer_and_names_the_needed_patch(tmp_path, monkeypatch, seed):
    """A flashinfer 0.6.5 tree on sys.path (built from its patch specs, offline: test_patches._spec_site)
    plus a user spec with one `needed` patch: the doctor must report it, and judge FLASHINFER_CUTLASS
    'slow' on SM120."""
    import importlib
    import random
    import sys

    import pytest

    pytest.importorskip("yaml")
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("a real flashinfer is installed here")
    from test_patches import _needed_spec, _spec_site

    site = _spec_site(tmp_path / "site", "flashinfer", "0.6.5")
    d, pid, _ = _needed_spec(tmp_path, site, random.Random(seed))
    monkeypatch.setenv("SM120LAB_PATCH_SPECS", str(d))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        report = doctor.run(str(tmp_path / "d.json"), measure_on=None)
    finally:
        sys.modules.pop("flashinfer", None)
    f = report["facts"]
    assert f["versions"]["flashinfer-python"] == "0.6.5"
    assert f["flashinfer_patches"]["available"] and pid in f["flashinfer_patches"]["needed_missing"]
    sm120 = {r["backend"]: r for r in report["verdicts_if_sm120"]}
    if f["nvcc_max"]:
        assert sm120["flashinfer-cutlass"]["verdict"] == "slow" and pid in sm120["flashinfer-cutlass"]["needs"]
    assert sm120["flashinfer-trtllm"]["verdict"] == "no"
