"""The upstream facts: recorded records load and say what the wheels say; the extractors work on a tiny
synthetic wheel; pip's resolver, offline, agrees with the recorded pins."""

from __future__ import annotations

import ast
import json
import re
import textwrap
import zipfile

import pytest
from packaging.version import Version

from sm120lab import upstream
from sm120lab.paths import data_dir
from sm120lab.upstream import extract_flashinfer, extract_vllm, pyeval, store
from sm120lab.upstream.record import FlashInferRecord, MetadataRecord, Verdict, VllmRecord, parse_record
from sm120lab.upstream.resolve import stub_metadata, write_stub_wheel
from sm120lab.upstream.wheelsrc import WheelSource, exact_pins, parse_metadata

UPSTREAM = data_dir() / "upstream"


# --------------------------------------------------------------------------- the recorded data


def test_every_record_loads_and_is_indexed():
    files = sorted(p for p in UPSTREAM.glob("*.json") if p.name != "index.json")
    assert files, "no records in data/upstream"
    idx = store.index()
    indexed = {e.record for d in idx.dists.values() for e in d.values()}
    assert indexed == {f"data/upstream/{p.name}" for p in files}
    for path in files:
        rec = parse_record(json.loads(path.read_text()))
        assert isinstance(rec, (VllmRecord, FlashInferRecord, MetadataRecord))
        assert re.fullmatch(r"[0-9a-f]{64}", rec.wheel.sha256)
        assert rec.command.startswith(f"sm120lab upstream record {rec.dist} {rec.version}")
        assert rec.wheel.filename.endswith(".whl") and rec.method
        entry = idx.dists[rec.dist][rec.version]
        assert (entry.sha256, entry.command, entry.wheel) == (rec.wheel.sha256, rec.command, rec.wheel.filename)


def test_versions_ascending_and_load_errors():
    vs = upstream.versions("vllm")
    assert vs == sorted(vs, key=Version) and {"0.17.0", "0.34.0"} <= set(vs)
    assert upstream.newest("vllm") == vs[-1]
    assert isinstance(upstream.load("vllm", "0.34.0"), VllmRecord)
    assert isinstance(upstream.load("flashinfer-python", "0.7.4"), FlashInferRecord)
    assert upstream.load("vllm", "0.34").version == "0.34.0" and upstream.load("vllm", "0.34.0").sha256
    with pytest.raises(ValueError, match=r"vllm: no recorded facts for 0\.99 \(recorded: 0\.17\.0, .*0\.34\.0\); "
                                         r"record them with `sm120lab upstream record vllm 0\.99`"):
        upstream.load("vllm", "0.99")


def test_known_vllm_facts():
    old, new = upstream.load("vllm", "0.17.0"), upstream.load("vllm", "0.34.0")
    assert "VLLM_NVFP4_GEMM_BACKEND" in old.env_vars and "VLLM_NVFP4_GEMM_BACKEND" not in new.env_vars
    assert old.dense_nvfp4_gemm.env is not None and old.dense_nvfp4_gemm.flag is None
    assert new.dense_nvfp4_gemm.env is None and new.dense_nvfp4_gemm.flag.name == "--linear-backend"
    names = {b.name for b in new.moe_backends}
    assert {"b12x", "flashinfer_b12x", "marlin", "flashinfer_cutlass"} <= names
    assert set(new.serve_flags["--moe-backend"].choices) == names
    for rec in (old, new):
        assert rec.pins["flashinfer-python"].startswith("==") and rec.pins["torch"].startswith("==")
        assert rec.moe_backend_flag
        by = {b.name: b for b in rec.moe_backends}
        # each backend's own check, evaluated: family-120 checks admit SM12x, family-100 ones do not
        assert by["flashinfer_cutlass"].sm12x is Verdict.ACCEPTS
        assert "is_device_capability_family(120)" in by["flashinfer_cutlass"].sm12x_anchor.text
        assert by["flashinfer_trtllm"].sm12x is Verdict.REJECTS
        assert by["marlin"].sm12x is Verdict.ACCEPTS and by["marlin"].auto_selected
        assert rec.attention_priority_cuda["sm120"][0] == "FLASH_ATTN"
        assert "--kv-cache-dtype" in rec.serve_flags and "fp8" in rec.serve_flags["--kv-cache-dtype"].choices
        for fact in rec.facts.values():
            if fact.found:
                assert fact.anchor.text and fact.anchor.line >= 1
    b12x = {b.name: b for b in new.moe_backends}["flashinfer_b12x"]
    assert b12x.sm12x is Verdict.ACCEPTS and not b12x.auto_selected
    assert new.facts["flashinfer_b12x_excluded_from_auto"].found
    url = new.source_url(b12x.sm12x_anchor)
    assert url.startswith("https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/") and "#L" in url


