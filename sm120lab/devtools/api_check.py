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

#: the facts, as data: sm120lab/devtools/api_facts.yaml (files by short name, anchors, claims)
FACTS_YAML = Path(__file__).with_name("api_facts.yaml")


def load_facts(path: Path = FACTS_YAML) -> dict[str, tuple[Fact, ...]]:
    """``{dist: (Fact, ...)}`` from the facts file: each fact's ``file`` names an entry of its ``files``
    map (a path, or a list of alternative paths); list anchors are alternatives."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    files = {k: tuple(v) if isinstance(v, list) else v for k, v in doc["files"].items()}
    return {dist: tuple(Fact(f["id"], files[f["file"]], tuple(f["anchor"]) if isinstance(f["anchor"], list)
                             else f["anchor"], f["claim"], f.get("after")) for f in facts)
            for dist, facts in doc["facts"].items()}


FACTS: dict[str, tuple[Fact, ...]] = load_facts()


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
