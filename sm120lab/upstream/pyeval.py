"""Reading Python source out of a wheel with :mod:`ast`, and evaluating small device-check functions.

Nothing is imported from the wheel. Two tools:

- :class:`Modules`: dotted module name -> parsed source, top-level definitions, and the resolution of a
  name through ``from x import y`` chains (``resolve``), for following a ``Literal`` alias or an enum
  from where it is used to where it is defined.
- :func:`evaluate`: runs the body of one function (``_supports_current_device``, ``_get_backend_priorities``)
  in a tiny interpreter with a stand-in ``current_platform`` whose capability methods answer for a given
  compute capability with vLLM's own semantics (``has_device_capability(c)``: cap >= c;
  ``is_device_capability(c)``: cap == c; ``is_device_capability_family(c)``: cap // 10 == c // 10, with
  ``cap = 10 * major + minor``; tuples compare as ``(major, minor)``). Every other call (a package
  availability probe like ``has_flashinfer_cutlass_fused_moe()``) is *assumed to succeed* and listed in
  ``assumed``. Logic is three-valued: anything the interpreter cannot read makes the answer ``UNKNOWN``
  rather than a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .wheelsrc import WheelSource


class _Unknown:
    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


class CannotEvaluate(Exception):
    """The function uses a construct the interpreter does not model."""


def line_of(source: str, lineno: int) -> str:
    """Line ``lineno`` (1-based) of ``source``, stripped."""
    lines = source.splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


@dataclass
class Module:
    name: str
    path: str
    source: str
    tree: ast.Module

    def line(self, lineno: int) -> str:
        return line_of(self.source, lineno)

    def top(self, name: str) -> ast.AST | None:
        """The last top-level ``name = ...``, ``name: T = ...``, ``class name`` or ``def name``."""
        found = None
        for node in self.tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found = node
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                found = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                found = node
        return found

    def imported(self, name: str) -> tuple[str, str] | None:
        """``(module, original name)`` when ``name`` is bound by a top-level ``from m import x [as name]``."""
        pkg = self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        base = node.module or ""
                        if node.level:
                            parts = pkg.split(".")
                            parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                            base = ".".join(parts + ([base] if base else []))
                        return base, alias.name
        return None


class Modules:
    """Parsed modules of one wheel by dotted name (cached)."""

    def __init__(self, wheel: WheelSource):
        self.wheel = wheel
        self._mods: dict[str, Module | None] = {}

    def path_of(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if self.wheel.has(cand):
                return cand
        return None

    def get(self, dotted: str) -> Module | None:
        if dotted not in self._mods:
            path = self.path_of(dotted)
            mod = None
            if path is not None:
                src = self.wheel.text(path) or ""
                try:
                    mod = Module(dotted, path, src, ast.parse(src))
                except SyntaxError:
                    mod = None
            self._mods[dotted] = mod
        return self._mods[dotted]

    def by_path(self, path: str) -> Module | None:
        dotted = path[:-3].replace("/", ".")
        if dotted.endswith(".__init__"):
            dotted = dotted[: -len(".__init__")]
        return self.get(dotted)

    def resolve(self, module: Module, name: str, depth: int = 6) -> tuple[Module, ast.AST] | None:
        """Where ``name`` (as seen from ``module``) is defined: follows ``from .. import`` up to ``depth`` hops."""
        for _ in range(depth):
            node = module.top(name)
            if node is not None and not isinstance(node, ast.ImportFrom):
                return module, node
            imp = module.imported(name)
            if imp is None:
                return None
            nxt = self.get(imp[0])
            if nxt is None:
                # ``from pkg import submodule``
                return None
            module, name = nxt, imp[1]
        return None


def literal_strings(node: ast.AST) -> list[str] | None:
    """The strings of ``Literal["a", "b"]`` (also ``typing.Literal``), or None."""
    if isinstance(node, ast.Subscript):
        base = node.value
        base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if base_name == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            vals = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            return vals if len(vals) == len(elts) else None
    return None


def enum_members(cls: ast.ClassDef) -> list[tuple[str, int]]:
    """``(member name, line)`` of an enum class body (upper-case assignments, in order)."""
    out = []
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for t in targets:
            if isinstance(t, ast.Name) and not t.id.startswith("_") and t.id.upper() == t.id:
                out.append((t.id, node.lineno))
    return out


def find_function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def find_class(tree: ast.AST, name: str) -> ast.ClassDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


# --------------------------------------------------------------------------- the interpreter


@dataclass(frozen=True)
class Capability:
    major: int
    minor: int

    def to_int(self) -> int:
        return 10 * self.major + self.minor

    def as_tuple(self) -> tuple[int, int]:
        return (self.major, self.minor)


@dataclass
class _Assumed:
    """The value of a call the interpreter does not model: assumed to succeed (truthy, not None)."""

    name: str


@dataclass
class _Symbol:
    """An unresolved name (``AttentionBackendEnum``), or a dotted attribute of one."""

    name: str


class _Platform:
    pass


PLATFORM_NAMES = ("current_platform",)
_TRUE_PLATFORM = {"is_cuda", "is_cuda_alike"}
_FALSE_PLATFORM = {"is_rocm", "is_xpu", "is_cpu", "is_tpu", "is_out_of_tree", "is_zen_cpu", "is_hpu", "is_neuron"}
CAPABILITY_METHODS = ("has_device_capability", "is_device_capability", "is_device_capability_family",
                      "get_device_capability")


@dataclass
class CapCall:
    """One capability call the evaluation made: its line, method, argument and answer."""

    line: int
    method: str
    arg: object
    result: object
    file: str = ""


@dataclass
class Evaluation:
    value: object
    cap_calls: list[CapCall] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    error: str | None = None


class _Return(Exception):
    def __init__(self, value):
        self.value = value


def _kleene_and(vals):
    if any(v is False for v in vals):
        return False
    return UNKNOWN if any(v is UNKNOWN for v in vals) else True


def _truth(v):
    if v is UNKNOWN:
        return UNKNOWN
    if isinstance(v, (_Assumed, _Platform, Capability)):
        return True
    if isinstance(v, _Symbol):
        return UNKNOWN
    return bool(v)


class _Interp:
    def __init__(self, cap: Capability, env: dict, module: Module | None = None, modules: Modules | None = None,
                 depth: int = 0):
        self.cap = cap
        self.env = dict(env)
        self.module, self.modules, self.depth = module, modules, depth
        self.cap_calls: list[CapCall] = []
        self.assumed: list[str] = []

    def _resolve(self, name: str):
        if self.module is None or self.modules is None or self.depth >= 4:
            return None
        return self.modules.resolve(self.module, name)

    def _sub(self, module: Module) -> _Interp:
        return _Interp(self.cap, {}, module, self.modules, self.depth + 1)

    def _merge(self, sub: _Interp) -> None:
        self.cap_calls += sub.cap_calls
        self.assumed += sub.assumed

    def global_value(self, name: str):
        """A module-level constant (``_SUPPORTED = frozenset({(10, 0)})``), evaluated; else a symbol."""
        hit = self._resolve(name)
        if hit is not None and isinstance(hit[1], (ast.Assign, ast.AnnAssign)) and hit[1].value is not None:
            sub = self._sub(hit[0])
            try:
                value = sub.ev(hit[1].value)
            except CannotEvaluate:
                return _Symbol(name)
            if not isinstance(value, (_Symbol, _Assumed, _Unknown)):
                return value
        return _Symbol(name)

    def call_function(self, name: str, args: list):
        """Evaluate a module-level function of the wheel called with positional ``args``; None if not one."""
        hit = self._resolve(name)
        if hit is None or not isinstance(hit[1], ast.FunctionDef):
            return None
        fn = hit[1]
        params = [a.arg for a in fn.args.args]
        if len(args) > len(params) or len(params) - len(fn.args.defaults) > len(args):
            return None
        sub = self._sub(hit[0])
        sub.env.update(dict(zip(params, args)))
        try:
            sub.run(fn.body)
            value = None
        except _Return as r:
            value = r.value
        except CannotEvaluate:
            if sub.cap_calls:
                raise
            return None  # a probe without capability calls (package availability): the caller assumes it
        self._merge(sub)
        return ("value", value)

    # expressions
    def ev(self, node):  # noqa: C901 - one dispatch over node types
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in PLATFORM_NAMES:
                return _Platform()
            return self.global_value(node.id)
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            if isinstance(base, _Platform):
                return ("platform", node.attr, node.lineno)
            if isinstance(base, Capability):
                if node.attr in ("major", "minor"):
                    return getattr(base, node.attr)
                if node.attr == "to_int":
                    return ("capmethod", base)
                raise CannotEvaluate(f"capability attribute {node.attr}")
            if isinstance(base, _Symbol):
                return _Symbol(f"{base.name}.{node.attr}")
            if isinstance(base, _Assumed):
                return _Assumed(f"{base.name}.{node.attr}")
            if isinstance(base, list) and node.attr in ("append", "insert", "extend"):
                return ("listmethod", base, node.attr)
            raise CannotEvaluate(f"attribute {node.attr} of {type(base).__name__}")
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                seen = []
                for v in node.values:
                    t = _truth(self.ev(v))
                    seen.append(t)
                    if t is False:
                        return False
                return _kleene_and(seen)
            seen = []
            for v in node.values:
                t = _truth(self.ev(v))
                if t is True:
                    return True
                seen.append(t)
            return UNKNOWN if any(t is UNKNOWN for t in seen) else False
        if isinstance(node, ast.UnaryOp):
            v = self.ev(node.operand)
            if isinstance(node.op, ast.Not):
                t = _truth(v)
                return UNKNOWN if t is UNKNOWN else (not t)
            if isinstance(node.op, ast.USub) and isinstance(v, (int, float)):
                return -v
            raise CannotEvaluate("unary operator")
        if isinstance(node, ast.Compare):
            left = self.ev(node.left)
            result = True
            for op, comp in zip(node.ops, node.comparators):
                right = self.ev(comp)
                r = self.compare(left, op, right)
                if r is False:
                    return False
                if r is UNKNOWN:
                    result = UNKNOWN
                left = right
            return result
        if isinstance(node, (ast.Tuple, ast.List)):
            out = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.ev(e.value)
                    if not isinstance(v, (list, tuple)):
                        raise CannotEvaluate("starred non-list")
                    out.extend(v)
                else:
                    out.append(self.ev(e))
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.Set):
            return frozenset(self.ev(e) for e in node.elts)
        if isinstance(node, ast.IfExp):
            t = _truth(self.ev(node.test))
            if t is UNKNOWN:
                raise CannotEvaluate("conditional expression on an unknown")
            return self.ev(node.body if t else node.orelse)
        if isinstance(node, ast.BinOp):
            a, b = self.ev(node.left), self.ev(node.right)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
                       ast.FloorDiv: lambda x, y: x // y}
                if type(node.op) in ops:
                    return ops[type(node.op)](a, b)
            raise CannotEvaluate("binary operator")
        raise CannotEvaluate(type(node).__name__)

    def compare(self, a, op, b):
        if isinstance(op, (ast.Is, ast.IsNot)):
            if b is None and isinstance(a, (_Assumed, _Platform, Capability, list, tuple, str, int)):
                return isinstance(op, ast.IsNot)
            if a is None and b is None:
                return isinstance(op, ast.Is)
            return UNKNOWN
        if any(isinstance(x, (_Symbol, _Assumed, _Unknown)) for x in (a, b)):
            return UNKNOWN
        if isinstance(a, Capability):
            a = a.as_tuple()
        if isinstance(b, Capability):
            b = b.as_tuple()
        fns = {ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y, ast.Lt: lambda x, y: x < y,
               ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y, ast.GtE: lambda x, y: x >= y,
               ast.In: lambda x, y: x in y, ast.NotIn: lambda x, y: x not in y}
        if type(op) not in fns:
            raise CannotEvaluate("comparison")
        try:
            return fns[type(op)](a, b)
        except TypeError:
            return UNKNOWN

    def call(self, node: ast.Call):
        func = self.ev(node.func)
        args = [self.ev(a) for a in node.args]
        if isinstance(func, tuple) and func and func[0] == "platform":
            return self.platform_call(func[1], args, node.lineno)
        if isinstance(func, tuple) and func and func[0] == "capmethod":
            return func[1].to_int()
        if isinstance(func, tuple) and func and func[0] == "listmethod":
            lst, name = func[1], func[2]
            if name == "append":
                lst.append(args[0])
            elif name == "insert":
                lst.insert(args[0], args[1])
            else:
                lst.extend(args[0])
            return None
        if isinstance(func, (_Symbol, _Assumed)):
            name = func.name
            if isinstance(func, _Symbol) and "." not in name and not node.keywords and (
                    got := self.call_function(name, args)) is not None:
                return got[1]
            if any(self._cap_dependent(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                raise CannotEvaluate(f"{name}() is given the capability; its answer cannot be read here")
            if name in ("len",) and args and isinstance(args[0], (list, tuple, set, frozenset)):
                return len(args[0])
            if name in ("frozenset", "set", "tuple", "list") and len(args) == 1 and isinstance(
                    args[0], (list, tuple, set, frozenset)):
                return {"frozenset": frozenset, "set": set, "tuple": tuple, "list": list}[name](args[0])
            self.assumed.append(name)
            return _Assumed(name)
        raise CannotEvaluate("call")

    def _path(self) -> str:
        return self.module.path if self.module is not None else ""

    def _cap_dependent(self, node) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(self.env.get(sub.id), Capability):
                return True
            if isinstance(sub, ast.Attribute) and sub.attr in CAPABILITY_METHODS:
                return True
        return False

    def _cap_arg(self, arg):
        if isinstance(arg, tuple) and len(arg) == 2 and all(isinstance(x, int) for x in arg):
            return arg
        if isinstance(arg, int):
            return arg
        raise CannotEvaluate(f"capability argument {arg!r}")

    def platform_call(self, name, args, line):
        if name in _TRUE_PLATFORM:
            return True
        if name in _FALSE_PLATFORM:
            return False
        cap = self.cap
        if name == "get_device_capability":
            self.cap_calls.append(CapCall(line, name, None, cap.as_tuple(), self._path()))
            return cap
        if name in ("has_device_capability", "is_device_capability", "is_device_capability_family"):
            if not args:
                raise CannotEvaluate(f"{name}() without an argument")
            c = self._cap_arg(args[0])
            if name == "has_device_capability":
                r = cap.as_tuple() >= c if isinstance(c, tuple) else cap.to_int() >= c
            elif name == "is_device_capability":
                r = cap.as_tuple() == c if isinstance(c, tuple) else cap.to_int() == c
            else:
                if isinstance(c, tuple):
                    raise CannotEvaluate("family check with a tuple")
                r = cap.to_int() // 10 == c // 10
            self.cap_calls.append(CapCall(line, name, c, r, self._path()))
            return r
        self.assumed.append(f"current_platform.{name}")
        return _Assumed(f"current_platform.{name}")

    # statements
    def run(self, body):
        for st in body:
            self.stmt(st)

    def stmt(self, st):
        if isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return
            self.ev(st.value)
        elif isinstance(st, ast.Return):
            raise _Return(None if st.value is None else self.ev(st.value))
        elif isinstance(st, ast.Assign):
            if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
                raise CannotEvaluate("assignment target")
            self.env[st.targets[0].id] = self.ev(st.value)
        elif isinstance(st, ast.AnnAssign):
            if not isinstance(st.target, ast.Name) or st.value is None:
                raise CannotEvaluate("annotated assignment")
            self.env[st.target.id] = self.ev(st.value)
        elif isinstance(st, (ast.ImportFrom, ast.Import)):
            for alias in st.names:
                self.env[(alias.asname or alias.name).split(".")[0]] = _Symbol(alias.asname or alias.name)
        elif isinstance(st, ast.If):
            t = _truth(self.ev(st.test))
            if t is UNKNOWN:
                raise CannotEvaluate(f"if on an unknown (line {st.lineno})")
            self.run(st.body if t else st.orelse)
        elif isinstance(st, ast.Pass):
            return
        else:
            raise CannotEvaluate(f"{type(st).__name__} statement (line {st.lineno})")


def evaluate(fn: ast.FunctionDef, cap: Capability, args: dict | None = None, module: Module | None = None,
             modules: Modules | None = None) -> Evaluation:
    """Run ``fn``'s body for a GPU of capability ``cap`` with parameters bound to ``args``.

    Returns:
        :class:`Evaluation`: ``value`` (what the function returned, ``UNKNOWN`` when it could not be
        evaluated, with ``error`` saying why), the capability calls made in order and the assumed calls.
    """
    interp = _Interp(cap, args or {}, module, modules)
    try:
        interp.run(fn.body)
        value = None
    except _Return as r:
        value = r.value
    except CannotEvaluate as exc:
        return Evaluation(UNKNOWN, interp.cap_calls, interp.assumed, str(exc))
    if isinstance(value, list):
        value = [v.name if isinstance(v, _Symbol) else v for v in value]
    return Evaluation(value, interp.cap_calls, interp.assumed)


def symbol_name(v) -> str | None:
    return v.name if isinstance(v, _Symbol) else None