def test_anchors_are_the_recorded_lines():
    """An anchor's text is on its line: check a sample against the text search that made it."""
    rec = upstream.load("vllm", "0.34.0")
    anchors = [rec.env_vars[k] for k in list(rec.env_vars)[:5]] + [b.anchor for b in rec.moe_backends[:5]]
    for a in anchors:
        assert a.file.startswith("vllm/") and a.line >= 1 and a.text


def test_known_flashinfer_facts():
    new = upstream.load("flashinfer-python", "0.7.4")
    res = {a.case: a.result for a in new.arch_list}
    assert res["sm120-cuda12.9"] == "12.0f" and res["sm120-cuda13.0"] == "12.0f"
    assert res["sm120-cuda12.8"] == "12.0a"
    assert res["sm121-cuda12.8"].startswith("error:")
    assert new.jit_load_order.aot_before_jit is True
    assert new.jit_load_order.cache_dir_key == ["flashinfer_version", "arch"]
    assert new.facts["b12x_nvfp4_config"].found and new.facts["sm12x_nvfp4_moe_requires_cuda13"].found
    assert "FLASHINFER_CUDA_ARCH_LIST" in new.env_vars
    if "0.6.7" in upstream.versions("flashinfer-python"):
        res67 = {a.case: a.result for a in upstream.load("flashinfer-python", "0.6.7").arch_list}
        assert res67["sm120-cuda12.8"].startswith("error:") and "12.9" in res67["sm120-cuda12.8"]


def test_changes_lists_versions_where_a_fact_changed():
    vs = upstream.versions("vllm")
    for fact in ("moe_backends", "env_vars", "serve_flags", "pins"):
        changed = upstream.changes("vllm", fact)
        assert set(changed) <= set(vs[1:])
        for v in changed:
            prev = vs[vs.index(v) - 1]
            assert upstream.comparable(upstream.load("vllm", v), fact) != upstream.comparable(
                upstream.load("vllm", prev), fact)
    assert "0.34.0" in upstream.changes("vllm", "pins") or len(vs) > 2
    with pytest.raises(ValueError, match="fact: expected one of"):
        upstream.changes("vllm", "nonsense")


# --------------------------------------------------------------------------- the resolver


def _pinned_pair(version: str) -> list[str]:
    pin = upstream.load("vllm", version).pins["flashinfer-python"]
    return [f"vllm=={version}", f"flashinfer-python{pin}"]


def test_check_install_refuses_the_issue_19_pairs():
    r = upstream.check_install(["vllm==0.17.0", "flashinfer-python==0.6.7"])
    assert not r.ok and "flashinfer-python==0.6.4" in r.detail and r.resolved == {}
    r = upstream.check_install(["vllm==0.34.0", "flashinfer-python==0.7.4"])
    assert not r.ok and "flashinfer-python==0.7.3" in r.detail


