"""The FlashInfer / vLLM adapters call the real packages' APIs correctly (no GPU, no download).

``data/api/<dist>-<version>.json`` holds signatures and layout facts read from the real wheels by
``sm120lab.devtools.api_check``. Here every recorded target becomes a stand-in whose calls
``inspect.Signature.bind()`` against the recorded signature; stand-in modules replace
``flashinfer`` / ``vllm`` in ``sys.modules``; each adapter's real ``run()`` is driven on a CPU
problem for every version it claims. A wrong or missing argument raises ``TypeError`` from
``bind``; an unknown name raises ``ImportError`` / ``AttributeError``; the layout checks below
assert the tensors match the recorded facts (dtypes, shapes, orders).
"""

from __future__ import annotations

import enum
import inspect
import json
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from sm120lab.devtools.api_check import (
    FACTS,
    TARGETS,
    Target,
    adapter_claims,
    api_dir,
    build_index,
    extract,
    load_record,
    signature_from_record,
)
from sm120lab.moe import make_moe_problem
from sm120lab.moe.backends import _packing, all_backends, flashinfer_cutlass, vllm_nvfp4

ADAPTERS = {"flashinfer-cutlass", "flashinfer-sm12x-w4a4", "flashinfer-sm12x-w4a16", "flashinfer-b12x-w4a4",
            "flashinfer-b12x-w4a16", "vllm-cutlass-fp4", "vllm-marlin"}


def _flat(calls) -> list[str]:
    return [k for c in calls for k in ((c,) if isinstance(c, str) else c)]


def _cases():
    return [(name, version) for name, (_, claim) in sorted(adapter_claims().items()) for version in claim.checked]


# ----------------------------------------------------------------------------- stand-ins


class Calls:
    """Every stand-in call, bound: key -> list of ``BoundArguments.arguments`` dicts."""

    def __init__(self):
        self.by_key: dict[str, list[dict]] = {}

    def add(self, key: str, arguments: dict) -> None:
        self.by_key.setdefault(key, []).append(arguments)

    def one(self, *keys: str) -> dict:
        """The single call made to one of ``keys`` (alternative paths of one function)."""
        calls = [a for k in keys for a in self.by_key.get(k, [])]
        assert len(calls) == 1, f"{keys}: expected one call, got {len(calls)}"
        return calls[0]


def _bind(key: str, rec: dict, args, kwargs) -> dict:
    sig = signature_from_record(rec)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{key}{sig}: {exc}") from None
    return dict(bound.arguments)


