"""The Python APIs the FlashInfer / vLLM MoE adapters call, read from the real wheels (no import, no GPU).

The adapters in :mod:`sm120lab.moe.backends` (``flashinfer_cutlass``, ``flashinfer_sm12x``, ``vllm_nvfp4``) cannot run
here: they need an SM100/SM12x GPU. What *can* be checked on any machine is that each call they make
matches the real function: its parameter names, kinds and required arguments, and the argument-layout
facts (dtypes, shapes, orders) the packing relies on. This module reads those from a wheel's sources
with :mod:`ast` (nothing is imported, so no CUDA and no dependencies are needed) and writes one JSON
record per package version under ``data/api/``:

- ``targets``: for every ``module:attribute`` an adapter uses, where it is defined (``file:line``),
  which file exports it, and its signature (``params``: name, kind, default/annotation source text).
  Classes record their ``__init__`` (dataclass fields included) and their attribute names; enums
  their members.
- ``facts``: argument-layout facts, each anchored by an exact text in a wheel file, with the line
  it was found at (``found: false`` when a version lacks it).

``tests/test_backend_api.py`` rebuilds ``inspect.Signature`` objects from these records (see
:func:`signature_from_record`), installs stand-in modules whose callables ``bind()`` every call,
and drives each adapter on CPU tensors for every version it claims (``ApiClaim.checked``).

Command line (writes ``data/api/<dist>-<version>.json`` and refreshes ``data/api/index.json``)::

    sm120lab dev api-check extract flashinfer-python 0.7.4 [--wheel PATH]
    PYTHONPATH=<unpacked wheel>:<its light deps> \
        sm120lab dev api-check crosscheck flashinfer-python 0.7.4
    sm120lab dev api-check index

Without ``--wheel`` the wheel is downloaded once into the cache (:mod:`sm120lab.toolchains.pypi_wheels`).
``crosscheck`` imports the package and compares every recorded signature with
``inspect.signature`` (stored under ``import_check``; exit 1 on any difference). FlashInfer imports
on a CPU-only machine with four light dependencies (apache-tvm-ffi, einops, tabulate, nvidia-ml-py);
vLLM does not, so its records rest on the ast reading alone.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..moe.backends.api_claim import ApiClaim

SCHEMA = 1


@dataclass(frozen=True)
class Target:
    """One attribute an adapter uses: ``from <module> import <name>`` (``name`` may be dotted,
    e.g. ``SM12xNvfp4Config.prepare_weights``)."""

    module: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


@dataclass(frozen=True)
class Fact:
    """An argument-layout fact an adapter relies on, anchored by exact text in a wheel file.

    ``file`` / ``anchor`` may be tuples of alternatives (a file moved, a line was reworded between
    versions): the first file the wheel has and the first anchor found in it are recorded.
    ``after``: an earlier anchor in the same file that must precede ``anchor`` (disambiguates
    repeated texts, e.g. the NVFP4 branch of a binding's scale checks).
    """

    id: str
    file: str | tuple[str, ...]
    anchor: str | tuple[str, ...]
    claim: str
    after: str | None = None


_FI = "flashinfer.fused_moe"
_VM = "vllm.model_executor.layers"

TARGETS: dict[str, tuple[Target, ...]] = {
    "flashinfer-python": tuple(Target(m, n) for m, n in [
        (_FI, "cutlass_fused_moe"),
        (_FI, "SM12xNvfp4Config"), (_FI, "SM12xNvfp4Config.prepare_weights"),
        (_FI, "SM12xNvfp4Bf16Config"), (_FI, "SM12xNvfp4Bf16Config.prepare_weights"),
        (_FI, "B12xNvfp4Config"), (_FI, "B12xNvfp4Config.prepare_weights"),
        (_FI, "B12xW4A16Config"), (_FI, "B12xW4A16Config.prepare_weights"),
        (_FI, "MoEWeightPack"), (_FI, "MoEWeightPack.prepare_for"),
        (_FI, "MoEActivationPack"), (_FI, "MoEConfig"), (_FI, "RoutingConfig"), (_FI, "QuantConfig"),
        (_FI, "QuantFormat"), (_FI, "ExpertConfig"), (_FI, "SwiGLU"), (_FI, "BackendOptions"),
        (_FI, "MoELayer"), (_FI, "MoELayer.__call__"),
    ]),
    "vllm": tuple(Target(m, n) for m, n in [
        (f"{_VM}.fused_moe.experts.cutlass_moe", "run_cutlass_moe_fp4"),
        (f"{_VM}.fused_moe.cutlass_moe", "run_cutlass_moe_fp4"),
        (f"{_VM}.fused_moe.experts.marlin_moe", "fused_marlin_moe"),
        (f"{_VM}.fused_moe.fused_marlin_moe", "fused_marlin_moe"),
        (f"{_VM}.fused_moe.activation", "MoEActivation"),
        (f"{_VM}.quantization.utils.marlin_utils_fp4", "prepare_nvfp4_moe_layer_for_marlin"),
        ("vllm.scalar_type", "scalar_types"),
        ("vllm.scalar_type", "ScalarType.id"),
    ]),
}

_CORE = "flashinfer/fused_moe/core.py"
_BIND = "flashinfer/data/csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu"
_QU = "flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/quantization_utils.cuh"
_API = "flashinfer/fused_moe/api.py"
_PREP = "flashinfer/fused_moe/prepare.py"
_RUN = "flashinfer/fused_moe/runners.py"
_W4A16 = "flashinfer/fused_moe/cute_dsl/blackwell_sm12x/moe_w4a16_prepare.py"
_VCUT = ("vllm/model_executor/layers/fused_moe/experts/cutlass_moe.py",
         "vllm/model_executor/layers/fused_moe/cutlass_moe.py")
_VMAR = ("vllm/model_executor/layers/fused_moe/experts/marlin_moe.py",
         "vllm/model_executor/layers/fused_moe/fused_marlin_moe.py")
_VMU = "vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py"
_VORA = "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py"
_VFI = "vllm/model_executor/layers/quantization/utils/flashinfer_fp4_moe.py"

FACTS: dict[str, tuple[Fact, ...]] = {
    "flashinfer-python": (
        Fact("fi.cutlass.nvfp4_is_int64_weights", _BIND, "return mWeightDtype == dl_int64 &&",
             "the binding takes the NVFP4 path when fc1_expert_weights is int64 (packed FP4 viewed as int64)"),
        Fact("fi.cutlass.quant_scales_6", _BIND, "Expecting 6 quant scales for nvfp4 quantization",
             "NVFP4 quant_scales has 6 entries: a1 gs, w1 block scales, w1 alpha, a2 gs, w2 block scales, w2 alpha"),
        Fact("fi.cutlass.quant_scales_order", _CORE, "- gemm1 activation global scale",
             "quant_scales order (docstring): gemm1 act global, gemm1 weight block scales, gemm1 dequant, "
             "gemm2 act global, gemm2 weight block scales, gemm2 dequant"),
        Fact("fi.cutlass.block_scales_int32", _BIND, "CHECK_INPUT_TYPE(fc1_weight_block, dl_int32);",
             "NVFP4 weight block scales are passed as int32 (4 E4M3 bytes each)",
             after="Expecting 6 quant scales for nvfp4 quantization"),
        Fact("fi.cutlass.fc1_block_shape", _BIND,
             "fc1 weight block size must be (num_experts_on_rank, inter_size * 2, hidden_size // ",
             "gated fc1 block scales are [E, align64(I)*2, align64(H)/64] int32 (128x4-swizzled, padded)",
             after="Expecting 6 quant scales for nvfp4 quantization"),
        Fact("fi.cutlass.act_global_scalar_or_E", _BIND, "fc1 act global must be scalar or (num_experts_on_rank,)",
             "the NVFP4 activation global scales (quant_scales[0], [3]) are 0-d or [E] fp32; a [1] tensor fails "
             "for E > 1", after="Expecting 6 quant scales for nvfp4 quantization"),
        Fact("fi.cutlass.inner_dim_16", _BIND, "mInnerDimMultiplier = 16;  // 16 FP4 -> 1 LONG",
             "int64 weights hold 16 FP4 values per element: fc1 [E, 2I, H/16], fc2 [E, H, I/16] as int64"),
        Fact("fi.cutlass.fc1_twice_fc2", _BIND, "fc1_expert_weights inter size must be 2 times fc2_expert_weights",
             "gated fc1 has 2x the intermediate rows of fc2 ([up; gate] stacked)"),
        Fact("fi.cutlass.fc1_global_per_expert", _BIND, "fc1 global size must be (num_experts_on_rank,)",
             "the gemm1 dequant scale (alpha) is [E] fp32"),
        Fact("fi.cutlass.output_checked", _CORE, 'output, output_shape, output_dtype, input.device, "output"',
             "a caller's output buffer must have shape [T, H], dtype output_dtype and input's device"),
        Fact("fi.cutlass.act_global_encode_side", _QU,
             "auto SFValue = SFScaleVal * (vecMax * reciprocal_approximate_ftz(6.0f));",
             "the activation global scale multiplies amax/6 into the E4M3 block scale: it is the encode-side "
             "gs = 448*6/amax (1/input_scale)"),
        Fact("fi.cutlass.unified_scale_rows", _RUN, "round_up(gemm1_rows, 128),",
             "0.7.x unified CUTLASS NVFP4 runner expects w1 block scales [E, round_up(2I, 128), round_up(H/16, 4)]: "
             "the whole [up; gate] matrix swizzled at once, then viewed as int32 for the flat call"),
        Fact("fi.cutlass.nvfp4_4over6_kwarg", _CORE, "nvfp4_4over6: Optional[NVFP44Over6Config] = _UNSET,",
             "0.7.x: nvfp4_4over6 (keyword-only); omitted reads FLASHINFER_NVFP4_4OVER6* env vars, "
             "None pins the standard NVFP4 recipe"),
        Fact("fi.moe.w1_up_gate", _API, "``[up, gate]`` order",
             "every XxxConfig.prepare_weights takes w1 [E, 2I, H] with rows in [up; gate] order"),
        Fact("fi.cutile.swaps_to_gate_up", _PREP, "up, gate = w1_fp4.chunk(2, dim=1)",
             "prepare_cutile_nvfp4_weights splits w1 as [up; gate] and stores [gate; up]"),
        Fact("fi.cutile.dtypes", _PREP, 'raise TypeError("cuTile NVFP4 block scales must use torch.float8_e4m3fn.")',
             "w1/w2 packed uint8, LINEAR block scales float8_e4m3fn [E, N, K/16], global scales float32"),
        Fact("fi.cutile.w2_global_shape", _PREP, 'raise ValueError("cuTile NVFP4 GEMM2 global scale must have shape [E].")',
             "weight global scales are [E] ([E] or [E, 2] for gated w1)"),
        Fact("fi.cutile.modelopt_decode_side", _PREP, 'if source == "compressed_tensors":',
             "compressed_tensors global scales are inverted; modelopt ones (weight_scale_2 = 1/gs) are used as is"),
        Fact("fi.sm12x.input_global_scale", _RUN, "must be a one-element FP32 tensor, got",
             "view keys w1_input_global_scale / w2_input_global_scale: one-element fp32 on the layer's device"),
        Fact("fi.sm12x.cuda13", _RUN, 'raise ValueError("SM12x NVFP4 requires CUDA 13 or later.")',
             "SM12x NVFP4 runners need CUDA 13 and the CuTe DSL package (import name cutlass), on SM120/SM121"),
        Fact("fi.sm12x.hidden_128", _RUN, "requires hidden_size % 128 == 0",
             "SM12x NVFP4 runners need hidden_size % 128 == 0"),
        Fact("fi.sm12x.inter_64", _RUN, "SM12x NVFP4 requires intermediate_size % 64 == 0",
             "SM12x NVFP4 W4A4 runner needs intermediate_size % 64 == 0"),
        Fact("fi.sm12x.backend_key", _RUN, 'backend_key = "sm12x_nvfp4"',
             "the W4A4 runner reads the weight view registered under 'sm12x_nvfp4'"),
        Fact("fi.sm12x.backend_key_bf16", _RUN, 'backend_key = "sm12x_nvfp4_bf16"',
             "the W4A16 runner reads the weight view registered under 'sm12x_nvfp4_bf16'"),
        Fact("fi.b12x.backend_key", _RUN, 'backend_key = "b12x_nvfp4"',
             "the b12x W4A4 runner reads the weight view registered under 'b12x_nvfp4'"),
        Fact("fi.b12x.backend_key_w4a16", _RUN, 'backend_key = "b12x_w4a16"',
             "the b12x W4A16 runner reads the weight view registered under 'b12x_w4a16'"),
        Fact("fi.b12x.cuda13_sm12x", _RUN, 'raise ValueError("b12x unified MoE requires CUDA 13 or later.")',
             "the b12x runners need CUDA 13, the CuTe DSL package, and an SM120 or SM121 GPU"),
        Fact("fi.b12x.bf16_weights", _PREP, 'raise TypeError("b12x canonical weights must use torch.bfloat16.")',
             "B12xNvfp4Config.prepare_weights takes bf16 w1 [E, 2I, H] ([up; gate]) and w2 [E, H, I] and "
             "quantizes them itself"),
        Fact("fi.b12x.requantized_global_one", _PREP,
             "global_scale=torch.ones(1, device=weights.device, dtype=torch.float32),",
             "b12x NVFP4 weights are requantized with a global scale of 1 (E4M3 block scales only); the "
             "view's alphas and fc2_input_scale are ones", after="def _quantize_b12x_expert_weights("),
        Fact("fi.b12x.dims_16", _PREP, 'raise ValueError("b12x NVFP4 dimensions must be multiples of 16.")',
             "b12x NVFP4 needs hidden_size and intermediate_size multiples of 16"),
        Fact("fi.b12x.w4a16_swizzled_scales", _W4A16, "The per-block scales are the normal NVFP4 K/16 scale grid in swizzled",
             "b12x W4A16 takes the K/16 E4M3 block scales in 128x4-swizzled storage"),
        Fact("fi.b12x.w4a16_modelopt_global", _W4A16, "The global scales are raw ModelOpt weight global scales",
             "b12x W4A16 takes ModelOpt weight global scales as is (decode-side weight_scale_2 = 1/gs)"),
        Fact("fi.b12x.w4a16_w13_is_up_gate", _W4A16, '"up_gate": "w13",',
             "b12x W4A16's default w13 layout 'w13' is [up; gate] (alias 'up_gate')"),
    ),
    "vllm": (
        Fact("vllm.cutlass.uint8_weights", _VCUT, 'assert w1_fp4.dtype == torch.uint8, "weight 1 must be uint8"',
             "run_cutlass_moe_fp4 takes packed FP4 weights as uint8 [E, 2n, k/2] / [E, k, n/2]"),
        Fact("vllm.cutlass.a_gscale_per_expert", _VCUT, "a1_gscale: Activation scale per expert: [e]  (float32)",
             "a1_gscale / a2_gscale are per-expert [E] fp32 (encode-side)"),
        Fact("vllm.cutlass.input_dtype", _VCUT, 'assert a.dtype in [torch.half, torch.bfloat16], "Invalid input dtype"',
             "activations are fp16/bf16 [m, k]; the output dtype equals a.dtype"),
        Fact("vllm.cutlass.workspace_shapes", _VCUT, "workspace1 = (M * topk, max(2 * N, K))",
             "workspace13 holds (m*topk, max(2n, k)), workspace2 (m*topk, n), in the activation dtype"),
        Fact("vllm.cutlass.scales_swizzled", _VFI, "w13_scale = swizzle_blockscale(w13_scale)",
             "vLLM's CUTLASS path swizzles the weight block scales (128x4) before the kernel"),
        Fact("vllm.cutlass.w13_gate_up", _VFI, "# Reorder [w1, w3] to [w3, w1] for FI NVFP4 MoE kernels.",
             "only the FlashInfer backends reorder w13; vLLM CUTLASS keeps [w1 (gate); w3 (up)]"),
        Fact("vllm.cutlass.alphas", _VORA, ("a1_gscale = 1.0 / a13_scale", "a1_gscale=(1.0 / a13_scale),"),
             "a*_gscale = 1/input_scale (encode-side); g*_alphas = weight_scale_2 * input_scale"),
        Fact("vllm.marlin.layer_attrs", _VMU, "N = layer.intermediate_size_per_partition",
             "prepare_nvfp4_moe_layer_for_marlin reads layer.num_experts, hidden_size, "
             "intermediate_size_per_partition and params_dtype"),
        Fact("vllm.marlin.global_scale_is_weight_scale_2", _VORA, "g1_alphas=w13_scale_2,",
             "vLLM's Marlin NVFP4 quant config passes the (Marlin-processed) ModelOpt weight_scale_2 = 1/gs as "
             "g1_alphas (the first such line is the MARLIN branch)"),
        Fact("vllm.marlin.experts_global_scale1", _VMAR, "global_scale1=self.g1_alphas,",
             "MarlinExperts hands g1_alphas to fused_marlin_moe as global_scale1"),
        Fact("vllm.marlin.topk_weights_fp32", _VMAR, "assert topk_weights.dtype == torch.float32",
             "fused_marlin_moe needs fp32 topk_weights and contiguous bf16/fp16 hidden states"),
    ),
}


# ----------------------------------------------------------------------------- reading a wheel


class WheelSource:
    """Text files of one wheel, read from the zip on demand."""

    def __init__(self, wheel: Path):
        self.wheel = Path(wheel)
        self._zip = zipfile.ZipFile(self.wheel)
        self._names = set(self._zip.namelist())
        self._trees: dict[str, ast.Module] = {}

    def has(self, path: str) -> bool:
        return path in self._names

    def text(self, path: str) -> str:
        return self._zip.read(path).decode("utf-8", errors="replace")

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self._names:
                return cand
        return None


def _resolve_relative(path: str, node: ast.ImportFrom) -> str:
    """Absolute module of ``from <node.module> import ...`` written in file ``path``."""
    if not node.level:
        return node.module or ""
    parts = path.rsplit("/", 1)[0].split("/")  # the package the file belongs to
    parts = parts[: len(parts) - (node.level - 1)]
    base = ".".join(parts)
    return f"{base}.{node.module}" if node.module else base


def _walk_module_level(body):
    """Top-level statements, descending into if/try blocks (conditional definitions)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _walk_module_level(stmt.body)
            yield from _walk_module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
                yield from _walk_module_level(block)


def find_definition(src: WheelSource, module: str, name: str, _depth: int = 0):
    """(file, ast node, exported_by 'file:line' or None) of ``module.name``, following re-exports."""
    path = src.module_file(module)
    if path is None or _depth > 8:
        return None
    tree = src.tree(path)
    for stmt in _walk_module_level(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return path, stmt, None
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return path, stmt, None
    for stmt in _walk_module_level(tree.body):
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    target_mod = _resolve_relative(path, stmt)
                    found = find_definition(src, target_mod, alias.name, _depth + 1)
                    if found is None:  # ``from pkg import submodule``: not a definition we record
                        continue
                    file, node, _ = found
                    return file, node, f"{path}:{stmt.lineno}"
    return None


def _text(node) -> str | None:
    return None if node is None else ast.unparse(node)


def _decorators(node) -> list[str]:
    return [ast.unparse(d) for d in getattr(node, "decorator_list", [])]


def _params_of_function(node: ast.FunctionDef | ast.AsyncFunctionDef, *, drop_first: bool) -> list[dict]:
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append({"name": arg.arg, "kind": kind, "default": _text(default), "annotation": _text(arg.annotation)})
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "default": None,
                    "annotation": _text(a.vararg.annotation)})
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": _text(default),
                    "annotation": _text(arg.annotation)})
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "default": None,
                    "annotation": _text(a.kwarg.annotation)})
    if drop_first and out and out[0]["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"):
        out = out[1:]
    return out