def test_check_install_accepts_recorded_pins():
    published = set(upstream.versions("flashinfer-python"))
    ok_versions = [v for v in upstream.versions("vllm")
                   if upstream.load("vllm", v).pins["flashinfer-python"][2:] in published]
    assert "0.17.0" in ok_versions
    for v in (ok_versions[0], ok_versions[-1]):
        r = upstream.check_install(_pinned_pair(v))
        assert r.ok, r.detail
        assert r.resolved["vllm"] == v and r.resolved["torch"] == upstream.load("vllm", v).pins["torch"][2:]
    # a pin the registry does not serve is refused, as pip would against PyPI
    for gone in upstream.unavailable():
        for by in gone.pinned_by[:1]:
            r = upstream.check_install([by])
            assert not r.ok and f"{gone.dist}=={gone.version}" in r.detail


def test_check_install_rejects_bad_input():
    with pytest.raises(ValueError, match="requirements: expected"):
        upstream.check_install("vllm==0.34.0")
    with pytest.raises(ValueError, match="requirements: expected PEP 508"):
        upstream.check_install(["vllm=0.34"])


def test_stub_wheel_keeps_only_the_universe(tmp_path):
    meta = stub_metadata("vllm", "1.0", ">=3.10", ["torch==2.0", "numpy>=1", "b12x==1.0; extra == 'b12x'"],
                         ["b12x"], {"torch", "b12x", "vllm"})
    assert "numpy" not in meta and "Requires-Dist: torch==2.0" in meta and "Provides-Extra: b12x" in meta
    whl = write_stub_wheel(tmp_path, "vllm", "1.0", meta)
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        assert {"vllm-1.0.dist-info/METADATA", "vllm-1.0.dist-info/WHEEL", "vllm-1.0.dist-info/RECORD"} == names
        assert "sha256=" in zf.read("vllm-1.0.dist-info/RECORD").decode()


# --------------------------------------------------------------------------- extractors on a synthetic wheel

_VLLM_FILES = {
    "vllm/config/kernel.py": '''
        from typing import Literal
        MoEBackend = Literal[
            "auto",
            "alpha",
            "beta",
            "gamma",
        ]
        ''',
    "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py": '''
        from enum import Enum
        class NvFp4MoeBackend(Enum):
            A = "A"
            B = "B"
            G = "G"
        def backend_to_kernel_cls(backend):
            if backend == NvFp4MoeBackend.A:
                from vllm.experts.a import AExperts
                return [AExperts]
            elif backend == NvFp4MoeBackend.B:
                from vllm.experts.b import BExperts
                return [BExperts]
            elif backend == NvFp4MoeBackend.G:
                from vllm.experts.b import GExperts
                return [GExperts]
        def map_nvfp4_backend(runner_backend):
            mapping = {"alpha": NvFp4MoeBackend.A, "beta": NvFp4MoeBackend.B, "gamma": NvFp4MoeBackend.G}
            return mapping[runner_backend]
        def select_nvfp4_moe_backend(config):
            AVAILABLE_BACKENDS = [
                NvFp4MoeBackend.B,
                NvFp4MoeBackend.A,
            ]
            return AVAILABLE_BACKENDS[0]
        ''',
    "vllm/model_executor/layers/fused_moe/oracle/fp8.py": '''
        def map_fp8_backend(runner_backend):
            mapping = {"alpha": 1}
            return mapping[runner_backend]
        ''',
    "vllm/experts/a.py": '''
        from vllm.platforms import current_platform
        class AExperts:
            @staticmethod
            def _supports_current_device() -> bool:
                p = current_platform
                return p.is_cuda() and (
                    p.is_device_capability(90)
                    or p.is_device_capability_family(120)
                ) and has_kernels()
        ''',
    "vllm/experts/b.py": '''
        from vllm.platforms import current_platform
        _OK = frozenset({(10, 0), (10, 3)})
        def check():
            cap = current_platform.get_device_capability()
            return cap is not None and (cap.major, cap.minor) in _OK
        class BBase:
            @staticmethod
            def _supports_current_device() -> bool:
                return check()
        class BExperts(BBase):
            pass
        class GExperts:
            @staticmethod
            def _supports_current_device() -> bool:
                cap = current_platform.get_device_capability()
                return some_table(cap.to_int())
        ''',
    "vllm/envs.py": '''
        environment_variables = {
            "VLLM_FOO": lambda: 1,
            "VLLM_NVFP4_GEMM_BACKEND": env_with_choices("VLLM_NVFP4_GEMM_BACKEND", None, ["x", "y"]),
        }
        ''',
    "vllm/engine/arg_utils.py": '''
        from dataclasses import dataclass
        from vllm.config.kernel import MoEBackend
        from vllm.reg import Kind
        @dataclass
        class EngineArgs:
            tensor_parallel_size: int = 1
            moe_backend: MoEBackend = "auto"
            attention_backend: Kind | None = None
            kv_cache_dtype: Literal["auto", "fp8"] | str = "auto"
        def add(parser):
            parser.add_argument("--extra-flag", choices=["on", "off"])
        ''',
    "vllm/reg.py": '''
        from enum import Enum
        class Kind(Enum):
            FIRST = "f"
            SECOND = "s"
        ''',
    "vllm/platforms/cuda.py": '''
        from vllm.reg import Kind as AttentionBackendEnum
        def _get_backend_priorities(use_mla, device_capability, num_heads=None):
            if use_mla:
                return [AttentionBackendEnum.SECOND]
            if device_capability.major == 12:
                return [AttentionBackendEnum.SECOND, AttentionBackendEnum.FIRST]
            return [AttentionBackendEnum.FIRST]
        ''',
    "vllm/utils/system_utils.py": '''
        reasons.append("CUDA is initialized")
        ''',
}

