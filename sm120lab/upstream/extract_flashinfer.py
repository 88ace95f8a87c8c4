"""Facts read from a flashinfer-python wheel.

- ``env_vars``: every ``FLASHINFER_*`` name read through ``os.environ.get`` / ``os.getenv`` /
  ``os.environ[...]`` / ``"..." in os.environ`` in the package's own Python files (``flashinfer/data/``,
  the bundled third-party sources, excluded), with its first anchor.
- ``arch_list``: the wheel's own ``flashinfer/compilation_context.py`` EXECUTED in a separate interpreter
  with stand-ins for what it asks of the machine: ``torch.cuda`` (one GPU of the given capability) and
  ``flashinfer.jit.cpp_ext.is_cuda_version_at_least`` / ``get_cuda_version`` (the CUDA toolkit version;
  in FlashInfer that is nvcc's release, falling back to ``torch.version.cuda``). The result is the set of
  ``TARGET_CUDA_ARCHS`` a ``CompilationContext()`` ends up with, e.g. ``12.0f``, or ``error: ...`` (an
  exception, or an empty set with the warning FlashInfer logged).
- ``jit_load_order``: in ``flashinfer/jit/core.py`` ``JitSpec.build_and_load``, whether the AOT path
  (``is_aot`` / ``try_load``) is consulted before the JIT build, and in ``flashinfer/jit/env.py`` what the
  JIT workspace folder is keyed by and whether an installed ``flashinfer_jit_cache`` package is used.
- ``facts``: anchored texts (see :data:`FACTS`).
"""

from __future__ import annotations

import ast

from .common import anchor_at, base_fields, find_facts, find_text, load_fact_specs, run_isolated
from .pyeval import Modules, find_class, find_function, method
from .record import Anchor, ArchListResult, FlashInferRecord, JitLoadOrder
from .wheelsrc import WheelSource

METHOD = ("Read from the wheel with ast and text search; flashinfer/compilation_context.py executed alone in a "
          "separate interpreter with stand-in torch.cuda and CUDA-version functions (nothing else imported).")

ARCH_FILE = "flashinfer/compilation_context.py"
#: (label, capability or None, CUDA toolkit version, FLASHINFER_CUDA_ARCH_LIST or None)
ARCH_CASES = tuple(
    [(f"sm{maj}{mnr}-cuda{cuda}", (maj, mnr), cuda, None) for maj, mnr in ((12, 0), (12, 1))
     for cuda in ("12.8", "12.9", "13.0")]
    + [(f"env-12.0-cuda{cuda}", (12, 0), cuda, "12.0") for cuda in ("12.8", "12.9", "13.0")]
)

FACTS = load_fact_specs("flashinfer")

# The driver runs in a fresh interpreter: it builds the stand-in modules, executes the wheel's file, and
# prints one JSON result per case. Kept as data (a string), never written into the user's tree.
_DRIVER = r'''
import json, logging, os, sys, types
req = json.load(sys.stdin)
try:
    from packaging.version import Version
except ImportError:
    Version = None
def vt(s):
    return tuple(int(x) for x in str(s).split(".")[:2])
out = []
for label, cap, cuda, env in req["cases"]:
    for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.") or k.startswith("flashinfer")]:
        del sys.modules[k]
    torch = types.ModuleType("torch"); tc = types.ModuleType("torch.cuda")
    tc.device_count = lambda: 1
    tc.get_device_capability = lambda device=0, _c=tuple(cap): _c
    tc.is_available = lambda: True
    tc.current_device = lambda: 0
    torch.cuda = tc; torch.version = types.SimpleNamespace(cuda=cuda)
    fi = types.ModuleType("flashinfer"); fi.__path__ = []
    jit = types.ModuleType("flashinfer.jit"); jit.__path__ = []
    cpp = types.ModuleType("flashinfer.jit.cpp_ext")
    cpp.is_cuda_version_at_least = lambda v, _c=cuda: vt(_c) >= vt(v)
    cpp.get_cuda_version = lambda _c=cuda: Version(_c) if Version else _c
    def _no_path():
        raise RuntimeError("no CUDA toolkit in this reading")
    cpp.get_cuda_path = _no_path
    env_mod = types.ModuleType("flashinfer.jit.env"); env_mod.CUTLASS_INCLUDE_DIRS = []
    jit.cpp_ext, jit.env, fi.jit = cpp, env_mod, jit
    sys.modules.update({"torch": torch, "torch.cuda": tc, "flashinfer": fi, "flashinfer.jit": jit,
                        "flashinfer.jit.cpp_ext": cpp, "flashinfer.jit.env": env_mod})
    os.environ.pop("FLASHINFER_CUDA_ARCH_LIST", None)
    if env is not None:
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = env
    seen = []
    class H(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage().splitlines()[0][:300])
    root = logging.getLogger(); root.handlers[:] = [H()]; root.setLevel(logging.DEBUG)
    mod = types.ModuleType("flashinfer.compilation_context"); mod.__package__ = "flashinfer"
    sys.modules["flashinfer.compilation_context"] = mod
    try:
        exec(compile(req["source"], req["path"], "exec"), mod.__dict__)
        ctx = mod.CompilationContext()
        archs = sorted(ctx.TARGET_CUDA_ARCHS)
        result = " ".join(f"{a}.{b}" for a, b in archs) if archs else (
            "error: no target architecture" + (f" ({seen[-1]})" if seen else ""))
    except Exception as exc:
        result = "error: " + (str(exc).splitlines() or [type(exc).__name__])[0][:300]
    out.append({"case": label, "capability": f"{cap[0]}.{cap[1]}", "cuda": cuda, "env_arch_list": env,
                "result": result, "warnings": seen})
print(json.dumps(out))
'''