def _method_params(node, *, in_class: bool) -> list[dict]:
    decos = _decorators(node)
    drop = in_class and "staticmethod" not in decos
    return _params_of_function(node, drop_first=drop)


def _dataclass_options(node: ast.ClassDef) -> dict | None:
    for d in node.decorator_list:
        fn = d.func if isinstance(d, ast.Call) else d
        name = ast.unparse(fn)
        if name in ("dataclass", "dataclasses.dataclass"):
            opts = {}
            if isinstance(d, ast.Call):
                for kw in d.keywords:
                    if isinstance(kw.value, ast.Constant):
                        opts[kw.arg] = kw.value.value
            return opts
    return None


def _base_classes(src: WheelSource, file: str, node: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
    module = file[:-3].replace("/", ".").removesuffix(".__init__")
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            found = find_definition(src, module, base.id)
            if found and isinstance(found[1], ast.ClassDef):
                out.append((found[0], found[1]))
    return out


def _dataclass_fields(src: WheelSource, file: str, node: ast.ClassDef) -> list[dict]:
    """Fields of a dataclass in ``__init__`` order (bases first; KW_ONLY, ClassVar, init=False)."""
    fields: dict[str, dict] = {}
    for bfile, base in _base_classes(src, file, node):
        if _dataclass_options(base) is not None:
            for f in _dataclass_fields(src, bfile, base):
                fields[f["name"]] = f
    opts = _dataclass_options(node) or {}
    kw_only = bool(opts.get("kw_only", False))
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        ann = ast.unparse(stmt.annotation)
        if ann.split("[")[0].split(".")[-1] == "ClassVar":
            continue
        if ann.split(".")[-1] == "KW_ONLY":
            kw_only = True
            continue
        has_default, init, this_kw = stmt.value is not None, True, kw_only
        default_text = _text(stmt.value)
        if isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value.func).split(".")[-1] == "field":
            kws = {k.arg: k.value for k in stmt.value.keywords}
            has_default = "default" in kws or "default_factory" in kws
            default_text = _text(kws.get("default") or kws.get("default_factory"))
            if isinstance(kws.get("init"), ast.Constant) and kws["init"].value is False:
                init = False
            if isinstance(kws.get("kw_only"), ast.Constant):
                this_kw = bool(kws["kw_only"].value)
        if not init:
            fields.pop(stmt.target.id, None)
            continue
        fields[stmt.target.id] = {"name": stmt.target.id, "kind": "KEYWORD_ONLY" if this_kw else "POSITIONAL_OR_KEYWORD",
                                  "default": default_text if has_default else None, "annotation": ann,
                                  "_has_default": has_default}
    return list(fields.values())