_META = ("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.10\n"
         "Requires-Dist: torch==2.0.0\nRequires-Dist: flashinfer-python==0.1.0\nRequires-Dist: numpy>=1\n"
         "Requires-Dist: other==1.0; platform_machine == \"aarch64\"\nProvides-Extra: fast\n"
         "Requires-Dist: b12x==1.0; extra == \"fast\"\n")


def _wheel(tmp_path, name: str, version: str, files: dict[str, str]) -> WheelSource:
    path = tmp_path / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, textwrap.dedent(text).lstrip("\n"))
        zf.writestr(f"{name}-{version}.dist-info/METADATA", _META.format(name=name, version=version))
    return WheelSource.local(path)


def test_vllm_extractor_on_a_synthetic_wheel(tmp_path):
    wheel = _wheel(tmp_path, "vllm", "9.9.9", _VLLM_FILES)
    rec = extract_vllm.extract(wheel, "9.9.9", "sm120lab upstream record vllm 9.9.9")
    assert rec.pins == {"torch": "==2.0.0", "flashinfer-python": "==0.1.0"}  # aarch64-only pin left out
    assert rec.extras == {"fast": ['b12x==1.0; extra == "fast"']}
    by = {b.name: b for b in rec.moe_backends}
    assert list(by) == ["auto", "alpha", "beta", "gamma"]
    assert by["alpha"].sm12x is Verdict.ACCEPTS and by["alpha"].assumed == ["has_kernels"]
    assert by["alpha"].sm12x_anchor.text == "or p.is_device_capability_family(120)"
    assert by["alpha"].formats == ["fp8", "nvfp4"] and by["alpha"].auto_order == 1
    # BExperts inherits its check, which calls a module function reading a module constant
    assert by["beta"].sm12x is Verdict.REJECTS and by["beta"].auto_order == 0
    # an unknown table given the capability: honestly unknown
    assert by["gamma"].sm12x is Verdict.UNKNOWN and not by["gamma"].auto_selected
    assert by["auto"].sm12x is Verdict.UNKNOWN and by["auto"].formats == []
    assert rec.nvfp4_auto_order == ["B", "A"]
    assert set(rec.env_vars) == {"VLLM_FOO", "VLLM_NVFP4_GEMM_BACKEND"}
    assert rec.env_vars["VLLM_FOO"].line == 2
    assert rec.dense_nvfp4_gemm.env.choices == ["x", "y"] and rec.dense_nvfp4_gemm.flag is None
    flags = rec.serve_flags
    assert flags["--moe-backend"].choices == ["auto", "alpha", "beta", "gamma"]
    assert flags["--attention-backend"].choices == ["FIRST", "SECOND"]
    assert flags["--kv-cache-dtype"].choices == ["auto", "fp8"]
    assert flags["--tensor-parallel-size"].choices is None
    assert flags["--extra-flag"].choices == ["on", "off"]
    assert rec.attention_backends == ["FIRST", "SECOND"]
    assert rec.attention_priority_cuda == {"sm120": ["SECOND", "FIRST"], "sm120_mla": ["SECOND"]}
    assert rec.facts["spawn_when_cuda_initialized"].found
    assert rec.facts["spawn_when_cuda_initialized"].anchor.file == "vllm/utils/system_utils.py"
    assert not rec.facts["nccl_cumem_forced_off"].found