class _Obj:
    """A constructed stand-in instance: the bound constructor arguments as attributes."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _returns(key: str, a: dict, self_obj=None):
    """What a stand-in returns (just enough for the adapter to reach its end)."""
    name = key.split(":")[1]
    if name.endswith(".prepare_weights"):
        return {"w1": a["w1_fp4"] if "w1_fp4" in a else a["w1_bf16"]}
    if name == "MoELayer.__call__":
        x = a["act_pack"].hidden_states_q
        return torch.ones(x.shape, dtype=torch.bfloat16)
    if name == "prepare_nvfp4_moe_layer_for_marlin":
        return tuple(a[k] for k in ("w13", "w13_scale", "w13_scale_2", "w2", "w2_scale", "w2_scale_2"))
    if name == "fused_marlin_moe":
        return torch.ones_like(a["hidden_states"])
    if name == "run_cutlass_moe_fp4":
        a["output"].fill_(1.0)
        return None
    if name == "cutlass_fused_moe":
        a["output"].fill_(1.0)
        return a["output"]
    if name == "MoEWeightPack.prepare_for":
        self_obj.native_views = {**getattr(self_obj, "native_views", {}), a["backend_key"]: a["view"]}
    return None


def _function(key: str, rec: dict, calls: Calls):
    def fn(*args, **kwargs):
        a = _bind(key, rec, args, kwargs)
        calls.add(key, a)
        return _returns(key, a)

    fn.__signature__ = signature_from_record(rec)
    fn.__name__ = key.split(":")[1].split(".")[-1]
    return fn


def _class(key: str, rec: dict, members: dict[str, dict], calls: Calls):
    """A stand-in class: recorded constructor, recorded attribute names only, dotted targets as methods."""
    name = key.split(":")[1]
    if rec["kind"] == "enum":
        return enum.Enum(name, {m: i for i, m in enumerate(rec["members"])})
    ns: dict = {}

    def __init__(self, *args, **kwargs):
        a = _bind(key, rec, args, kwargs) if "params" in rec else _bind(key, {"params": []}, args, kwargs)
        calls.add(key, a)
        _Obj.__init__(self, **a)

    ns["__init__"] = __init__
    for attr, mrec in members.items():
        mkey = f"{key}.{attr}"
        if "staticmethod" in mrec.get("decorators", ()):
            ns[attr] = staticmethod(_function(mkey, mrec, calls))
        elif mrec["kind"] == "function":
            def method(self, *args, _k=mkey, _r=mrec, **kwargs):
                a = _bind(_k, _r, args, kwargs)
                calls.add(_k, a)
                return _returns(_k, a, self)
            ns[attr] = method
    return type(name, (_Obj,), ns)


class _ScalarTypeStandin:
    def __init__(self, has_id: bool):
        self._has_id = has_id

    @property
    def id(self) -> int:
        if not self._has_id:
            raise AttributeError("ScalarType has no attribute 'id' in this version")
        return 17


def install_standins(monkeypatch, record: dict) -> Calls:
    """Put stand-in modules for every recorded target of ``record`` into ``sys.modules``."""
    calls = Calls()
    found = {k: v for k, v in record["targets"].items() if v["found"]}
    modules: dict[str, types.ModuleType] = {}

    def module(name: str) -> types.ModuleType:
        if name not in modules:
            m = types.ModuleType(name)
            m.__path__ = []  # a package, so submodules import
            modules[name] = m
        return modules[name]

    for key, rec in found.items():
        mod, name = key.split(":")
        if "." in name:
            continue
        if rec["kind"] in ("class", "enum"):
            members = {k.split(":")[1].split(".", 1)[1]: v for k, v in found.items()
                       if k.startswith(f"{key}.")}
            if name == "scalar_types":
                obj = types.SimpleNamespace(**{a: _ScalarTypeStandin(f"{mod}:ScalarType.id" in found)
                                               for a in rec["attributes"]})
            else:
                obj = _class(key, rec, members, calls)
        else:
            obj = _function(key, rec, calls)
        setattr(module(mod), name, obj)
    for name in list(modules):
        parts = name.split(".")
        for i in range(1, len(parts)):
            module(".".join(parts[:i]))
    for name, m in modules.items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.setattr(_packing, "installed_version", lambda dist, module=None: record["version"]
                        if dist == record["dist"] else None)
    return calls


# ----------------------------------------------------------------------------- layout checks (recorded facts)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def check_flashinfer_cutlass(calls: Calls, p, out) -> None:
    c = p.config
    a = calls.one("flashinfer.fused_moe:cutlass_fused_moe")
    assert a["fc1_expert_weights"].dtype == torch.int64 == a["fc2_expert_weights"].dtype  # nvfp4_is_int64_weights
    assert a["fc1_expert_weights"].shape == (c.E, 2 * c.I, c.H // 16)
    qs = a["quant_scales"]
    assert len(qs) == 6  # quant_scales_6
    for i in (0, 2, 3, 5):
        assert qs[i].dtype == torch.float32
    for i in (0, 3):  # act_global_scalar_or_E: 0-d or [E]; [1] fails the binding's check when E > 1
        assert qs[i].ndim == 0 or tuple(qs[i].shape) == (c.E,), f"quant_scales[{i}] shape {tuple(qs[i].shape)}"
    assert a["fc2_expert_weights"].shape == (c.E, c.H, c.I // 16)  # inner_dim_16
    assert a["fc1_expert_weights"].shape[1] == 2 * a["fc2_expert_weights"].shape[2] * 16  # fc1_twice_fc2
    assert qs[1].dtype == torch.int32 == qs[4].dtype  # block_scales_int32
    assert tuple(qs[1].shape) == (c.E, _align(c.I, 64) * 2, _align(c.H, 64) // 64)  # fc1_block_shape
    assert tuple(qs[4].shape) == (c.E, _align(c.H, 128), _align(c.I, 64) // 64)
    assert tuple(qs[2].shape) == (c.E,) == tuple(qs[5].shape)  # fc1_global_per_expert
    assert a["output"] is out and out.shape == (p.tokens, c.H) and a["output_dtype"] == out.dtype  # output_checked
    assert a["token_selected_experts"].dtype == torch.int32 and a["token_final_scales"].dtype == torch.float32


def check_flashinfer_sm12x(calls: Calls, p, out, w4a4: bool) -> None:
    c = p.config
    cls = "SM12xNvfp4Config" if w4a4 else "SM12xNvfp4Bf16Config"
    a = calls.one(f"flashinfer.fused_moe:{cls}.prepare_weights")
    assert a["w1_fp4"].dtype == torch.uint8 == a["w2_fp4"].dtype  # cutile.dtypes
    assert a["w1_block_scale"].dtype == torch.float8_e4m3fn == a["w2_block_scale"].dtype
    assert a["w1_fp4"].shape == (c.E, 2 * c.I, c.H // 2) and a["w2_fp4"].shape == (c.E, c.H, c.I // 2)
    assert a["w1_block_scale"].shape == (c.E, 2 * c.I, c.H // 16)  # LINEAR scales, not swizzled
    assert a["w2_block_scale"].shape == (c.E, c.H, c.I // 16)
    for k in ("w1_global_scale", "w2_global_scale"):  # w2_global_shape, modelopt_decode_side
        assert a[k].dtype == torch.float32 and tuple(a[k].shape) == (c.E,)
    torch.testing.assert_close(a["w1_global_scale"], 1.0 / _packing.per_expert(p.w13.global_scale, c.E))
    # [up; gate] order (fi.moe.w1_up_gate): the first I rows are our w13's last I rows (up)
    assert torch.equal(a["w1_fp4"][:, : c.I], p.w13.data[:, c.I:])
    assert a["source_format"] == "modelopt"
    pf = calls.one("flashinfer.fused_moe:MoEWeightPack.prepare_for")
    key, view = pf["backend_key"], pf["view"]
    assert key == ("sm12x_nvfp4" if w4a4 else "sm12x_nvfp4_bf16")  # backend_key(_bf16)
    if w4a4:  # input_global_scale
        for k in ("w1_input_global_scale", "w2_input_global_scale"):
            assert view[k].numel() == 1 and view[k].dtype == torch.float32
    else:
        assert "w1_input_global_scale" not in view
    act = calls.one("flashinfer.fused_moe:MoEActivationPack")
    assert act["hidden_states_q"].dtype == torch.bfloat16 and act["hidden_states_q"].is_contiguous()
    assert act["topk_ids"].dtype == torch.int32 and act["topk_weights"].dtype == torch.float32
    assert act["topk_ids"].is_contiguous() and act["topk_weights"].is_contiguous()
    assert c.H % 128 == 0 and c.I % 64 == 0  # hidden_128, inter_64 (the adapter checks it too)


def check_flashinfer_b12x(calls: Calls, p, out, w4a4: bool) -> None:
    from sm120lab.nvfp4 import dequantize_nvfp4, swizzle_scales_128x4

    c = p.config
    cls = "B12xNvfp4Config" if w4a4 else "B12xW4A16Config"
    a = calls.one(f"flashinfer.fused_moe:{cls}.prepare_weights")
    if w4a4:  # bf16_weights: canonical bf16 [E, 2I, H] in [up; gate] order (fi.moe.w1_up_gate) and [E, H, I]
        assert a["w1_bf16"].dtype == torch.bfloat16 == a["w2_bf16"].dtype
        assert a["w1_bf16"].shape == (c.E, 2 * c.I, c.H) and a["w2_bf16"].shape == (c.E, c.H, c.I)
        up = dequantize_nvfp4(p.w13).to(torch.bfloat16)[:, c.I:]
        assert torch.equal(a["w1_bf16"][:, : c.I], up)
        assert (a["num_local_experts"], a["hidden_size"], a["intermediate_size"]) == (c.E, c.H, c.I)
    else:
        assert a["w1_fp4"].dtype == torch.uint8 == a["w2_fp4"].dtype
        assert a["w1_fp4"].shape == (c.E, 2 * c.I, c.H // 2) and a["w2_fp4"].shape == (c.E, c.H, c.I // 2)
        assert torch.equal(a["w1_fp4"][:, : c.I], p.w13.data[:, c.I:])  # w4a16_w13_is_up_gate
        # w4a16_swizzled_scales: the [up; gate] linear scales, 128x4-swizzled
        up_gate = torch.cat((p.w13.linear_scale()[:, c.I:], p.w13.linear_scale()[:, : c.I]), dim=1)
        assert torch.equal(a["w1_blockscale"].view(torch.uint8), swizzle_scales_128x4(up_gate).view(torch.uint8))
        assert a["w1_blockscale"].dtype == torch.float8_e4m3fn
        assert tuple(a["w2_blockscale"].shape) == (c.E, _align(c.H, 128), _align(c.I // 16, 4))
        for k in ("w1_global_scale", "w2_global_scale"):  # w4a16_modelopt_global: decode-side 1/gs, fp32 [E]
            assert a[k].dtype == torch.float32 and tuple(a[k].shape) == (c.E,)
        torch.testing.assert_close(a["w1_global_scale"], 1.0 / _packing.per_expert(p.w13.global_scale, c.E))
        assert a["source_format"] == "modelopt"
    pf = calls.one("flashinfer.fused_moe:MoEWeightPack.prepare_for")
    assert pf["backend_key"] == ("b12x_nvfp4" if w4a4 else "b12x_w4a16")  # backend_key(_w4a16)
    q = calls.one("flashinfer.fused_moe:QuantConfig")
    assert q["activation"].name == ("NVFP4" if w4a4 else "BF16") and q["weight"].name == "NVFP4"
    act = calls.one("flashinfer.fused_moe:MoEActivationPack")
    assert act["hidden_states_q"].dtype == torch.bfloat16 and act["topk_ids"].dtype == torch.int32
    assert c.H % 16 == 0 and c.I % 16 == 0  # dims_16


def check_vllm_cutlass(calls: Calls, p, out) -> None:
    c = p.config
    a = calls.one(*(f"{m}:run_cutlass_moe_fp4" for m in vllm_nvfp4._CUTLASS_MODULES))
    assert a["w1_fp4"].dtype == torch.uint8 == a["w2_fp4"].dtype  # uint8_weights
    assert a["w1_fp4"].shape == (c.E, 2 * c.I, c.H // 2) and a["w2_fp4"].shape == (c.E, c.H, c.I // 2)
    assert torch.equal(a["w1_fp4"], p.w13.data)  # w13_gate_up: vLLM CUTLASS keeps [gate; up]
    for k in ("a1_gscale", "a2_gscale", "w1_alphas", "w2_alphas"):  # a_gscale_per_expert
        assert a[k].dtype == torch.float32 and tuple(a[k].shape) == (c.E,)
    torch.testing.assert_close(a["w1_alphas"] * a["a1_gscale"] * _packing.per_expert(p.w13.global_scale, c.E),
                               torch.ones(c.E))  # alphas
    assert a["a"].dtype == torch.bfloat16 and a["output"] is out and out.dtype == a["a"].dtype  # input_dtype
    m, topk = p.tokens, c.k
    assert tuple(a["workspace13"].shape) == (m * topk, max(2 * c.I, c.H))  # workspace_shapes
    assert tuple(a["workspace2"].shape) == (m * topk, c.I) and a["workspace13"].dtype == torch.bfloat16
    assert a["w1_blockscale"].dtype == torch.float8_e4m3fn  # scales_swizzled
    assert tuple(a["w1_blockscale"].shape) == (c.E, _align(2 * c.I, 128), _align(c.H // 16, 4))
    assert (a["m"], a["n"], a["k"], a["e"]) == (m, c.I, c.H, c.E)
    assert a["activation"].name == "SILU"


def check_vllm_marlin(calls: Calls, p, out) -> None:
    c = p.config
    prep = calls.one("vllm.model_executor.layers.quantization.utils.marlin_utils_fp4:prepare_nvfp4_moe_layer_for_marlin")
    layer = prep["layer"]
    assert (layer.num_experts, layer.hidden_size, layer.intermediate_size_per_partition) == (c.E, c.H, c.I)
    assert layer.params_dtype == torch.bfloat16  # layer_attrs
    assert prep["w13_scale"].shape == (c.E, 2 * c.I, c.H // 16)  # linear scales for the Marlin repack
    assert tuple(prep["w13_scale_2"].shape) == (c.E,) and prep["is_act_and_mul"] is True
    a = calls.one(*(f"{m}:fused_marlin_moe" for m in vllm_nvfp4._MARLIN_MODULES))
    assert a["topk_weights"].dtype == torch.float32  # topk_weights_fp32
    assert a["hidden_states"].dtype == torch.bfloat16 and a["hidden_states"].is_contiguous()
    assert a["quant_type_id"] == 17 and a["activation"].name == "SILU"


CHECKS = {
    "flashinfer-cutlass": check_flashinfer_cutlass,
    "flashinfer-sm12x-w4a4": lambda c, p, o: check_flashinfer_sm12x(c, p, o, True),
    "flashinfer-sm12x-w4a16": lambda c, p, o: check_flashinfer_sm12x(c, p, o, False),
    "flashinfer-b12x-w4a4": lambda c, p, o: check_flashinfer_b12x(c, p, o, True),
    "flashinfer-b12x-w4a16": lambda c, p, o: check_flashinfer_b12x(c, p, o, False),
    "vllm-cutlass-fp4": check_vllm_cutlass,
    "vllm-marlin": check_vllm_marlin,
}


def _drive(monkeypatch, backend, dist: str, version: str, seed: int, preset: str = "tiny"):
    record = load_record(dist, version)
    calls = install_standins(monkeypatch, record)
    p = make_moe_problem(preset, tokens=8, seed=seed, device="cpu")
    out = torch.full((p.tokens, p.config.H), -(2.0 ** 127), dtype=backend.out_dtype)
    notes = backend.run(p, out)
    return calls, p, out, notes


# ----------------------------------------------------------------------------- tests


def test_every_adapter_declares_its_api():
    claims = adapter_claims()
    assert set(claims) == ADAPTERS
    for name, (_, claim) in claims.items():
        backend = all_backends()[name]
        assert backend.verified is False and "unverified on SM120 hardware" in backend.summary
        assert "Unverified on SM120 hardware" in sys.modules[type(backend).__module__].__doc__
        assert claim.checked and set(_flat(claim.calls)) <= {t.key for t in TARGETS[claim.dist]}
        assert set(claim.facts) <= {f.id for f in FACTS[claim.dist]}


@pytest.mark.parametrize("name,version", _cases())
def test_claimed_versions_are_recorded_with_every_call_and_fact(name, version):
    _, claim = adapter_claims()[name]
    rec = load_record(claim.dist, version)
    assert rec["dist"] == claim.dist and rec["version"] == version
    assert len(rec["sha256"]) == 64 and rec["wheel"].endswith(".whl") and rec["command"].startswith(("python -m ", "sm120lab "))
    for group in claim.calls:
        keys = (group,) if isinstance(group, str) else group
        assert any(rec["targets"][k]["found"] for k in keys), f"{name} calls {keys}, absent in {claim.dist} {version}"
    for fid in claim.facts:
        if fid not in claim.optional_facts:
            assert rec["facts"][fid]["found"], f"{name} relies on {fid}, absent in {claim.dist} {version}"
            assert rec["facts"][fid]["line"] >= 1


@pytest.mark.parametrize("name,version", _cases())
def test_adapter_calls_bind_to_the_recorded_signatures(monkeypatch, seed, name, version):
    """The adapter's real run() on CPU, against stand-ins carrying the recorded signatures."""
    backend = all_backends()[name]
    calls, p, out, notes = _drive(monkeypatch, backend, backend.api.dist, version, seed)
    called = set(calls.by_key)
    targets = load_record(backend.api.dist, version)["targets"]
    functions = {k for k in _flat(backend.api.calls) if targets[k]["found"] and targets[k]["kind"] == "function"}
    assert functions <= called, f"recorded calls never made: {functions - called}"
    CHECKS[name](calls, p, out)
    assert bool((out == 1.0).all()), "the adapter did not deliver the op's result into out"
    assert notes[backend.api.dist] == version and notes["api_checked"] is True
    assert notes["verified_on_sm120"] is False


