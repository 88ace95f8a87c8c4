"""Facts read from a torch wheel: METADATA, and what ``torch.utils.cpp_extension._get_cuda_arch_flags`` makes
of ``TORCH_CUDA_ARCH_LIST`` values an SM12x owner might set.

The wheel is read by HTTP range requests (METADATA and ``torch/utils/cpp_extension.py`` only). The function's
own source is cut out with :mod:`ast` and EXECUTED alone in a separate interpreter, with the environment
variable set per case and stand-ins only for what it touches besides the variable (``collections``, ``os``
and ``re`` are the real modules; ``torch`` and ``logger`` are stand-ins that are not reached when the
variable is set). The result per value is the ``-gencode`` flags it returns, or ``error: <message>``.
"""

from __future__ import annotations

import ast

from .common import anchor_at, base_fields, run_isolated
from .pyeval import Modules, find_function
from .record import ArchFlagResult, TorchRecord
from .wheelsrc import WheelSource

FILE = "torch/utils/cpp_extension.py"
ARCH_VALUES = ("12.0", "12.0a", "12.0f", "12.1", "12.1a", "12.1f", "12.0+PTX")
METHOD = ("METADATA read from the wheel; torch/utils/cpp_extension.py::_get_cuda_arch_flags cut out with ast "
          "and executed alone per TORCH_CUDA_ARCH_LIST value (nothing else of torch imported)")

_DRIVER = r'''
import collections, json, os, re, sys, types
req = json.load(sys.stdin)
out = []
for value in req["values"]:
    env = {"collections": collections, "os": os, "re": re, "__name__": "cpp_extension_alone",
           "torch": types.SimpleNamespace(), "logger": types.SimpleNamespace(debug=lambda *a, **k: None,
                                                                              warning=lambda *a, **k: None)}
    exec(compile(req["source"], req["path"], "exec"), env)
    os.environ["TORCH_CUDA_ARCH_LIST"] = value
    try:
        flags = env["_get_cuda_arch_flags"]()
        out.append({"value": value, "result": " ".join(flags)})
    except Exception as exc:
        out.append({"value": value, "result": "error: " + (str(exc).splitlines() or [type(exc).__name__])[0][:300]})
print(json.dumps(out))
'''


def run_arch_flags(function_source: str, path: str, values=ARCH_VALUES) -> list[ArchFlagResult]:
    """Execute ``_get_cuda_arch_flags`` (its source alone) once per ``TORCH_CUDA_ARCH_LIST`` value."""
    out = run_isolated(_DRIVER, {"source": function_source, "path": path, "values": list(values)},
                       "arch-flag execution")
    return [ArchFlagResult.model_validate(r) for r in out]


def extract(wheel: WheelSource, version: str, command: str) -> TorchRecord:
    """METADATA plus the ``TORCH_CUDA_ARCH_LIST`` results of one torch wheel."""
    fields = base_fields(wheel, "torch", version, command, METHOD)
    mod = Modules(wheel).by_path(FILE)
    fn = find_function(mod.tree, "_get_cuda_arch_flags") if mod else None
    if fn is None:
        return TorchRecord(**{**fields, "method": METHOD + f"; {FILE} or the function is absent"})
    source = ast.get_source_segment(mod.source, fn)
    return TorchRecord(**fields, cuda_arch_flags=run_arch_flags(source, FILE),
                       cuda_arch_flags_anchor=anchor_at(mod, fn.lineno))