def _class_record(src: WheelSource, file: str, node: ast.ClassDef) -> dict:
    attrs = []
    members = []
    init = None
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            attrs.append(stmt.name)
            if stmt.name == "__init__":
                init = stmt
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    attrs.append(t.id)
                    members.append(t.id)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            attrs.append(stmt.target.id)
    bases = [ast.unparse(b) for b in node.bases]
    rec = {"kind": "class", "bases": bases, "decorators": _decorators(node), "attributes": sorted(set(attrs))}
    if any(b.split(".")[-1] in ("Enum", "IntEnum", "StrEnum", "IntFlag") for b in bases):
        rec["kind"] = "enum"
        rec["members"] = [m for m in members if not m.startswith("_")]
    if init is not None:
        rec["params"] = _params_of_function(init, drop_first=True)
        rec["init_from"] = "__init__"
    elif _dataclass_options(node) is not None:
        flds = _dataclass_fields(src, file, node)
        positional = [f for f in flds if f["kind"] != "KEYWORD_ONLY"]
        keyword = [f for f in flds if f["kind"] == "KEYWORD_ONLY"]
        rec["params"] = [{k: v for k, v in f.items() if not k.startswith("_")} for f in positional + keyword]
        rec["init_from"] = "dataclass fields"
        rec["_has_default"] = {f["name"]: f["_has_default"] for f in flds}
    else:
        for bfile, base in _base_classes(src, file, node):
            inherited = _class_record(src, bfile, base)
            if "params" in inherited:
                rec["params"] = inherited["params"]
                rec["init_from"] = f"{base.name}.{inherited['init_from']}"
                if "_has_default" in inherited:
                    rec["_has_default"] = inherited["_has_default"]
                break
    return rec