def test_flashinfer_cutlass_passes_nvfp4_4over6_only_where_it_exists(monkeypatch, seed):
    """0.7.x pins the standard NVFP4 recipe (the env var would otherwise change it); 0.6.x has no such kwarg."""
    backend = all_backends()["flashinfer-cutlass"]
    for version, expect in (("0.6.5", False), ("0.7.4", True)):
        calls, *_ = _drive(monkeypatch, backend, "flashinfer-python", version, seed)
        a = calls.one("flashinfer.fused_moe:cutlass_fused_moe")
        assert ("nvfp4_4over6" in a) is expect
        if expect:
            assert a["nvfp4_4over6"] is None


# ---- mutation checks: a wrong adapter must fail here


def test_mutation_extra_kwarg_is_caught(monkeypatch, seed):
    """Passing 0.7.x's nvfp4_4over6 to FlashInfer 0.6.5 (a kwarg it does not take) fails the bind."""
    monkeypatch.setattr(flashinfer_cutlass, "version_kwargs", lambda v: {"nvfp4_4over6": None})
    with pytest.raises(TypeError, match="nvfp4_4over6"):
        _drive(monkeypatch, all_backends()["flashinfer-cutlass"], "flashinfer-python", "0.6.5", seed)


def test_mutation_missing_required_argument_is_caught(monkeypatch, seed):
    real = flashinfer_cutlass.pack_cutlass_fused_moe_nvfp4
    monkeypatch.setattr(flashinfer_cutlass, "pack_cutlass_fused_moe_nvfp4",
                        lambda p: {k: v for k, v in real(p).items() if k != "quant_scales"})
    with pytest.raises(TypeError, match="quant_scales"):
        _drive(monkeypatch, all_backends()["flashinfer-cutlass"], "flashinfer-python", "0.7.4", seed)