_FI_FILES = {
    "flashinfer/compilation_context.py": '''
        import os
        import torch
        class CompilationContext:
            def __init__(self):
                self.TARGET_CUDA_ARCHS = set()
                from flashinfer.jit.cpp_ext import is_cuda_version_at_least
                if "FLASHINFER_CUDA_ARCH_LIST" in os.environ:
                    for arch in os.environ["FLASHINFER_CUDA_ARCH_LIST"].split(" "):
                        major, minor = arch.split(".")
                        self.TARGET_CUDA_ARCHS.add((int(major), minor))
                    return
                major, minor = torch.cuda.get_device_capability(0)
                if major == 12 and not is_cuda_version_at_least("12.9"):
                    raise RuntimeError("too old")
                self.TARGET_CUDA_ARCHS.add((major, f"{minor}x"))
        ''',
    "flashinfer/jit/core.py": '''
        class JitSpec:
            def build_and_load(self):
                if self.is_aot:
                    return self.load(self.aot_path)
                self.build()
                return self.load()
        ''',
    "flashinfer/jit/env.py": '''
        import os
        X = os.getenv("FLASHINFER_WORKSPACE_BASE", "")
        def _get_workspace_dir_name():
            return FLASHINFER_CACHE_DIR / flashinfer_version / arch
        ''',
    "flashinfer/other.py": '''
        import os
        if os.environ.get("FLASHINFER_A") or "FLASHINFER_B" in os.environ:
            pass
        NOT_READ = "FLASHINFER_C"
        ''',
}


def test_flashinfer_extractor_on_a_synthetic_wheel(tmp_path):
    wheel = _wheel(tmp_path, "flashinfer_python", "9.9.9", _FI_FILES)
    rec = extract_flashinfer.extract(wheel, "9.9.9", "sm120lab upstream record flashinfer-python 9.9.9")
    res = {a.case: a.result for a in rec.arch_list}
    assert len(res) == 9
    assert res["sm120-cuda12.9"] == "12.0x" and res["sm121-cuda13.0"] == "12.1x"
    assert res["sm120-cuda12.8"] == "error: too old"
    assert res["env-12.0-cuda12.8"] == "12.0"
    assert set(rec.env_vars) == {"FLASHINFER_A", "FLASHINFER_B", "FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_WORKSPACE_BASE"}
    j = rec.jit_load_order
    assert j.aot_before_jit is True and j.aot_anchor.text == "if self.is_aot:" and j.build_anchor.line == 5
    assert j.cache_dir_key == ["flashinfer_version", "arch"] and not j.jit_cache_package
    assert not rec.facts["b12x_nvfp4_config"].found


def test_metadata_parsing_and_pins():
    meta = parse_metadata(_META.format(name="x", version="1"))
    assert meta.requires_python == ">=3.10" and len(meta.requires_dist) == 5
    assert exact_pins(meta.requires_dist) == {"torch": "==2.0.0", "flashinfer-python": "==0.1.0"}