def extract_target(src: WheelSource, target: Target) -> dict:
    head, *rest = target.name.split(".")
    found = find_definition(src, target.module, head)
    if found is None:
        where = src.module_file(target.module)
        why = f"module {target.module} not in the wheel" if where is None else f"{head!r} not defined or re-exported by {where}"
        return {"found": False, "reason": why}
    file, node, exported_by = found
    parent_is_class = False
    for part in rest:
        if not isinstance(node, ast.ClassDef):
            return {"found": False, "reason": f"{head} is not a class; cannot look up {part!r}"}
        nxt = None
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == part:
                nxt = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                tg = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in tg):
                    nxt = stmt
        if nxt is None:
            return {"found": False, "reason": f"{node.name} in {file} has no attribute {part!r}"}
        node, parent_is_class = nxt, True
    rec: dict = {"found": True, "file": file, "line": node.lineno, "exported_by": exported_by}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        decos = _decorators(node)
        is_property = any(d.split(".")[-1] in ("property", "cached_property") for d in decos)
        rec.update(kind="property" if is_property else "function", decorators=decos,
                   params=_method_params(node, in_class=parent_is_class), returns=_text(node.returns))
    elif isinstance(node, ast.ClassDef):
        rec.update(_class_record(src, file, node))
        rec.pop("_has_default", None)
    else:
        rec.update(kind="attribute", value=_text(node.value) if node.value is not None else None)
    return rec