def test_mutation_old_vllm_marlin_kwarg_is_caught(monkeypatch, seed):
    """The pre-0.34 adapter passed gating_output= to fused_marlin_moe; vLLM 0.34.0 has no such parameter."""

    class OldMarlin(vllm_nvfp4.VllmMarlin):
        def run(self, problem, out):
            from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe

            fused_marlin_moe(hidden_states=problem.hidden, w1=None, w2=None, bias1=None, bias2=None, w1_scale=None,
                             w2_scale=None, gating_output=None, topk_weights=None, topk_ids=None, quant_type_id=0)

    with pytest.raises(TypeError, match="gating_output"):
        _drive(monkeypatch, OldMarlin(), "vllm", "0.34.0", seed)


def test_mutation_old_vllm_import_path_is_caught(monkeypatch, seed):
    """vLLM 0.34.0 moved the MoE kernels to fused_moe/experts/; the old module path no longer imports."""

    class OldCutlass(vllm_nvfp4.VllmCutlassFp4):
        def run(self, problem, out):
            from vllm.model_executor.layers.fused_moe.cutlass_moe import cutlass_moe_fp4  # noqa: F401

    with pytest.raises(ImportError):
        _drive(monkeypatch, OldCutlass(), "vllm", "0.34.0", seed)


def test_mutation_sm12x_on_flashinfer_065_is_caught(monkeypatch, seed):
    """The SM12x runners do not exist in 0.6.5: the import fails and the version check skips."""
    backend = all_backends()["flashinfer-sm12x-w4a4"]
    with pytest.raises(ImportError):
        _drive(monkeypatch, backend, "flashinfer-python", "0.6.5", seed)
    assert "older than 0.7.4" in backend.version_skip_reason("0.6.5")


