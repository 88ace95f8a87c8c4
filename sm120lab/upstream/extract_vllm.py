"""Facts read from a vLLM wheel (ast and text only; nothing is imported).

What is read, and from where (paths inside the wheel = paths in the vLLM repository):

- ``pins``: ``==`` requirements of a default install on Linux x86_64 / CPython 3.12 (METADATA), plus
  flashinfer-python and torch whatever their specifier.
- ``moe_backends``: the ``MoEBackend = Literal[...]`` choices (``vllm/config/kernel.py``), the quantisation
  oracles whose ``map_<fmt>_backend`` mapping accepts each (``fused_moe/oracle/<fmt>.py``), the NVFP4 expert
  classes each maps to (``backend_to_kernel_cls``), the NVFP4 auto-selection list (``AVAILABLE_BACKENDS`` in
  ``select_nvfp4_moe_backend``), and whether each class's own ``_supports_current_device`` admits
  capability 12.0 / 12.1, evaluated by :func:`sm120lab.upstream.pyeval.evaluate`.
- ``env_vars``: the keys of ``environment_variables`` in ``vllm/envs.py`` (choices of ``env_with_choices``).
- ``serve_flags``: fields of the ``*Args`` dataclasses in ``vllm/engine/arg_utils.py`` and the
  entrypoints' ``cli_args.py`` (flag = ``--`` + name with ``_`` -> ``-``) plus literal
  ``add_argument("--...")`` calls there and in ``vllm/entrypoints/cli/serve.py``; choices from Literal
  aliases and enums the annotation names.
- ``attention_backends``: members of ``AttentionBackendEnum``; ``attention_priority_cuda``: what
  ``_get_backend_priorities`` in ``vllm/platforms/cuda.py`` returns for capability 12.0 (evaluated).
"""

from __future__ import annotations

import ast

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .common import anchor_at, base_fields, find_facts, load_fact_specs
from .pyeval import (
    UNKNOWN,
    Capability,
    Module,
    Modules,
    enum_members,
    evaluate,
    find_function,
    literal_strings,
    method,
)
from .record import DenseGemm, FlagFact, Knob, MoeBackendFact, Verdict, VllmRecord
from .wheelsrc import WheelSource, exact_pins

METHOD = ("Read from the wheel with ast and text search, nothing imported. Device checks evaluated by "
          "sm120lab.upstream.pyeval with a stand-in current_platform for capability 12.0 and 12.1 "
          "(package-availability calls assumed to succeed, listed per backend).")

ORACLE_DIR = "vllm/model_executor/layers/fused_moe/oracle/"
KERNEL_CONFIG = "vllm.config.kernel"
DENSE_FLAGS = ("--linear-backend", "--nvfp4-gemm-backend")
DENSE_ENV = "VLLM_NVFP4_GEMM_BACKEND"
SM120, SM121 = Capability(12, 0), Capability(12, 1)

FACTS = load_fact_specs("vllm")


# --------------------------------------------------------------------------- annotations -> choices


def annotation_choices(mods: Modules, module: Module, ann: ast.AST | None, depth: int = 0) -> list[str] | None:
    """The string choices an annotation allows: ``Literal[...]``, a Literal alias, an enum's member names,
    unions of these (None when nothing readable)."""
    if ann is None or depth > 6:
        return None
    lit = literal_strings(ann)
    if lit is not None:
        return lit
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        parts = [annotation_choices(mods, module, side, depth + 1) for side in (ann.left, ann.right)]
        got = [p for p in parts if p]
        return list(dict.fromkeys(c for p in got for c in p)) if got else None
    if isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "Optional":
        return annotation_choices(mods, module, ann.slice, depth + 1)
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            return annotation_choices(mods, module, ast.parse(ann.value, mode="eval").body, depth + 1)
        except SyntaxError:
            return None
    if isinstance(ann, ast.Name):
        hit = mods.resolve(module, ann.id)
        if hit is None:
            return None
        where, node = hit
        if isinstance(node, ast.Assign):
            return annotation_choices(mods, where, node.value, depth + 1)
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            return annotation_choices(mods, where, node.value, depth + 1)
        if isinstance(node, ast.ClassDef) and any("Enum" in ast.unparse(b) for b in node.bases):
            return [name for name, _ in enum_members(node)] or None
    return None