def extract_fact(src: WheelSource, fact: Fact) -> dict:
    files = (fact.file,) if isinstance(fact.file, str) else fact.file
    anchors = (fact.anchor,) if isinstance(fact.anchor, str) else fact.anchor
    file = next((f for f in files if src.has(f)), None)
    rec = {"file": file or files[0], "anchor": anchors[0], "claim": fact.claim}
    if file is None:
        return {**rec, "found": False, "reason": f"none of {list(files)} is in the wheel"}
    text = src.text(file)
    start = 0
    if fact.after:
        pos = text.find(fact.after)
        if pos < 0:
            return {**rec, "found": False, "reason": f"anchor-before {fact.after!r} not found"}
        start = pos
        rec["after"] = fact.after
    for anchor in anchors:
        pos = text.find(anchor, start)
        if pos >= 0:
            return {**rec, "anchor": anchor, "found": True, "line": text.count("\n", 0, pos) + 1}
    return {**rec, "found": False, "reason": "anchor not found"}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def extract(wheel: Path, dist: str, version: str, command: str) -> dict:
    """The API record of ``dist==version`` read from ``wheel`` (see the module docstring)."""
    if dist not in TARGETS:
        raise ValueError(f"dist: expected one of {sorted(TARGETS)}, got {dist!r}")
    src = WheelSource(wheel)
    return {
        "schema": SCHEMA,
        "dist": dist,
        "version": version,
        "wheel": Path(wheel).name,
        "sha256": sha256_of(Path(wheel)),
        "command": command,
        "method": "ast parse of the wheel's sources (nothing imported)",
        "targets": {t.key: extract_target(src, t) for t in TARGETS[dist]},
        "facts": {f.id: extract_fact(src, f) for f in FACTS[dist]},
    }