def test_layout_checks_catch_a_wrong_gate_up_order(monkeypatch, seed):
    """The fact checks are not vacuous: [gate; up] handed to SM12x prepare_weights is caught."""
    monkeypatch.setattr(_packing, "w31", lambda q: (q.data.contiguous(), q.linear_scale().contiguous()))
    backend = all_backends()["flashinfer-sm12x-w4a16"]
    calls, p, out, _ = _drive(monkeypatch, backend, "flashinfer-python", "0.7.4", seed)
    with pytest.raises(AssertionError):
        check_flashinfer_sm12x(calls, p, out, False)


@pytest.mark.parametrize("name", ["flashinfer-b12x-w4a4", "flashinfer-b12x-w4a16"])
def test_mutation_b12x_on_flashinfer_065_is_caught(monkeypatch, seed, name):
    """The b12x configs do not exist in 0.6.5: the import fails and the version check skips."""
    backend = all_backends()[name]
    with pytest.raises(ImportError):
        _drive(monkeypatch, backend, "flashinfer-python", "0.6.5", seed)
    assert "older than 0.7.4" in backend.version_skip_reason("0.6.5")


@pytest.mark.parametrize("w4a4", [True, False])
def test_b12x_layout_checks_catch_a_wrong_gate_up_order(monkeypatch, seed, w4a4):
    """[gate; up] handed to b12x prepare_weights is caught by the layout check."""
    monkeypatch.setattr(_packing, "w31", lambda q: (q.data.contiguous(), q.linear_scale().contiguous()))
    monkeypatch.setattr(_packing, "up_gate_order", lambda t: t.contiguous())
    name = "flashinfer-b12x-w4a4" if w4a4 else "flashinfer-b12x-w4a16"
    calls, p, out, _ = _drive(monkeypatch, all_backends()[name], "flashinfer-python", "0.7.4", seed)
    with pytest.raises(AssertionError):
        check_flashinfer_b12x(calls, p, out, w4a4)


