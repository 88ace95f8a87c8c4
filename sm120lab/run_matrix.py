"""``sm120lab run --matrix FILE``: the same notebooks across several settings, one run folder each.

Matrix file (YAML), either or both of::

    axes:                         # cartesian product of environment settings
      FLASHINFER_CUDA_ARCH_LIST: ["12.0a", "12.0f"]
    combinations:                 # explicit combinations
      - label: cuda12.9
        env: {PATH: "/opt/cuda-12.9/bin:$PATH"}     # $VARS are expanded
        params: {toolkits: ["12.9"]}                 # papermill parameters (global or per notebook)

Each combination runs with its environment variables set for the notebook kernels, into
``<base>/<run tag>-<label>/``; ``<base>/matrix.json`` indexes the folders for ``sm120lab compare``.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic_io import write_json_atomic
from .envinfo import collect
from .runner import RunSummary, execute_all, run_tag


@dataclass
class Combination:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def _label_for(env: dict[str, str]) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9.]+", "", f"{k.split('_')[-1].lower()}{v}") for k, v in env.items()) or "base"


def load_matrix(path: str | Path) -> list[Combination]:
    """Parse a matrix file; ``ValueError`` naming the problem for anything malformed."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--matrix: file not found: {path}")
    spec = yaml.safe_load(path.read_text()) or {}
    if not isinstance(spec, dict) or not ({"axes", "combinations"} & set(spec)):
        raise ValueError(f"--matrix: {path} must be a mapping with 'axes' and/or 'combinations'")
    combos: list[Combination] = []
    axes = spec.get("axes") or {}
    if axes:
        if not isinstance(axes, dict) or not all(isinstance(v, list) and v for v in axes.values()):
            raise ValueError("--matrix: 'axes' must map environment variable names to non-empty lists of values")
        names = list(axes)
        for values in itertools.product(*(axes[n] for n in names)):
            env = {n: str(v) for n, v in zip(names, values)}
            combos.append(Combination(label=_label_for(env), env=env))
    for i, c in enumerate(spec.get("combinations") or []):
        if not isinstance(c, dict):
            raise ValueError(f"--matrix: combination #{i} must be a mapping with label/env/params")
        env = {str(k): str(v) for k, v in (c.get("env") or {}).items()}
        combos.append(Combination(label=str(c.get("label") or _label_for(env)), env=env,
                                  params=dict(c.get("params") or {})))
    labels = [c.label for c in combos]
    dupes = {l for l in labels if labels.count(l) > 1}
    if dupes:
        raise ValueError(f"--matrix: duplicate combination labels {sorted(dupes)}")
    return combos


def execute_matrix(notebooks: list[Path], base: Path, combos: list[Combination],
                   params: dict[str, Any] | None = None, progress: bool = True) -> list[RunSummary]:
    """Run every combination; environment restored afterwards."""
    from tqdm import tqdm

    base.mkdir(parents=True, exist_ok=True)
    summaries: list[RunSummary] = []
    index = {"runs": []}
    bar = tqdm(combos, desc="matrix", unit="run", disable=not progress)
    for combo in bar:
        bar.set_postfix_str(combo.label)
        saved = {k: os.environ.get(k) for k in combo.env}
        try:
            for k, v in combo.env.items():
                os.environ[k] = os.path.expandvars(v)
            env = collect()
            run_dir = base / f"{run_tag(env)}-{combo.label}"
            merged = {**(params or {}), **combo.params}
            summaries.append(execute_all(notebooks, run_dir, merged, progress=False, env=env))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        index["runs"].append({"label": combo.label, "env": combo.env, "params": combo.params,
                              "run_dir": str(run_dir), "ok": summaries[-1].to_json()["ok"]})
        write_json_atomic(base / "matrix.json", index)
    return summaries