def test_pyeval_capability_semantics():
    src = textwrap.dedent('''
        def f():
            p = current_platform
            return p.has_device_capability((7, 5)) and not p.is_device_capability(100) and (
                p.is_device_capability_family(120))
        ''')
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    assert pyeval.evaluate(fn, pyeval.Capability(12, 0)).value is True
    assert pyeval.evaluate(fn, pyeval.Capability(12, 1)).value is True
    assert pyeval.evaluate(fn, pyeval.Capability(10, 0)).value is False
    assert pyeval.evaluate(fn, pyeval.Capability(7, 0)).value is False
    loop = ast.parse("def g():\n    for x in y:\n        return True\n").body[0]
    ev = pyeval.evaluate(loop, pyeval.Capability(12, 0))
    assert ev.value is pyeval.UNKNOWN and "For" in ev.error


def test_sm12x_changes_name_the_releases_that_moved_an_sm12x_fact():
    vs = upstream.versions("vllm")
    moved = upstream.changes("vllm", "moe_sm12x")
    assert set(moved) <= set(upstream.changes("vllm", "sm12x"))
    for v in moved:
        prev = upstream.load("vllm", vs[vs.index(v) - 1])
        assert upstream.comparable(upstream.load("vllm", v), "moe_sm12x") != upstream.comparable(prev, "moe_sm12x")
    # flashinfer_b12x arrives in some release after 0.17.0 and is named where it does
    first = next(v for v in vs if "flashinfer_b12x" in upstream.comparable(upstream.load("vllm", v), "moe_sm12x"))
    assert first != vs[0] and first in moved
    deprecated = [v for v in vs if "VLLM_NVFP4_GEMM_BACKEND" in upstream.load("vllm", v).env_var_deprecated]
    for v in deprecated:
        assert upstream.load("vllm", v).dense_nvfp4_gemm.flag is not None


def test_index_names_the_pins_pypi_does_not_serve():
    for gone in upstream.unavailable():
        assert gone.version not in upstream.versions(gone.dist)
        for by in gone.pinned_by:
            dist, version = by.split("==")
            assert upstream.load(dist, version).pins.get(gone.dist) == f"=={gone.version}"


def test_known_torch_facts():
    for v in upstream.versions("torch"):
        rec = upstream.load("torch", v)
        res = {a.value: a.result for a in rec.cuda_arch_flags}
        assert res["12.0a"] == "-gencode=arch=compute_120a,code=sm_120a"
        assert res["12.0"] == "-gencode=arch=compute_120,code=sm_120"  # no suffix: no arch-specific FP4 MMA
        assert res["12.0f"].startswith("error:") and "12.0f" in res["12.0f"]
        assert rec.source_url(rec.cuda_arch_flags_anchor).startswith(
            f"https://github.com/pytorch/pytorch/blob/v{v}/torch/utils/cpp_extension.py#L")


def test_torch_extractor_on_a_synthetic_wheel(tmp_path):
    from sm120lab.upstream import extract_torch

    files = {"torch/utils/cpp_extension.py": '''
        import os
        def _get_cuda_arch_flags(cflags=None):
            value = os.environ.get("TORCH_CUDA_ARCH_LIST")
            if value.endswith("f"):
                raise ValueError(f"Unknown CUDA arch ({value})")
            return [f"-arch={value}"]
        '''}
    wheel = _wheel(tmp_path, "torch", "9.9.9", files)
    rec = extract_torch.extract(wheel, "9.9.9", "sm120lab upstream record torch 9.9.9")
    res = {a.value: a.result for a in rec.cuda_arch_flags}
    assert res["12.0a"] == "-arch=12.0a" and res["12.1f"] == "error: Unknown CUDA arch (12.1f)"
    assert rec.cuda_arch_flags_anchor.line == 2 and rec.kind == "torch" and rec.requires_python == ">=3.10"
