"""The vLLM wheel cache (sm120lab.moe.vllm_wheel) and the vllm-marlin adapter's wiring, on the CPU.

A synthetic wheel stands in for vLLM's (the real one is 304 MB and `make test` is offline): the same
layout (``vllm/**.py``, ``vllm-<v>.dist-info/METADATA``, the two op extensions), engine ``__init__``
files that raise when run, a module-level import of a module no machine has, and a platform probe that
imports inside a function. The real wheel's run is recorded in data/correctness/marlin_h200_2026-12-04/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from packaging.version import Version

from sm120lab.moe import vllm_wheel as vw

REPO = Path(__file__).resolve().parents[1]
TORCH_RELEASE = ".".join(map(str, Version(torch.__version__).release))
BOOM = "raise RuntimeError('an engine __init__ ran')\n"
L = "vllm/model_executor/layers"
SOURCES = {
    "vllm/__init__.py": BOOM,
    "vllm/model_executor/__init__.py": BOOM,
    f"{L}/__init__.py": BOOM,
    f"{L}/fused_moe/__init__.py": "",
    f"{L}/fused_moe/experts/__init__.py": "",
    f"{L}/fused_moe/experts/marlin_moe.py": textwrap.dedent("""
        import sm120lab_absent_dep_xyz
        from sm120lab_absent_dep_xyz.sub import Thing

        def _probe():
            try:
                import sm120lab_absent_probe_xyz  # noqa: F401
                return True
            except ImportError:
                return False

        PROBE_FOUND = _probe()
        CALLS = []

        def fused_marlin_moe(**kw):
            CALLS.append(kw)
            return kw["output"]
        """),
    f"{L}/fused_moe/activation.py": "import enum\n\nclass MoEActivation(enum.Enum):\n    SILU = 'silu'\n",
    f"{L}/quantization/__init__.py": "",
    f"{L}/quantization/utils/__init__.py": "",
    f"{L}/quantization/utils/marlin_utils_fp4.py": "def prepare_nvfp4_moe_layer_for_marlin(layer, **kw):\n"
                                                    "    return tuple(range(6))\n",
    "vllm/scalar_type.py": "class _T:\n    id = 17\n\nclass scalar_types:\n    float4_e2m1f = _T()\n",
}


def make_wheel(folder: Path, version="0.26.0", meta_version=None, torch_pin=TORCH_RELEASE, name="vllm",
               extensions=True) -> Path:
    path = folder / f"{name}-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        for rel, text in SOURCES.items():
            z.writestr(rel, text)
        z.writestr(f"{name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {meta_version or version}\n"
                   f"Requires-Dist: torch=={torch_pin}\nRequires-Dist: regex\n")
        if extensions:
            for ext in ("_C_stable_libtorch", "_moe_C_stable_libtorch"):
                z.writestr(f"vllm/{ext}.abi3.so", b"\x7fELF not a real library")
    return path


@pytest.fixture
def wheel(tmp_path):
    return make_wheel(tmp_path)


def test_wheel_identity_reads_name_version_and_torch_pin(wheel):
    assert vw.wheel_identity(wheel) == ("vllm", "0.26.0", TORCH_RELEASE)


@pytest.mark.parametrize("kw,needle", [({"meta_version": "0.25.0"}, "METADATA says vllm 0.25.0"),
                                       ({"name": "flashinfer_python"}, "expected vllm")])
def test_a_wheel_whose_own_name_or_version_differ_is_refused(tmp_path, kw, needle):
    w = make_wheel(tmp_path, **kw)
    with pytest.raises(vw.VllmWheelError, match=needle):
        vw.build_cache("0.26.0", w, tmp_path / "cache")
    assert not (tmp_path / "cache" / "0.26.0").exists()


def test_a_truncated_wheel_and_the_wrong_version_are_refused(tmp_path, wheel):
    cut = tmp_path / "cut" / wheel.name
    cut.parent.mkdir()
    cut.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    with pytest.raises(vw.VllmWheelError, match="not a readable zip"):
        vw.build_cache("0.26.0", cut, tmp_path / "cache")
    with pytest.raises(vw.VllmWheelError, match="0.27.0 was asked for"):
        vw.build_cache("0.27.0", wheel, tmp_path / "cache")
    with pytest.raises(vw.VllmWheelError, match="does not exist"):
        vw.build_cache("0.26.0", tmp_path / "missing.whl", tmp_path / "cache")


def test_build_cache_is_all_or_nothing_and_keeps_a_complete_cache(tmp_path, wheel):
    root = tmp_path / "cache"
    (tmp_path / "noext").mkdir()
    bad = make_wheel(tmp_path / "noext", extensions=False)
    with pytest.raises(vw.VllmWheelError, match="lacks vLLM's _C/_moe_C"):
        vw.build_cache("0.26.0", bad, root)
    assert not (root / "0.26.0").exists() and not list(root.glob(".*partial*"))
    folder = vw.build_cache("0.26.0", wheel, root)
    m = vw.read_cache(folder, "0.26.0")
    assert m["torch_pin"] == TORCH_RELEASE and m["wheel"] == wheel.name
    assert set(m["files"]) == set(SOURCES) | {"vllm-0.26.0.dist-info/METADATA", "vllm/_C_stable_libtorch.abi3.so",
                                              "vllm/_moe_C_stable_libtorch.abi3.so"}
    stamp = (folder / vw.MANIFEST).stat().st_mtime_ns
    assert vw.build_cache("0.26.0", wheel, root) == folder  # reused, not rewritten
    assert (folder / vw.MANIFEST).stat().st_mtime_ns == stamp
    assert vw.cached_versions(root) == ["0.26.0"]


def _broken(folder: Path, how: str) -> None:
    man = folder / vw.MANIFEST
    if how == "half-written":
        man.unlink()
    elif how == "damaged":
        (folder / "vllm/scalar_type.py").write_text("id = 18\n")
    elif how == "incomplete":
        (folder / "vllm/scalar_type.py").unlink()
    elif how == "future schema":
        man.write_text(json.dumps({**json.loads(man.read_text()), "schema": vw.SCHEMA + 1}))
    elif how == "another version":
        man.write_text(json.dumps({**json.loads(man.read_text()), "version": "0.25.0"}))
    elif how == "unreadable":
        man.write_text("{not json")


@pytest.mark.parametrize("how,needle", [("half-written", "half-written"), ("damaged", "damaged"),
                                        ("incomplete", "is missing"), ("future schema", "schema"),
                                        ("another version", "expected vllm 0.26.0"), ("unreadable", "unreadable")])
def test_a_bad_cache_is_refused_with_the_command_that_rebuilds_it(tmp_path, wheel, how, needle):
    folder = vw.build_cache("0.26.0", wheel, tmp_path / "cache")
    _broken(folder, how)
    with pytest.raises(vw.VllmWheelError, match=needle) as err:
        vw.read_cache(folder, "0.26.0")
    assert "sm120lab upstream vllm-cache 0.26.0" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(vw.VllmWheelError):  # and building over it never reuses it
        vw.build_cache("0.26.0", wheel, tmp_path / "cache")


def test_torch_mismatch_compares_releases_not_local_tags():
    assert vw.torch_mismatch("2.11.0", "2.11.0+cu130") is None
    assert vw.torch_mismatch(None, "2.13.0") is None
    why = vw.torch_mismatch("2.11.0", "2.13.0")
    assert "torch ABI mismatch" in why and "torch==2.11.0" in why and "2.13.0" in why


def _in_fresh_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


LOAD = """
import json, sys
from sm120lab.moe import vllm_wheel as vw
vw.EXTENSION_MODULES = ()          # the synthetic wheel's extensions are not libraries
vw._op_schemas = lambda: {{}}      # (the real wheel's run checks them on the H200)
rt = vw.load_cache(vw.Path({folder!r}), "0.26.0")
mm = sys.modules["vllm.model_executor.layers.fused_moe.experts.marlin_moe"]
print(json.dumps({{"notes": rt.notes(), "id": rt.float4_e2m1f_id, "silu": rt.silu.name,
                  "probe_found": mm.PROBE_FOUND, "placeholder": type(mm.Thing).__name__,
                  "absent_after": __import__("importlib").util.find_spec("sm120lab_absent_probe_xyz") is None}}))
