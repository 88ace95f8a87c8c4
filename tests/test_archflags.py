"""The compile matrix with the system nvcc 13.0 alone (fast CI part), targets, SASS parsing,
verdict logic, Triton AOT rows, and the CLI."""

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from sm120lab.archflags import matrix as mx
from sm120lab.archflags.cell import compile_cell
from sm120lab.archflags.probes import evidence, get_probe, sass_opcodes
from sm120lab.archflags.summary import cell_code, find
from sm120lab.archflags.targets import parse_target
from sm120lab.archflags.verdicts import verdicts
from sm120lab.toolchains import discover, find_sass_tool

REPO = Path(__file__).resolve().parent.parent
HAVE_NVCC = shutil.which("nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="no nvcc on PATH")


def _system_toolkit():
    for t in discover():
        if t.frontend == "nvcc" and t.major_minor >= (12, 9):
            return t
    pytest.skip("needs a CUDA >= 12.9 nvcc")


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """Fresh compiles (private cache folder) of a few probe x target cells with the system nvcc."""
    os.environ["SM120LAB_ARCHFLAGS_CACHE"] = str(tmp_path_factory.mktemp("afcache"))
    try:
        tk = _system_toolkit()
        try:  # the small PyPI sass-tools wheels when this machine has no cuobjdump; none under `make test`
            tool = find_sass_tool(install_if_missing=True)
        except RuntimeError as exc:
            pytest.skip(f"no cuobjdump here and sass-tools could not be installed ({str(exc)[:160]}); "
                        "`sm120lab toolchains install sass-tools` or `make test-full` installs it")
        wanted = [("mma_nvfp4", t) for t in ("sm_120", "sm_120a", "sm_120f", "compute_120f->sm_121a",
                                               "compute_120a->sm_121a")]
        wanted += [("arch_conditional", "sm_120"), ("arch_conditional", "sm_120a"), ("macros", "sm_120f"),
                   ("macros", "sm_120a"), ("mma_nvfp4", "sm_77")]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as pool:
            recs = list(pool.map(lambda pt: compile_cell(tk, get_probe(pt[0]), parse_target(pt[1]), tool), wanted))
        return {(p, t): r for (p, t), r in zip(wanted, recs)}
    finally:
        os.environ.pop("SM120LAB_ARCHFLAGS_CACHE", None)


@needs_nvcc
def test_nvfp4_mma_rejected_by_ptxas_on_plain_sm120(cells):
    c = cells[("mma_nvfp4", "sm_120")]
    assert c["status"] == "rejected-ptxas" and not c["cached"]
    assert "block scale" in c["error"] and "sm_120" in c["error"]


@needs_nvcc
@pytest.mark.parametrize("target", ["sm_120a", "sm_120f", "compute_120f->sm_121a"])
def test_nvfp4_mma_gives_omma_sf_on_a_and_f(cells, target):
    c = cells[("mma_nvfp4", target)]
    assert c["status"] == "accepted", c
    assert any(op.startswith("OMMA.SF") and "UE4M3" in op for op in c["sass"]), c["sass"]


@needs_nvcc
def test_120a_ptx_cannot_go_to_sm121(cells):
    c = cells[("mma_nvfp4", "compute_120a->sm_121a")]
    assert c["status"] == "rejected-ptxas" and "future architecture" in c["error"]


@needs_nvcc
def test_unknown_arch_is_rejected_at_the_name(cells):
    assert cells[("mma_nvfp4", "sm_77")]["status"] == "rejected-arch"


@needs_nvcc
def test_arch_conditional_is_a_stub_on_plain_sm120_and_real_on_120a(cells):
    plain, a = cells[("arch_conditional", "sm_120")], cells[("arch_conditional", "sm_120a")]
    assert plain["status"] == "accepted" and plain["stub"] and not plain["sass"]
    assert a["status"] == "accepted" and not a["stub"] and a["sass"]
    assert cell_code(plain) == "stub" and cell_code(a) == "feature"


@needs_nvcc
def test_macros_a_versus_f(cells):
    f, a = cells[("macros", "sm_120f")]["macros"], cells[("macros", "sm_120a")]["macros"]
    assert f["__CUDA_ARCH__"] == a["__CUDA_ARCH__"] == 1200
    assert f.get("__CUDA_ARCH_FAMILY_SPECIFIC__") == 1200 and "__CUDA_ARCH_FEAT_SM120_ALL" not in f
    assert a.get("__CUDA_ARCH_FEAT_SM120_ALL") == 1 and a.get("__CUDA_ARCH_SPECIFIC__") == 1200


def test_target_parsing():
    t = parse_target("compute_120f->sm_121a")
    assert (t.arch, t.code, t.is_cross, t.cc, t.label) == ("compute_120f", "sm_121a", True, 121, "compute_120f->sm_121a")
    t = parse_target("sm_100f")
    assert (t.arch, t.code, t.is_cross, t.suffix) == ("compute_100f", "sm_100f", False, "f")
    for bad in ("sm120a", "sm_120x", "compute_120f->", ""):
        with pytest.raises(ValueError, match="--target"):
            parse_target(bad)


def test_sass_opcode_parsing():
    sass = """
        /*0070*/                   OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R4, R4, R8, RZ, R12, UR4, URZ ;  /* 0x... */
        /*0080*/              @!P0 BRA 0x70 ;
        /*0090*/              @P1 CALL.ABS.NOINC 0x0 ;
    """
    ops = sass_opcodes(sass)
    assert ops == ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X", "BRA", "CALL.ABS.NOINC"]
    assert evidence(get_probe("mma_nvfp4"), ops) == ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"]
    assert evidence(get_probe("wgmma"), ops) == []


def _recorded():
    p = REPO / "data" / "archflags" / "matrix.json"
    assert p.is_file(), f"the committed matrix {p} is missing: restore it (git checkout) or rerun `sm120lab archflags`"
    return json.loads(p.read_text())


def test_verdicts_follow_the_cells():
    """The verdicts are computed from cells: flipping a deciding cell flips the verdict."""
    m = _recorded()
    v = {r["claim"]: r["verdict"] for r in verdicts(m)}
    needs13 = "compute_120f needs CUDA 13.0"
    if "12.9" in {t["name"] for t in m["toolkits"]}:
        assert v[needs13].startswith("FALSE")
        m2 = copy.deepcopy(m)
        c = find(m2, "12.9", "mma_nvfp4", "sm_120f")
        c.update(status="rejected-arch", sass=[], feature_in_sass=False)
        assert {r["claim"]: r["verdict"] for r in verdicts(m2)}[needs13] == "TRUE"
    m3 = copy.deepcopy(m)
    newest = sorted((t["name"] for t in m3["toolkits"]), key=Version)[-1]
    find(m3, newest, "arch_conditional", "sm_120")["stub"] = False
    claim1 = [r for r in verdicts(m3) if "Arch conditional" in r["claim"]][0]
    assert claim1["verdict"] == "FALSE"


def test_recorded_matrix_has_the_required_shape():
    m = _recorded()
    assert {"envinfo", "command", "cells", "toolkits"} <= set(m)
    targets = set(m["targets"])
    for t in ("sm_89", "sm_90", "sm_90a", "sm_100a", "sm_100f", "sm_120", "sm_120a", "sm_120f", "sm_121a",
              "sm_121f", "compute_120f->sm_121a", "compute_120a->sm_121a"):
        assert t in targets
    for c in m["cells"]:
        assert c["status"] in ("accepted", "rejected-arch", "rejected-ptxas", "error")


def test_triton_aot_rows_for_sm120():
    pytest.importorskip("triton")
    from sm120lab.archflags.triton_aot import triton_rows
    rows = {r["probe"]: r for r in triton_rows(ccs=(120,))}
    nvfp4_row = rows["triton_dot_scaled_nvfp4"]
    assert nvfp4_row["status"] == "accepted" and nvfp4_row["shared"] > 0
    assert any("kind::mxf4nvf4" in i and "scale_vec::4X" in i and "ue4m3" in i for i in nvfp4_row["ptx_instructions"])
    mx4 = rows["triton_dot_scaled_mxfp4"]
    assert any("scale_vec::2X" in i and "ue8m0" in i for i in mx4["ptx_instructions"])
    assert any("m16n8k16" in i and "bf16" in i for i in rows["triton_dot_bf16"]["ptx_instructions"])


@needs_nvcc
def test_cli_writes_matrix_with_envinfo(tmp_path):
    out = tmp_path / "m.json"
    env = dict(os.environ, SM120LAB_ARCHFLAGS_CACHE=str(tmp_path / "cache"))
    tk = _system_toolkit().name
    proc = subprocess.run([sys.executable, "-m", "sm120lab", "archflags", "--toolkit", tk, "--target", "sm_120a",
                           "sm_90a", "--probe", "macros", "--json", str(out), "--no-triton"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(out.read_text())
    assert len(m["cells"]) == 2 and "envinfo" in m and "archflags" in m["command"]
    assert find(m, tk, "macros", "sm_90a")["macros"].get("__CUDA_ARCH_FEAT_SM90_ALL") == 1
    bad = subprocess.run([sys.executable, "-m", "sm120lab", "archflags", "--probe", "nope", "--json", str(out)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--probe 'nope'" in bad.stderr


def test_partial_write_merges_and_never_shrinks_the_matrix(tmp_path):
    m = _recorded()
    n = len(m["cells"])
    assert n >= 624
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(m))
    one = copy.deepcopy(m["cells"][5])
    one["seconds"] = 123.0
    new = {"schema": m["schema"], "toolkits": [], "targets": [one["target"]], "probes": {}, "cells": [one]}
    _, kept = mx.write_matrix(new, path, command="sm120lab archflags --probe x")
    merged = json.loads(path.read_text())
    assert kept == n - 1 and len(merged["cells"]) == n
    assert find(merged, one["toolkit"], one["probe"], one["target"])["seconds"] == 123.0
    assert merged["command"] == m["command"] and merged["updates"][-1]["command"] == "sm120lab archflags --probe x"
    assert {mx.cell_key(c) for c in merged["cells"]} == {mx.cell_key(c) for c in m["cells"]}


@needs_nvcc
def test_cli_partial_run_into_the_default_matrix_keeps_every_cell(tmp_path):
    root = tmp_path / "repo"
    (root / "data" / "archflags").mkdir(parents=True)
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "data" / "archflags" / "matrix.json", root / "data" / "archflags" / "matrix.json")
    n = len(_recorded()["cells"])
    env = dict(os.environ, SM120LAB_ROOT=str(root), SM120LAB_ARCHFLAGS_CACHE=str(tmp_path / "cache"))
    tk = _system_toolkit().name
    proc = subprocess.run([sys.executable, "-m", "sm120lab", "archflags", "--toolkit", tk, "--target", "sm_120a",
                           "--probe", "macros", "--no-triton"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads((root / "data" / "archflags" / "matrix.json").read_text())["cells"]) == n
    assert f"{n - 1} earlier cells kept" in proc.stdout


def test_cli_unreadable_or_unwritable_json_is_one_line(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_bytes(b"\x89PNG\x00binary")
    for target in (bad, tmp_path / "a-file" / "m.json"):
        (tmp_path / "a-file").write_text("x")
        proc = subprocess.run([sys.executable, "-m", "sm120lab", "archflags", "--probe", "triton_dot_bf16",
                               "--triton-cc", "90", "--json", str(target)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and proc.stderr.strip().startswith("--json:"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert bad.read_bytes() == b"\x89PNG\x00binary"
