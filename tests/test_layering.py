"""The package's layering: no import runs upward (read with ``ast`` from every module, nothing imported).

A *unit* is a subpackage of ``sm120lab`` (``sm120lab/moe/...`` -> ``moe``) or a module at the package
root (``sm120lab/envinfo.py`` -> ``envinfo``). Units sit on layers, lowest first:

 0. root helpers: ``__init__`` (the version), ``constants``, ``paths``, ``atomic_io``, ``cmdline``, ``enums``
 1. ``nvfp4`` (formats), ``toolchains`` (CUDA toolkits and cached PyPI wheels)
 2. ``envinfo`` (the machine stamp every record carries; it lists the toolkits ``toolchains`` finds)
 3. ``kernels`` (the production Triton MoE)
 4. ``moe`` (problems, reference, backends, verdicts; its Triton backends run ``kernels``)
 5. ``bench``, ``archflags``, ``cutlass_smem``, ``patches``, ``upstream`` (labs over the kernels and wheels)
 6. ``roofline`` (ceilings, read with the recorded benches)
 7. ``recommend``, ``runs`` (the guide and the run folder)
 8. ``doctor``
 9. ``devtools`` (the ``sm120lab dev`` tools)
10. ``commands``; 11. ``cli``; 12. ``__main__``

Rule: a unit imports only units on lower layers, the root helpers and itself. Units on one layer do
not import each other, except the pairs in :data:`PEERS`. :data:`UPWARD` lists the imports that
still break the rule, by file (the list may only shrink). The package root holds only the
modules of layers 0 and 2 and the CLI entry points.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "sm120lab"

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(s) for s in (
    {"__init__", "constants", "paths", "atomic_io", "cmdline", "enums"},
    {"nvfp4", "toolchains"},
    {"envinfo"},
    {"kernels"},
    {"moe"},
    {"bench", "archflags", "cutlass_smem", "patches", "upstream"},
    {"roofline"},
    {"recommend", "runs"},
    {"doctor"},
    {"devtools"},
    {"commands"},
    {"cli"},
    {"__main__"},
))
#: same-layer imports that are allowed: recommend reads archived run folders through the run folder's
#: safe reader; a run's report opens with the guide's do-this block
PEERS = {("recommend", "runs"), ("runs", "recommend")}
#: (file, imported unit) that still run upward; owned elsewhere, to be moved (delete the entry when it is;
#: nothing may be added)
UPWARD: set[tuple[str, str]] = set()
ROOT_MODULES = {"__init__", "__main__", "cli", "cmdline", "constants", "paths", "atomic_io", "envinfo", "enums"}


def _layer_of() -> dict[str, int]:
    return {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _unit(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(path: Path, rel: Path) -> set[str]:
    """Units of ``sm120lab`` that ``path`` imports (absolute or relative, at any depth of the file)."""
    package = ["sm120lab", *rel.parts[:-1]]  # the package the module lives in
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [f"{mod}.{a.name}" for a in node.names] if mod == "sm120lab" else [mod]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "sm120lab" and len(parts) > 1:
                out.add(parts[1] if parts[1] != "__version__" else "__init__")
    return out


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        yield path, rel, _unit(rel)


def test_every_unit_has_a_layer():
    layer = _layer_of()
    assert not {unit for _, _, unit in _modules()} - set(layer), "put the new unit on a layer in LAYERS"


def test_the_package_root_holds_only_the_cli_and_shared_helpers():
    assert {p.stem for p in PKG.glob("*.py")} <= ROOT_MODULES


def test_no_import_runs_upward():
    layer = _layer_of()
    bad = []
    for path, rel, unit in _modules():
        for dst in _imported_units(path, rel) - {unit}:
            if dst not in layer:
                bad.append(f"{rel}: imports unknown unit {dst}")
            elif layer[dst] > layer[unit] or (layer[dst] == layer[unit] and (unit, dst) not in PEERS):
                if (rel.as_posix(), dst) not in UPWARD:
                    bad.append(f"{rel} (layer {layer[unit]}) imports {dst} (layer {layer[dst]})")
    assert not bad, "\n".join(bad)


def test_the_import_reader_sees_relative_and_absolute_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from ...bench.moe import x\nimport sm120lab.runs.files\nfrom sm120lab import doctor\n"
                 "def g():\n    from . import faults\n")
    assert _imported_units(f, Path("moe/backends/m.py")) == {"bench", "runs", "doctor", "moe"}