"""


def test_load_cache_runs_the_wheels_own_modules_without_the_engine(tmp_path, wheel):
    folder = vw.build_cache("0.26.0", wheel, tmp_path / "cache")
    res = _in_fresh_python(LOAD.format(folder=str(folder)))
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["id"] == 17 and got["silu"] == "SILU"
    assert got["notes"]["vllm"] == "0.26.0" and got["notes"]["vllm_source"] == f"wheel cache {folder}"
    # the module-level import of an absent module became a recorded placeholder ...
    assert got["notes"]["stubbed_modules"] == ["sm120lab_absent_dep_xyz"] and got["placeholder"] == "_Inert"
    # ... while an import inside a function (a platform probe) still saw the module as absent
    assert got["probe_found"] is False and got["absent_after"] is True


def test_load_cache_refuses_another_torch_before_loading_anything(tmp_path):
    folder = vw.build_cache("0.26.0", make_wheel(tmp_path, torch_pin="2.0.1"), tmp_path / "cache")
    code = (f"import sys\nfrom sm120lab.moe import vllm_wheel as vw\ntry:\n    vw.load_cache(vw.Path({str(folder)!r}))\n"
            "except vw.VllmWheelError as e:\n    print('ERR', e)\nprint('vllm' in sys.modules)")
    out = _in_fresh_python(code).stdout.splitlines()
    assert out[0].startswith("ERR torch ABI mismatch") and "torch==2.0.1" in out[0] and out[1] == "False"


def test_an_extension_that_does_not_load_is_one_line(tmp_path, wheel):
    folder = vw.build_cache("0.26.0", wheel, tmp_path / "cache")
    code = (f"from sm120lab.moe import vllm_wheel as vw\ntry:\n    vw.load_cache(vw.Path({str(folder)!r}))\n"
            "except vw.VllmWheelError as e:\n    print('ERR', e)")
    out = _in_fresh_python(code).stdout.strip().splitlines()
    assert len(out) == 1 and "does not load on this machine" in out[0] and f"torch {TORCH_RELEASE}" in out[0]


def test_no_vllm_and_no_cache_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails
    monkeypatch.setattr(vw, "_RUNTIME", None)
    with pytest.raises(vw.VllmWheelError, match="sm120lab upstream vllm-cache 0.26.0"):
        vw.marlin_runtime(root=tmp_path)
    monkeypatch.setattr(vw.importlib.util, "find_spec", lambda name: None)
    assert "no vLLM wheel cache" in vw.available(tmp_path)


def test_cli_vllm_cache_builds_verifies_and_refuses_in_one_line(tmp_path, wheel):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sm120lab", "upstream", "vllm-cache", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120)

    ok = cli("0.26.0", "--wheel", str(wheel), "--dest", str(tmp_path / "c"))
    assert ok.returncode == 0 and "pins torch==" in ok.stdout
    assert cli("0.26.0", "--dest", str(tmp_path / "c"), "--verify").returncode == 0
    (tmp_path / "c/0.26.0/vllm/scalar_type.py").write_text("x = 1\n")
    bad = cli("0.26.0", "--dest", str(tmp_path / "c"), "--verify")
    assert bad.returncode == 1 and "damaged" in bad.stderr and "Traceback" not in bad.stderr
    for args in (("0.2x",), ("0.26.0", "--wheel", str(tmp_path / "none.whl"), "--dest", str(tmp_path / "d"))):
        r = cli(*args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_adapter_repacks_once_per_problem_and_passes_vllms_defaults(monkeypatch):
    """The adapter's wiring against a stand-in runtime: one repack for the harness's k+1 calls, a new one
    for new weights, vLLM's defaults (no block size, no workspace), int32 ids, output written in place."""
    from sm120lab.moe import make_moe_problem
    from sm120lab.moe.backends.vllm_nvfp4 import VllmMarlin

    calls = {"prepare": [], "fused": []}

    def prepare(layer, **kw):
        calls["prepare"].append((layer, kw))
        return tuple(range(6))

    def fused(**kw):
        calls["fused"].append(kw)
        kw["output"].fill_(1.0)
        return kw["output"]

    rt = vw.MarlinRuntime(fused, prepare, 17, SimpleNamespace(name="SILU"), "0.26.0", "wheel cache X")
    monkeypatch.setattr(vw, "_RUNTIME", rt)
    m = VllmMarlin()
    p = make_moe_problem("tiny", tokens=8, seed=3, device="cpu")
    for _ in range(p.config.k + 1):
        out = torch.full((p.tokens, p.config.H), -(2.0 ** 127), dtype=torch.bfloat16)
        notes = m.run(p, out)
        assert bool((out == 1.0).all())
    assert len(calls["prepare"]) == 1 and len(calls["fused"]) == p.config.k + 1
    layer, kw = calls["prepare"][0]
    assert (layer.num_experts, layer.hidden_size, layer.intermediate_size_per_partition) == (p.config.E, p.config.H,
                                                                                            p.config.I)
    assert kw["is_act_and_mul"] is True and tuple(kw["w13_scale_2"].shape) == (p.config.E,)
    f = calls["fused"][0]
    assert f["topk_ids"].dtype == torch.int32 and f["topk_weights"].dtype == torch.float32
    assert f["quant_type_id"] == 17 and "block_size_m" not in f and "workspace" not in f
    assert notes["vllm"] == "0.26.0" and notes["vllm_source"] == "wheel cache X" and notes["verified_on_sm120"] is False
    m.run(make_moe_problem("tiny", tokens=8, seed=4, device="cpu"),
          torch.empty((8, p.config.H), dtype=torch.bfloat16))
    assert len(calls["prepare"]) == 2