def test_b12x_layout_check_catches_linear_scales(monkeypatch, seed):
    """b12x W4A16 wants swizzled block scales: linear ones handed over are caught."""
    monkeypatch.setattr(_packing, "swizzled", lambda s: s.contiguous())
    calls, p, out, _ = _drive(monkeypatch, all_backends()["flashinfer-b12x-w4a16"], "flashinfer-python", "0.7.4",
                              seed)
    with pytest.raises(AssertionError):
        check_flashinfer_b12x(calls, p, out, False)


def test_b12x_rejects_shapes_the_runners_do_not_take():
    from types import SimpleNamespace

    from sm120lab.moe.backends.flashinfer_b12x import check_shape

    check_shape(SimpleNamespace(H=4096, I=1024))
    with pytest.raises(ValueError, match="multiples of 16"):
        check_shape(SimpleNamespace(H=4096, I=1000))


def test_layout_checks_catch_a_one_element_activation_scale(monkeypatch, seed):
    """The adapter's first bug found here: quant_scales[0] of shape [1] fails FlashInfer's binding for E > 1."""
    real = _packing.activation_gscale
    monkeypatch.setattr(_packing, "activation_gscale", lambda a, e=None: real(a, e).reshape(-1))
    calls, p, out, _ = _drive(monkeypatch, all_backends()["flashinfer-cutlass"], "flashinfer-python", "0.7.4", seed)
    with pytest.raises(AssertionError, match=r"quant_scales\[0\]"):
        check_flashinfer_cutlass(calls, p, out)