def _string_list(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return vals if len(vals) == len(node.elts) else None
    return None


def serve_flags(wheel: WheelSource, mods: Modules) -> dict[str, FlagFact]:
    """``--flag`` -> choices and anchor (see the module docstring for the sources)."""
    files = ["vllm/engine/arg_utils.py"] + sorted(
        n for n in wheel.names()
        if n.startswith("vllm/entrypoints/") and (n.endswith("/cli_args.py") or n == "vllm/entrypoints/cli/serve.py"))
    flags: dict[str, FlagFact] = {}
    for path in files:
        mod = mods.by_path(path)
        if mod is None:
            continue
        for cls in (n for n in mod.tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Args")):
            for node in cls.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                name = node.target.id
                if name.startswith("_") or "ClassVar" in ast.unparse(node.annotation):
                    continue
                flag = "--" + name.replace("_", "-")
                flags.setdefault(flag, FlagFact(choices=annotation_choices(mods, mod, node.annotation),
                                                anchor=anchor_at(mod, node.lineno)))
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            choices = next((_string_list(k.value) for k in node.keywords if k.arg == "choices"), None)
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    old = flags.get(arg.value)
                    if old is None:
                        flags[arg.value] = FlagFact(choices=choices, anchor=anchor_at(mod, node.lineno))
                    elif old.choices is None and choices:
                        old.choices = choices
    return dict(sorted(flags.items()))


# --------------------------------------------------------------------------- env vars


def env_vars(mods: Modules) -> tuple[dict, dict[str, list[str]], dict[str, str]]:
    """``(name -> anchor, name -> choices, name -> deprecation text)`` from ``environment_variables``:
    choices of an ``env_with_choices(...)`` (also when wrapped, e.g. in ``deprecated_env(...)``), and the
    string arguments of a ``deprecated_env(name, since, hint, ...)`` wrapper."""
    mod = mods.get("vllm.envs")
    out, choices, deprecated = {}, {}, {}
    if mod is None:
        return out, choices, deprecated
    node = mod.top("environment_variables")
    value = getattr(node, "value", None)
    if not isinstance(value, ast.Dict):
        return out, choices, deprecated
    for key, val in zip(value.keys, value.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        out[key.value] = anchor_at(mod, key.lineno)
        for call in (n for n in ast.walk(val) if isinstance(n, ast.Call)):
            fname = getattr(call.func, "id", None)
            if fname == "env_with_choices" and len(call.args) >= 3 and (lst := _string_list(call.args[2])) is not None:
                choices.setdefault(key.value, lst)
            if fname == "deprecated_env":
                texts = [a.value for a in call.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                deprecated[key.value] = " ".join(texts)
    return out, choices, deprecated


# --------------------------------------------------------------------------- MoE backends


def _mapping_dict(fn: ast.FunctionDef) -> ast.Dict | None:
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "mapping" for t in targets):
                return node.value
    return None


def oracle_mappings(wheel: WheelSource, mods: Modules) -> dict[str, dict[str, ast.AST]]:
    """``{format: {choice: mapped value node}}`` from every ``map_<x>_backend`` in the oracle folder."""
    out: dict[str, dict[str, ast.AST]] = {}
    for path in sorted(n for n in wheel.names() if n.startswith(ORACLE_DIR) and n.endswith(".py")):
        fmt = path[len(ORACLE_DIR):-3]
        mod = mods.by_path(path)
        if mod is None or fmt.startswith("_") or fmt == "base":
            continue
        for fn in mod.tree.body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("map_") and fn.name.endswith("_backend"):
                d = _mapping_dict(fn)
                if d is not None:
                    out[fmt] = {k.value: v for k, v in zip(d.keys, d.values)
                                if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return out


def _enum_attr(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else None


def nvfp4_kernel_classes(mod: Module) -> dict[str, list[tuple[str, str]]]:
    """``{NvFp4MoeBackend member: [(module, class), ...]}`` from ``backend_to_kernel_cls``'s if-chain."""
    fn = find_function(mod.tree, "backend_to_kernel_cls")
    out: dict[str, list[tuple[str, str]]] = {}
    if fn is None:
        return out
    node = next((s for s in fn.body if isinstance(s, ast.If)), None)
    while isinstance(node, ast.If):
        test = node.test
        member = None
        if isinstance(test, ast.Compare) and len(test.comparators) == 1:
            member = _enum_attr(test.comparators[0])
        if member:
            imports = {}
            returned: list[str] = []
            for st in node.body:
                if isinstance(st, ast.ImportFrom):
                    for alias in st.names:
                        imports[alias.asname or alias.name] = (st.module or "", alias.name)
                if isinstance(st, ast.Return) and isinstance(st.value, (ast.List, ast.Tuple)):
                    returned = [e.id for e in st.value.elts if isinstance(e, ast.Name)]
            out[member] = [imports[n] for n in returned if n in imports]
        node = node.orelse[0] if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else None
    return out


def nvfp4_auto_order(mod: Module) -> tuple[list[str], int | None]:
    fn = find_function(mod.tree, "select_nvfp4_moe_backend")
    if fn is None:
        return [], None
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "AVAILABLE_BACKENDS"
                                                 for t in node.targets) and isinstance(node.value, ast.List)):
            return [a for e in node.value.elts if (a := _enum_attr(e))], node.lineno
    return [], None


def find_support_check(mods: Modules, module: str, cls_name: str, depth: int = 0):
    """``(Module, FunctionDef)`` of ``cls_name._supports_current_device``, following base classes."""
    mod = mods.get(module)
    if mod is None or depth > 6:
        return None
    hit = mods.resolve(mod, cls_name)
    if hit is None:
        return None
    where, cls = hit
    if not isinstance(cls, ast.ClassDef):
        return None
    fn = method(cls, "_supports_current_device")
    if fn is not None:
        return where, fn
    for base in cls.bases:
        if isinstance(base, ast.Name):
            found = find_support_check(mods, where.name, base.id, depth + 1)
            if found is not None:
                return found
    return None


def _verdict(value) -> Verdict:
    if value is True:
        return Verdict.ACCEPTS
    if value is False:
        return Verdict.REJECTS
    return Verdict.UNKNOWN


def judge_class(mods: Modules, module: str, cls_name: str) -> dict:
    """The SM12x verdicts of one expert class, with the anchor of the deciding capability call."""
    found = find_support_check(mods, module, cls_name)
    if found is None:
        return {"sm12x": Verdict.UNKNOWN, "sm121": Verdict.UNKNOWN, "anchor": None, "assumed": [],
                "note": f"{cls_name}: no _supports_current_device found"}
    where, fn = found
    ev120, ev121 = evaluate(fn, SM120, module=where, modules=mods), evaluate(fn, SM121, module=where, modules=mods)
    v120 = _verdict(ev120.value)
    calls = ev120.cap_calls
    if v120 is Verdict.ACCEPTS:
        deciding = [c for c in calls if c.result is True] or calls
    else:
        deciding = calls
    if deciding:
        at = mods.by_path(deciding[-1].file) or where
        anchor = anchor_at(at, deciding[-1].line)
    else:
        anchor = anchor_at(where, fn.lineno)
    if ev120.error:
        note = f"{cls_name}: not readable ({ev120.error})"
    elif isinstance(ev120.value, bool):
        note = f"{cls_name}: returns {ev120.value} for 12.0"
    else:
        note = (f"{cls_name}: the capability checks pass for 12.0 but the answer comes from "
                f"{getattr(ev120.value, 'name', ev120.value)}(), which this reading cannot evaluate")
    return {"sm12x": v120, "sm121": _verdict(ev121.value), "anchor": anchor,
            "assumed": sorted(set(ev120.assumed)), "note": note}


def moe_backends(wheel: WheelSource, mods: Modules) -> tuple[list[MoeBackendFact], list[str], int | None, str | None]:
    kernel = mods.get(KERNEL_CONFIG)
    node = kernel.top("MoEBackend") if kernel else None
    lit = getattr(node, "value", None)
    if kernel is None or literal_strings(lit) is None:
        return [], [], None, None
    mappings = oracle_mappings(wheel, mods)
    nv_mod = mods.by_path(ORACLE_DIR + "nvfp4.py")
    classes = nvfp4_kernel_classes(nv_mod) if nv_mod else {}
    auto, auto_line = nvfp4_auto_order(nv_mod) if nv_mod else ([], None)
    nv_map = {k: _enum_attr(v) for k, v in mappings.get("nvfp4", {}).items()}
    out = []
    for elt in lit.slice.elts:
        name = elt.value
        fact = MoeBackendFact(name=name, anchor=anchor_at(kernel, elt.lineno),
                              formats=[f for f, m in mappings.items() if name in m])
        member = nv_map.get(name)
        if member is None:
            fact.sm12x_note = "not an NVFP4 MoE backend in this version; its device check is not evaluated"
        else:
            fact.kernel_classes = [c for _, c in classes.get(member, [])]
            if member in auto:
                fact.auto_selected, fact.auto_order = True, auto.index(member)
            judged = [judge_class(mods, m, c) for m, c in classes.get(member, [])]
            if not judged:
                fact.sm12x_note = f"NvFp4MoeBackend.{member}: kernel classes not readable"
            else:
                pick = next((j for j in judged if j["sm12x"] is Verdict.ACCEPTS), judged[0])
                verdicts = {j["sm12x"] for j in judged}
                fact.sm12x = (Verdict.ACCEPTS if Verdict.ACCEPTS in verdicts else
                              Verdict.REJECTS if verdicts == {Verdict.REJECTS} else Verdict.UNKNOWN)
                v121 = {j["sm121"] for j in judged}
                fact.sm121 = (Verdict.ACCEPTS if Verdict.ACCEPTS in v121 else
                              Verdict.REJECTS if v121 == {Verdict.REJECTS} else Verdict.UNKNOWN)
                fact.sm12x_anchor = pick["anchor"]
                fact.assumed = sorted({a for j in judged for a in j["assumed"]})
                fact.sm12x_note = "; ".join(j["note"] for j in judged)
        out.append(fact)
    return out, auto, auto_line, nv_mod.path if nv_mod else None


# --------------------------------------------------------------------------- attention


def attention(mods: Modules) -> tuple[list[str], object, dict[str, list[str]], object]:
    cuda = mods.get("vllm.platforms.cuda")
    members, members_anchor, prio, prio_anchor = [], None, {}, None
    if cuda is None:
        return members, members_anchor, prio, prio_anchor
    hit = mods.resolve(cuda, "AttentionBackendEnum")
    if hit is None:
        reg = mods.get("vllm.v1.attention.backends.registry") or mods.get("vllm.attention.backends.registry")
        node = reg.top("AttentionBackendEnum") if reg else None
        hit = (reg, node) if node is not None else None
    if hit is not None and isinstance(hit[1], ast.ClassDef):
        members = [n for n, _ in enum_members(hit[1])]
        members_anchor = anchor_at(hit[0], hit[1].lineno)
    fn = find_function(cuda.tree, "_get_backend_priorities")
    if fn is not None:
        prio_anchor = anchor_at(cuda, fn.lineno)
        params = fn.args.args
        defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
        for label, mla in (("sm120", False), ("sm120_mla", True)):
            args = {}
            for p, d in zip(params, defaults):
                args[p.arg] = d.value if isinstance(d, ast.Constant) else UNKNOWN
            args.update({"use_mla": mla, "device_capability": SM120, "num_heads": None,
                         "kv_cache_dtype": None, "use_non_causal": False, "head_size": None,
                         "use_mm_prefix": False, "use_sparse": False})
            ev = evaluate(fn, SM120, {k: v for k, v in args.items() if k in {p.arg for p in params}}, cuda, mods)
            if isinstance(ev.value, list):
                prio[label] = [str(v).rpartition(".")[2] for v in ev.value]
    return members, members_anchor, prio, prio_anchor


# --------------------------------------------------------------------------- the record


def _parses(raw: str) -> bool:
    try:
        Requirement(raw)
    except InvalidRequirement:
        return False
    return True


def extract(wheel: WheelSource, version: str, command: str) -> VllmRecord:
    """Every fact of one vLLM wheel as a :class:`VllmRecord`."""
    mods = Modules(wheel)
    fields = base_fields(wheel, "vllm", version, command, METHOD)
    pins = exact_pins(fields["requires_dist"])
    flags = serve_flags(wheel, mods)
    envs, env_choices, env_deprecated = env_vars(mods)
    backends, auto, auto_line, nv_path = moe_backends(wheel, mods)
    members, members_anchor, prio, prio_anchor = attention(mods)
    dense = DenseGemm()
    if DENSE_ENV in envs:
        dense.env = Knob(kind="env", name=DENSE_ENV, choices=env_choices.get(DENSE_ENV), anchor=envs[DENSE_ENV])
    for flag in DENSE_FLAGS:
        if flag in flags:
            dense.flag = Knob(kind="flag", name=flag, choices=flags[flag].choices, anchor=flags[flag].anchor)
            break
    nv_mod = mods.by_path(nv_path) if nv_path else None
    pin_raw = {}
    for raw in fields["requires_dist"]:
        name = canonicalize_name(Requirement(raw).name) if _parses(raw) else None
        if name in pins and name not in pin_raw:
            pin_raw[name] = raw
    return VllmRecord(
        **fields, pins=pins, pin_requirements=pin_raw, moe_backend_flag="--moe-backend" in flags,
        moe_backends=backends, nvfp4_auto_order=auto,
        nvfp4_auto_anchor=anchor_at(nv_mod, auto_line) if nv_mod and auto_line else None,
        env_vars=envs, env_var_choices=env_choices, env_var_deprecated=env_deprecated, serve_flags=flags,
        attention_backends=members, attention_backends_anchor=members_anchor,
        attention_priority_cuda=prio, attention_priority_anchor=prio_anchor,
        dense_nvfp4_gemm=dense, facts=find_facts(wheel, FACTS, "vllm"),
    )
