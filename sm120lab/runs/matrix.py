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

from ..atomic_io import write_json_atomic
from ..envinfo import collect
from .execute import RunFolderError, RunSummary, check_parameters, execute_all, run_tag
from .results import SchemaError, load_json


@dataclass
class Combination:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def _label_for(env: dict[str, str]) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9.]+", "", f"{k.split('_')[-1].lower()}{v}") for k, v in env.items()) or "base"


def read_yaml(path: str | Path, arg: str) -> Any:
    """Parse a user's YAML file; ``ValueError`` with one line naming ``arg``, the file and the problem.

    Args:
        path: the file.
        arg: the command-line option it came from (``--params``, ``--matrix``), for the message.

    Returns:
        The parsed document (``None`` for an empty file).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{arg}: expected a YAML file, got {path} (not found or not a file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{arg}: expected a UTF-8 YAML text file, got binary data in {path}") from None
    except OSError as exc:
        raise ValueError(f"{arg}: cannot read {path}: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise ValueError(f"{arg}: expected a YAML text file, got binary data in {path}")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{arg}: {path} is not valid YAML{where}: {problem}") from None


def load_matrix(path: str | Path) -> list[Combination]:
    """Parse a matrix file; ``ValueError`` naming the problem for anything malformed."""
    path = Path(path)
    spec = read_yaml(path, "--matrix") or {}
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
    combinations = spec.get("combinations") or []
    if not isinstance(combinations, list):
        raise ValueError(f"--matrix: 'combinations' must be a list of mappings, got {type(combinations).__name__}")
    for i, c in enumerate(combinations):
        if not isinstance(c, dict):
            raise ValueError(f"--matrix: combination #{i} must be a mapping with label/env/params")
        for key in ("env", "params"):
            if c.get(key) is not None and not isinstance(c[key], dict):
                raise ValueError(f"--matrix: combination #{i} '{key}' must be a mapping, got {type(c[key]).__name__}")
        env = {str(k): str(v) for k, v in (c.get("env") or {}).items()}
        combos.append(Combination(label=str(c.get("label") or _label_for(env)), env=env,
                                  params=dict(c.get("params") or {})))
    labels = [c.label for c in combos]
    dupes = {lab for lab in labels if labels.count(lab) > 1}
    if dupes:
        raise ValueError(f"--matrix: duplicate combination labels {sorted(dupes)}")
    return combos


def execute_matrix(notebooks: list[Path], base: Path, combos: list[Combination],
                   params: dict[str, Any] | None = None, progress: bool = True,
                   command: str | None = None) -> list[RunSummary]:
    """Run every combination, each into a new folder; environment restored afterwards.

    ``base/matrix.json`` lists the runs; an earlier index there is kept and extended, never replaced.

    Raises:
        ValueError: a combination's parameter no notebook declares; nothing ran.
        RunFolderError: ``base`` cannot be used.
    """
    from tqdm import tqdm

    for combo in combos:  # every combination's parameters are checked before the first one runs
        check_parameters(notebooks, {**(params or {}), **combo.params}, arg=f"--matrix combination {combo.label}:")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"cannot create {base}: {exc.strerror or exc}") from None
    summaries: list[RunSummary] = []
    index: dict[str, Any] = {"runs": []}
    if (base / "matrix.json").exists():
        try:
            index = load_json(base / "matrix.json")
        except SchemaError as exc:
            raise RunFolderError(f"{exc}; move it away or choose another --out") from None
        if not isinstance(index, dict) or not isinstance(index.get("runs"), list):
            raise RunFolderError(f"{base / 'matrix.json'} is not a matrix index; choose another --out")
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
            summaries.append(execute_all(notebooks, run_dir, merged, progress=False, env=env, command=command))
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