def test_skip_reasons_are_one_line_and_say_unverified(monkeypatch):
    for name in ADAPTERS:
        backend = all_backends()[name]
        reason = backend.skip_reason("cpu")
        assert reason and "\n" not in reason and "unverified on SM120 hardware" in reason
    vm = all_backends()["vllm-marlin"]
    assert "0.34.0" in vm.version_skip_reason("0.11.0")
    assert vm.version_skip_reason("0.34.0") is None and vm.version_skip_reason("0.35.1") is None
    assert vm.version_skip_reason(None) == "vllm is not installed"
    assert all_backends()["flashinfer-cutlass"].version_skip_reason("0.5.3") is not None


def test_installed_version_falls_back_to_the_module():
    assert _packing.installed_version("no-such-dist-sm120lab") is None
    assert _packing.installed_version("no-such-dist-sm120lab", "torch") == str(torch.__version__)
    assert _packing.installed_version("no-such-dist-sm120lab", "no_such_module_sm120lab") is None


def test_sm12x_rejects_shapes_the_runners_do_not_take():
    from sm120lab.moe.backends.flashinfer_sm12x import check_shape

    check_shape(types.SimpleNamespace(H=256, I=128))
    with pytest.raises(ValueError, match="hidden_size % 128"):
        check_shape(types.SimpleNamespace(H=192, I=128))


def test_index_is_current():
    """data/api/index.json (cited by the README and recommend) matches the records and the adapters."""
    on_disk = json.loads((api_dir() / "index.json").read_text())
    assert on_disk == json.loads(json.dumps(build_index())), \
        "stale: run sm120lab dev api-check index"
    assert on_disk["packages"]["flashinfer-python"].keys() >= {"0.6.5", "0.7.4"}


def test_dev_api_check_index_command(tmp_path, capsys):
    """``sm120lab dev api-check index`` writes the same index from the same records; its choices are TARGETS'."""
    import shutil

    from sm120lab.cli import main as cli_main
    from sm120lab.commands.dev import API_DISTS

    assert sorted(API_DISTS) == sorted(TARGETS)
    for p in api_dir().glob("*.json"):
        if p.name != "index.json":
            shutil.copy(p, tmp_path / p.name)
    assert cli_main(["dev", "api-check", "index", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "index.json").read_text()) == json.loads((api_dir() / "index.json").read_text())
    with pytest.raises(SystemExit):
        cli_main(["dev", "api-check", "extract", "no-such-dist", "1.0"])


# ---- the extractor itself, on a synthetic wheel whose real inspect.signature we can compare

_MINI = {
    "mini/__init__.py": "from .impl import Conf, Mode, Runner, run  # noqa\nfrom .impl import run as alias  # noqa\n",
    "mini/impl.py": '''
from dataclasses import KW_ONLY, dataclass, field
from enum import Enum
from typing import ClassVar


class Mode(Enum):
    A = 0
    B = 1


@dataclass(frozen=True)
class Base:
    tag: ClassVar[int] = 3
    x: int
    y: int = 2


@dataclass(frozen=True)
class Conf(Base):
    z: float = 1.0
    _: KW_ONLY
    w: int = 0
    hidden: int = field(default=0, init=False)
    late: list = field(default_factory=list, kw_only=True)

    @staticmethod
    def prepare(a, b, /, c, *, d=1, **kw):
        return None


class Runner:
    def __init__(self, config, device=None):
        pass

    def __call__(self, act, weights):
        return None


def run(a, b=1, *args, c, d=None, **kwargs) -> int:
    return 0
''',
}


def test_extractor_matches_inspect_signature_on_a_synthetic_wheel(tmp_path, monkeypatch):
    whl = tmp_path / "mini-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for path, text in _MINI.items():
            zf.writestr(path, text)
    (tmp_path / "src" / "mini").mkdir(parents=True)
    for path, text in _MINI.items():
        (tmp_path / "src" / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    import importlib

    mini = importlib.import_module("mini")
    targets = tuple(Target("mini", n) for n in ("run", "alias", "Conf", "Conf.prepare", "Runner", "Runner.__call__",
                                                "Mode", "missing"))
    monkeypatch.setitem(TARGETS, "mini", targets)
    monkeypatch.setitem(FACTS, "mini", ())
    rec = extract(whl, "mini", "1.0", "test")

    def shape(sig):
        return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in sig.parameters.values()]

    for name, obj in (("run", mini.run), ("alias", mini.run), ("Conf", mini.Conf), ("Conf.prepare", mini.Conf.prepare),
                      ("Runner", mini.Runner), ("Runner.__call__", mini.Runner.__call__)):
        got = signature_from_record(rec["targets"][f"mini:{name}"])
        real = inspect.signature(obj)
        if name == "Runner.__call__":  # unbound: drop self
            real = real.replace(parameters=list(real.parameters.values())[1:])
        assert shape(got) == shape(real), name
    assert rec["targets"]["mini:run"]["exported_by"] == "mini/__init__.py:1"
    assert rec["targets"]["mini:Mode"]["members"] == ["A", "B"]
    assert rec["targets"]["mini:missing"]["found"] is False