def test_a_vllm_whose_ops_differ_is_one_line(monkeypatch):
    """Another vLLM release whose extensions lack an op the Marlin path calls: refused, naming the op."""
    monkeypatch.setattr(vw, "REQUIRED_OPS", {"_sm120lab_no_such_ns": ("moe_wna16_marlin_gemm",)})
    with pytest.raises(vw.VllmWheelError, match=r"torch\.ops\._sm120lab_no_such_ns\.moe_wna16_marlin_gemm is not "
                                                r"registered") as err:
        vw._op_schemas()
    assert "\n" not in str(err.value)
    monkeypatch.setattr(vw, "REQUIRED_OPS", {"aten": ("add",)})  # a registered op: its schema is recorded
    assert vw._op_schemas()["aten.add"].startswith("aten::add")


def test_a_cache_travels_in_parts_and_is_rebuilt_only_when_every_part_is_right(tmp_path, wheel):
    folder = vw.build_cache("0.26.0", wheel, tmp_path / "here")
    parts = vw.pack_cache(folder, tmp_path / "parts", part_mb=0.001)  # ~1 KiB parts: several of them
    assert len(parts) >= 2 and [p.name for p in parts] == [f"part{i:02d}" for i in range(len(parts))]
    with pytest.raises(vw.VllmWheelError, match="not empty"):
        vw.pack_cache(folder, tmp_path / "parts")
    # carried separately: each part folder somewhere else
    carried = []
    for i, p in enumerate(parts):
        d = tmp_path / f"carry{i}"
        shutil.copytree(p, d / p.name)
        carried.append(d)
    with pytest.raises(vw.VllmWheelError, match="missing"):
        vw.unpack_parts(carried[:-1], tmp_path / "there")
    victim = next((carried[-1] / parts[-1].name).glob("cache.tar.xz.*"))
    good = victim.read_bytes()
    victim.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(vw.VllmWheelError, match="damaged in transit"):
        vw.unpack_parts(carried, tmp_path / "there")
    assert not (tmp_path / "there" / "0.26.0").exists()
    victim.write_bytes(good)
    there = vw.unpack_parts(carried, tmp_path / "there")
    assert vw.read_cache(there, "0.26.0")["files"] == vw.read_cache(folder, "0.26.0")["files"]
    assert not list((tmp_path / "there").glob(".*unpack*"))