# ----------------------------------------------------------------------------- reading records


class _Default:
    """Stand-in default value: keeps the source text, binds like any default."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def signature_from_record(rec: dict) -> inspect.Signature:
    """``inspect.Signature`` rebuilt from a target record's ``params`` (defaults as placeholders)."""
    params = []
    for p in rec["params"]:
        kind = getattr(inspect.Parameter, p["kind"])
        default = inspect.Parameter.empty
        if p["default"] is not None and kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            default = _Default(p["default"])
        params.append(inspect.Parameter(p["name"], kind, default=default))
    return inspect.Signature(params)


def api_dir(root: Path | None = None) -> Path:
    if root is not None:
        return Path(root)
    from sm120lab.paths import data_dir

    return data_dir() / "api"


def record_path(dist: str, version: str, root: Path | None = None) -> Path:
    return api_dir(root) / f"{dist}-{version}.json"


def load_record(dist: str, version: str, root: Path | None = None) -> dict:
    path = record_path(dist, version, root)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no API record {path}; run: sm120lab dev api-check "
                                f"extract {dist} {version}") from None


def adapter_claims() -> dict[str, tuple[str, ApiClaim]]:
    """backend name -> (module, ApiClaim) for every registered backend that declares ``api``."""
    from sm120lab.moe.backends import all_backends

    out = {}
    for name, backend in all_backends().items():
        claim = getattr(backend, "api", None)
        if isinstance(claim, ApiClaim):
            out[name] = (type(backend).__module__, claim)
    return out