@pytest.mark.network
def test_recorded_flashinfer_065_matches_a_fresh_extraction():
    """Re-read the small 0.6.5 wheel from PyPI (cached after the first download) and compare."""
    from sm120lab.toolchains.pypi_wheels import download_wheel

    whl = download_wheel("flashinfer-python", "0.6.5")
    fresh = extract(Path(whl), "flashinfer-python", "0.6.5", "x")
    recorded = load_record("flashinfer-python", "0.6.5")
    assert fresh["sha256"] == recorded["sha256"]
    assert fresh["targets"] == recorded["targets"] and fresh["facts"] == recorded["facts"]


# ---- with the REAL FlashInfer importable (a GPU box, or PYTHONPATH=<unpacked wheel>): its own Python-side
# ---- validation runs on CPU tensors; only the GPU launch is replaced


def _real_flashinfer_version():
    try:
        import flashinfer.fused_moe  # noqa: F401
    except Exception:  # noqa: BLE001 - absent, or present but unimportable here
        return None
    return _packing.installed_version("flashinfer-python", "flashinfer")


_REAL_FI = _real_flashinfer_version()
needs_real_flashinfer = pytest.mark.skipif(_REAL_FI is None, reason="flashinfer is not importable here")


@needs_real_flashinfer
def test_flashinfer_cutlass_against_the_real_package(monkeypatch, seed):
    """The real ``cutlass_fused_moe`` accepts the call and checks ``output`` (shape, dtype, device)."""
    import contextlib

    import flashinfer.fused_moe.core as core

    launched = {}

    class Module:
        def cutlass_fused_moe(self, *args, **kwargs):
            launched["args"], launched["kwargs"] = args, kwargs
            args[0].fill_(1.0)
            return [args[0]]

    monkeypatch.setattr(core, "get_cutlass_fused_moe_module", lambda *a, **k: Module())
    if hasattr(core, "get_compute_capability"):
        monkeypatch.setattr(core, "get_compute_capability", lambda device: (12, 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (12, 0))
    monkeypatch.setattr(core, "device_support_pdl", lambda device: False)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    p = make_moe_problem("tiny", tokens=8, seed=seed, device="cpu")
    out = torch.full((p.tokens, p.config.H), -(2.0 ** 127), dtype=torch.bfloat16)
    notes = all_backends()["flashinfer-cutlass"].run(p, out)
    assert launched and bool((out == 1.0).all()) and notes["flashinfer-python"] == _REAL_FI
    bad = torch.empty(p.tokens, p.config.H, dtype=torch.float16)
    with pytest.raises((ValueError, RuntimeError, AssertionError)):  # FlashInfer rejects a wrong output dtype
        all_backends()["flashinfer-cutlass"].run(p, bad)


@needs_real_flashinfer
@pytest.mark.parametrize("name", ["flashinfer-sm12x-w4a4", "flashinfer-sm12x-w4a16"])
def test_flashinfer_sm12x_against_the_real_package(monkeypatch, seed, name):
    """Real prepare_weights, configs and the runner's own ``pack_inputs`` validation; no kernel launch."""
    import flashinfer.fused_moe as fm

    if _packing._version_tuple(_REAL_FI) < (0, 7, 4):
        pytest.skip(f"FlashInfer {_REAL_FI} has no SM12x runners")
    runners = {"SM12xNvfp4Config": fm.SM12xNvfp4Runner, "SM12xNvfp4Bf16Config": fm.SM12xNvfp4Bf16Runner}
    packed = {}

    class Layer:  # MoELayer needs an SM12x GPU to pick a runner; the runner's input checks run for real
        def __init__(self, config, device=None):
            self.config = config

        def __call__(self, act, pack):
            runner = runners[type(self.config.backend.candidates[0]).__name__](self.config, torch.device("cpu"))
            runner._built = True
            packed["inputs"] = runner.pack_inputs(act, pack)
            return torch.ones(act.hidden_states_q.shape, dtype=torch.bfloat16)

    monkeypatch.setattr(fm, "MoELayer", Layer)
    p = make_moe_problem("small", tokens=8, seed=seed, device="cpu")
    out = torch.full((p.tokens, p.config.H), -(2.0 ** 127), dtype=torch.bfloat16)
    all_backends()[name].run(p, out)
    assert len(packed["inputs"]) == (12 if name.endswith("w4a4") else 10) and bool((out == 1.0).all())