def run_arch_list(source: str, path: str, cases=ARCH_CASES) -> list[ArchListResult]:
    """Execute ``source`` (a ``compilation_context.py``) for every case in a separate interpreter."""
    out = run_isolated(_DRIVER, {"source": source, "path": path, "cases": [list(c) for c in cases]},
                       "arch-list execution")
    return [ArchListResult.model_validate(r) for r in out]


def _env_name(node: ast.AST) -> str | None:
    """The FLASHINFER_* name an expression reads from the environment, if it is one of the known forms."""
    def is_environ(n):
        return isinstance(n, ast.Attribute) and n.attr == "environ" or isinstance(n, ast.Name) and n.id == "environ"

    def flash(n):
        return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(
            "FLASHINFER_") else None

    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "getenv") or (isinstance(f, ast.Name) and f.id == "getenv"):
            return flash(node.args[0])
        if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and is_environ(f.value):
            return flash(node.args[0])
    if isinstance(node, ast.Subscript) and is_environ(node.value):
        return flash(node.slice)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
        if is_environ(node.comparators[0]):
            return flash(node.left)
    return None


def env_vars(wheel: WheelSource, mods: Modules) -> dict[str, Anchor]:
    out: dict[str, Anchor] = {}
    paths = sorted(n for n in wheel.names() if n.startswith("flashinfer/") and n.endswith(".py")
                   and not n.startswith("flashinfer/data/"))
    for path in paths:
        text = wheel.text(path) or ""
        if "FLASHINFER_" not in text:
            continue
        mod = mods.by_path(path)
        if mod is None:
            continue
        for node in ast.walk(mod.tree):
            name = _env_name(node)
            if name and (name not in out or (path, node.lineno) < (out[name].file, out[name].line)):
                out[name] = anchor_at(mod, node.lineno)
    return dict(sorted(out.items()))


def jit_load_order(wheel: WheelSource, mods: Modules) -> JitLoadOrder:
    out = JitLoadOrder()
    core = mods.get("flashinfer.jit.core")
    if core is not None:
        spec = find_class(core.tree, "JitSpec")
        fn = method(spec, "build_and_load") if spec is not None else find_function(core.tree, "build_and_load")
        if fn is not None:
            aot_line = build_line = None
            for node in sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=lambda n: n.lineno):
                if isinstance(node, ast.Attribute) and node.attr in ("is_aot", "aot_path", "try_load", "aot_artifacts"):
                    aot_line = aot_line or node.lineno
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                        "build", "_timed_build"):
                    build_line = build_line or node.lineno
            if aot_line:
                out.aot_anchor = anchor_at(core, aot_line)
            if build_line:
                out.build_anchor = anchor_at(core, build_line)
            if aot_line and build_line:
                out.aot_before_jit = aot_line < build_line
    env = mods.get("flashinfer.jit.env")
    if env is not None:
        hit = find_text(wheel, ("flashinfer_jit_cache",), (env.path,), "flashinfer")
        out.jit_cache_package, out.jit_cache_package_anchor = hit is not None, hit
        fn = find_function(env.tree, "_get_workspace_dir_name")
        ret = next((n for n in ast.walk(fn) if isinstance(n, ast.Return)), None) if fn else None
        if ret is not None and ret.value is not None:
            names = []
            node = ret.value
            while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                names.insert(0, ast.unparse(node.right))
                node = node.left
            out.cache_dir_key = names
            out.cache_dir_anchor = anchor_at(env, ret.lineno)
    return out


def extract(wheel: WheelSource, version: str, command: str) -> FlashInferRecord:
    """Every fact of one flashinfer-python wheel as a :class:`FlashInferRecord`."""
    mods = Modules(wheel)
    fields = base_fields(wheel, "flashinfer-python", version, command, METHOD)
    source = wheel.text(ARCH_FILE)
    arch, arch_method, arch_anchor = [], "", None
    if source is None:
        arch_method = f"{ARCH_FILE} is not in this wheel"
    else:
        arch = run_arch_list(source, ARCH_FILE)
        arch_method = (f"{ARCH_FILE} executed: CompilationContext() for each case; torch.cuda reports one GPU "
                       "of the case's capability, the CUDA toolkit version is the case's")
        mod = mods.get("flashinfer.compilation_context")
        cls = find_class(mod.tree, "CompilationContext") if mod else None
        init = method(cls, "__init__") if cls is not None else None
        if init is not None:
            arch_anchor = anchor_at(mod, init.lineno)
    return FlashInferRecord(**fields, env_vars=env_vars(wheel, mods), arch_list=arch, arch_list_method=arch_method,
                            arch_list_anchor=arch_anchor, jit_load_order=jit_load_order(wheel, mods),
                            facts=find_facts(wheel, FACTS, "flashinfer"))