def build_index(root: Path | None = None) -> dict:
    """Which package versions the adapters were checked against (``data/api/index.json``)."""
    root = api_dir(root)
    packages: dict[str, dict] = {}
    for path in sorted(root.glob("*.json")):
        if path.name == "index.json":
            continue
        rec = json.loads(path.read_text())
        check = rec.get("import_check")
        if check:
            agree = sum(v == "equal" for v in check["result"].values())
            imported = f"{agree}/{len(check['result'])} signatures equal inspect.signature of the imported package"
        else:
            imported = "not run (read with ast only)"
        packages.setdefault(rec["dist"], {})[rec["version"]] = {
            "record": f"data/api/{path.name}", "wheel": rec["wheel"], "sha256": rec["sha256"],
            "targets_found": sum(t["found"] for t in rec["targets"].values()), "targets": len(rec["targets"]),
            "import_check": imported}
    adapters = {}
    for name, (module, claim) in adapter_claims().items():
        adapters[name] = {
            "module": module, "dist": claim.dist, "checked_versions": list(claim.checked),
            "minimum_version": claim.minimum, "calls": [c if isinstance(c, str) else list(c) for c in claim.calls],
            "facts": list(claim.facts),
            "verified_on_sm120": False,
            "status": "signatures and layout facts checked on CPU against the real wheels; "
                      "unverified on SM120 hardware",
        }
    return {"schema": SCHEMA, "packages": {d: dict(sorted(v.items())) for d, v in sorted(packages.items())},
            "adapters": adapters,
            "command": "sm120lab dev api-check index",
            "test": "tests/test_backend_api.py binds every adapter call against each checked version"}


def _params_shape(params) -> list[list]:
    return [[p["name"], p["kind"], p["default"] is not None] for p in params]


def _live_params(obj, *, drop_first: bool) -> list[dict]:
    sig = inspect.signature(obj)
    out = [{"name": p.name, "kind": p.kind.name, "default": None if p.default is p.empty else "x"}
           for p in sig.parameters.values()]
    return out[1:] if drop_first and out else out


def crosscheck(record: dict) -> dict:
    """Compare each found target of ``record`` with ``inspect`` on the IMPORTED package.

    Run it in a process where the package (the same version) is importable. Returns
    key -> "equal" | "differs: ..." | "skipped: ...".
    """
    import importlib

    out = {}
    for key, rec in record["targets"].items():
        if not rec["found"]:
            continue
        mod, name = key.split(":")
        try:
            obj = importlib.import_module(mod)
            parent = None
            for part in name.split("."):
                parent, obj = obj, getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - any import failure is a result to report
            out[key] = f"differs: cannot import ({type(exc).__name__}: {exc})"
            continue
        if rec["kind"] == "property":
            out[key] = "skipped: property"
            continue
        if rec["kind"] == "enum":
            live = [m.name for m in obj]
            out[key] = "equal" if live == rec["members"] else f"differs: members {live}"
            continue
        if "params" not in rec:
            out[key] = "skipped: no recorded constructor"
            continue
        is_method = isinstance(parent, type) and not isinstance(inspect.getattr_static(parent, name.split(".")[-1]),
                                                                 staticmethod)
        try:
            live = _live_params(obj, drop_first=is_method)
        except (TypeError, ValueError) as exc:
            out[key] = f"skipped: no signature ({exc})"
            continue
        a, b = _params_shape(rec["params"]), _params_shape(live)
        out[key] = "equal" if a == b else f"differs: recorded {a} vs imported {b}"
    return out


def _write(path: Path, obj: dict) -> None:
    from sm120lab.atomic_io import write_json_atomic

    write_json_atomic(path, obj)
