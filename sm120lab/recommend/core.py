"""The decision guide: what an SM120/SM121 owner should set, each item with its evidence.

Rules live in ``data/recommendations.yaml``; this module fills them in for one GPU and one setup:

- ``why`` texts have ``{name}`` fields answered by :func:`facts` from recorded data (so the text
  can never disagree with the data);
- the decode ceiling comes from :mod:`sm120lab.roofline`, the kernel time from the bench file the
  rule names;
- the evidence level is computed (:func:`evidence_of`): a URL is ``source-reading``; a recorded
  file is a GPU run when its environment record shows a GPU (``sm120-run`` for compute capability
  12.x, else ``h200-run``), otherwise the kind of CPU work its folder holds (:data:`CPU_KINDS`);
- an archived run folder from an SM120 machine (``environment.json`` with compute capability 12.x)
  under ``runs_root`` lifts every item it covers to ``sm120-run`` (:func:`sm120_runs`).

Every item below ``sm120-run`` says "unverified on SM120 hardware".
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..paths import data_dir, repo_root
from .setup import GPU, Setup, parse_gpu, resolve_setup

UNVERIFIED = "unverified on SM120 hardware"


class Evidence(str, Enum):
    """How an item is known, strongest first."""

    SM120_RUN = "sm120-run"  # measured on an SM120/SM121 GPU (an archived run folder or data file)
    H200_RUN = "h200-run"  # measured on a GPU that is not SM12x (every recorded one is the H200)
    COMPILE = "compile"  # compiled or preprocessed with a real toolkit, no GPU
    EMULATION = "emulation"  # a bit-exact CPU emulation of the hardware instruction
    SOURCE_READING = "source-reading"  # read from source code or a public report


class Topic(str, Enum):
    """What part of the setup an item is about (for :func:`section`)."""

    ARCHFLAGS = "archflags"
    VERSIONS = "versions"
    BACKEND = "backend"
    PATCHES = "patches"
    ENV = "env"
    THROUGHPUT = "throughput"
    VERIFY = "verify"
    BACKENDS = "backends"


# What CPU-produced files under a folder are (checked in order; first prefix that matches).
CPU_KINDS: tuple[tuple[str, Evidence], ...] = (
    ("data/archflags/", Evidence.COMPILE),
    ("data/cutlass_smem/", Evidence.COMPILE),
    ("data/triton_aot/", Evidence.COMPILE),
    ("data/arch_suffix/", Evidence.COMPILE),
    ("tests/test_archflags_emulation.py", Evidence.EMULATION),
    ("sm120lab/archflags/mma_block_scale_emulation.py", Evidence.EMULATION),
)
RULES_PATH = "data/recommendations.yaml"


#: the version of a guide item as ``sm120lab recommend --json`` writes it (``items[]``)
ITEM_SCHEMA_VERSION = 1


class Item(BaseModel):
    """One recommendation (a typed record: :meth:`to_dict` is its JSON, ``Item.model_validate`` reads it
    back). ``evidence`` is computed; ``here`` says what this machine has (auto)."""

    model_config = ConfigDict(extra="forbid")

    setting: str
    value: str
    evidence: Evidence
    source: str
    why: str
    id: str = ""
    topic: Topic = Topic.VERSIONS
    here: str = ""

    schema_version: int = ITEM_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass
class RunFolder:
    """An archived run from an SM120/SM121 machine."""

    path: Path
    gpu: str
    compute_capability: str
    results: dict[str, dict] = field(default_factory=dict)  # "03" -> results/03_*.json


# ----------------------------------------------------------------------------------------------
# rules


@lru_cache(maxsize=32)
def _parse_yaml(path: str, stamp: tuple) -> Any:
    import yaml

    return yaml.safe_load(Path(path).read_text())


def read_yaml(path: Path) -> Any:
    """``path`` parsed as YAML once per file version (path, mtime, size); a deep copy each call, so a
    caller may change what it gets. OSError, UnicodeDecodeError and yaml.YAMLError pass through."""
    st = path.stat()
    return copy.deepcopy(_parse_yaml(str(path), (st.st_mtime_ns, st.st_size)))


def load_rules(path: str | Path | None = None) -> dict:
    """``data/recommendations.yaml`` parsed and checked (every item has its fields, a known topic)."""
    import yaml

    p = Path(path) if path else repo_root() / RULES_PATH
    try:
        rules = read_yaml(p)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"rules: cannot read {p}: {exc}") from None
    if not isinstance(rules, dict) or not isinstance(rules.get("items"), list):
        raise ValueError(f"rules: {p} has no 'items' list")
    topics = {t.value for t in Topic}
    for i, it in enumerate(rules["items"]):
        missing = [k for k in ("id", "topic", "setting", "why", "source") if k not in it]
        if "value" not in it and "compute" not in it:
            missing.append("value or compute")
        if missing:
            raise ValueError(f"rules: item {i} ({it.get('id', '?')}) lacks {', '.join(missing)}")
        if it["topic"] not in topics:
            raise ValueError(f"rules: item {it['id']} topic {it['topic']!r} not one of {sorted(topics)}")
        if "evidence" in it:
            raise ValueError(f"rules: item {it['id']} types its evidence; evidence is computed from its source")
    return rules


# ----------------------------------------------------------------------------------------------
# evidence


def _env_record(obj: Any) -> dict | None:
    if not isinstance(obj, dict):
        return None
    for key in ("environment", "envinfo", "env"):
        e = obj.get(key)
        if isinstance(e, dict) and "gpu" in e:
            return e
    return obj if "gpu" in obj and isinstance(obj.get("gpu"), dict) else None


def _gpu_level(env: dict | None) -> Evidence | None:
    gpu = (env if isinstance(env, dict) else {}).get("gpu") or {}
    if not isinstance(gpu, dict) or not gpu.get("available"):
        return None
    cc = str(gpu.get("compute_capability", ""))
    return Evidence.SM120_RUN if cc.startswith("12.") else Evidence.H200_RUN


@lru_cache(maxsize=256)
def _file_level(path: str, mtime: float) -> Evidence | None:
    p = Path(path)
    if p.suffix != ".json":
        return None
    try:
        return _gpu_level(_env_record(json.loads(p.read_text())))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def evidence_of(source: str, root: Path | None = None) -> Evidence:
    """The evidence level of ``source`` (a URL or a path relative to the repo root).

    Returns:
        ``source-reading`` for a URL; for a recorded JSON file with a GPU in its environment,
        ``sm120-run`` (compute capability 12.x) or ``h200-run``; otherwise the kind of its folder
        (:data:`CPU_KINDS`), and ``source-reading`` for anything else (specs read from wheels,
        hardware tables).

    Raises:
        FileNotFoundError: a repo path that does not exist.
    """
    if re.match(r"^https?://", source):
        return Evidence.SOURCE_READING
    root = root or repo_root()
    p = root / source
    if not p.exists():
        raise FileNotFoundError(f"source: {source} does not exist under {root}")
    level = _file_level(str(p), p.stat().st_mtime) if p.is_file() else None
    if level is not None:
        return level
    for prefix, kind in CPU_KINDS:
        if source.startswith(prefix):
            return kind
    return Evidence.SOURCE_READING


def sm120_runs(runs_root: str | Path | None = None) -> list[RunFolder]:
    """Run folders under ``runs_root`` (default ``data/runs``) made on an SM120/SM121 GPU.

    A folder counts when its ``environment.json`` shows an available GPU with compute capability
    12.x; its ``results/NN_*.json`` are loaded. Unreadable files are skipped; an ``environment.json``
    that reads but is not an object with a ``gpu`` object skips its folder with a warning naming it
    (it once raised AttributeError), and so does a result that is not an object.
    """
    import warnings

    root = Path(runs_root) if runs_root is not None else data_dir() / "runs"
    out = []
    if not root.is_dir():
        return out
    from ..runs.files import SchemaError, read_json  # a regular file of sane size inside the run, or an error

    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        try:
            env = read_json(d / "environment.json", root=d)
        except (OSError, UnicodeDecodeError, ValueError, SchemaError):
            continue
        if not isinstance(env, dict) or not isinstance(env.get("gpu", {}), dict):
            warnings.warn(f"{d / 'environment.json'}: expected a JSON object whose 'gpu' is an object, got "
                          f"{type(env).__name__ if not isinstance(env, dict) else 'gpu = ' + repr(env['gpu'])[:40]}; "
                          "run folder skipped", stacklevel=2)
            continue
        if _gpu_level(_env_record(env) or env) is not Evidence.SM120_RUN:
            continue
        gpu = env.get("gpu", {})
        run = RunFolder(d, str(gpu.get("name", "?")), str(gpu.get("compute_capability", "?")))
        for f in sorted((d / "results").glob("[0-9][0-9]_*.json")):
            try:
                result = read_json(f, root=d)
            except (OSError, UnicodeDecodeError, ValueError, SchemaError):
                continue
            if not isinstance(result, dict):
                warnings.warn(f"{f}: expected a JSON object of results, got {type(result).__name__}; skipped",
                              stacklevel=2)
                continue
            run.results[f.name[:2]] = result
        out.append(run)
    return out


_NOT_MEASURED = {None, "", "skipped", "error", "not_run", "not run"}


def _lookup(obj: Any, key: list[str]) -> list[tuple[str, Any]]:
    """``(matched key, value)`` pairs for a key path whose last part may be a glob."""
    for k in key[:-1]:
        if not isinstance(obj, dict) or k not in obj:
            return []
        obj = obj[k]
    if not isinstance(obj, dict):
        return []
    last = key[-1]
    if any(c in last for c in "*?["):
        return [(k, v) for k, v in sorted(obj.items()) if fnmatch.fnmatchcase(k, last)]
    return [(last, obj[last])] if last in obj else []


def _measured(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("value") is not None
    return str(value).strip().lower() not in {str(x) for x in _NOT_MEASURED}


def _show(value: Any) -> str:
    if isinstance(value, dict) and "value" in value:
        v = value["value"]
        return f"{v:.1f} {value.get('unit', '')}".strip() if isinstance(v, (int, float)) else str(v)
    return str(getattr(value, "value", value))


def _gpu_matches(run: RunFolder, gpu: GPU) -> bool:
    want = "12.1" if gpu is GPU.DGX_SPARK else "12.0"
    return run.compute_capability == want


#: verdicts a run can measure against a recommendation (``lift_if`` specs): never evidence for it
AGAINST = ("garbage", "degraded")


def coverage(rule: dict, runs: list[RunFolder], gpu: GPU) -> tuple[RunFolder, str, str] | None:
    """The first SM120 run (of ``gpu``'s compute capability) that measured what ``rule`` covers.

    A spec with ``lift_if`` (e.g. ``[correct]``) lifts only on those values: a backend judged garbage is a
    measurement against recommending it (:func:`contradictions`), never evidence for it.

    Returns:
        ``(run, matched key, shown value)`` or ``None``.
    """
    for spec in rule.get("sm120_run") or []:
        nb, key = str(spec["results"]), list(spec["key"])
        allowed = {str(v).lower() for v in spec.get("lift_if") or ()}
        for run in runs:
            if not _gpu_matches(run, gpu) or nb not in run.results:
                continue
            hits = [(k, v) for k, v in _lookup(run.results[nb], key) if _measured(v)
                    and (not allowed or str(v).strip().lower() in allowed)]
            if hits:
                shown = ", ".join(f"{k} = {_show(v)}" for k, v in hits[:4])
                return run, shown.split(" = ")[0], shown
    return None


def contradictions(rule: dict, runs: list[RunFolder], gpu: GPU, keys: tuple[str, ...] | None = None
                   ) -> list[tuple[RunFolder, str, str]]:
    """``(run, key, verdict)`` for every SM120 run of ``gpu``'s compute capability whose results judged a key
    that ``rule`` lifts only on ``lift_if`` values as garbage or degraded (:data:`AGAINST`); with ``keys``,
    only those keys (e.g. the chosen backend's check adapters)."""
    out = []
    for spec in rule.get("sm120_run") or []:
        if not spec.get("lift_if"):
            continue
        nb, key = str(spec["results"]), list(spec["key"])
        for run in runs:
            if not _gpu_matches(run, gpu) or nb not in run.results:
                continue
            for k, v in _lookup(run.results[nb], key):
                if str(v).strip().lower() in AGAINST and (keys is None or k in keys):
                    out.append((run, k, str(v).strip().lower()))
    return out


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(repo_root().resolve()).as_posix()
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------
# the guide


def guide(gpu: str | GPU = "rtx-pro-6000", runs_root: str | Path | None = None, *, model: str | None = None,
          tp: int | None = None, pp: int | None = None, users: int | None = None, vllm: str | None = None,
          rules_path: str | Path | None = None, machine: dict | None = None) -> list[Item]:
    """The guide's items for one GPU, setup and vLLM release.

    Args:
        gpu: ``rtx-pro-6000``, ``rtx-5090`` or ``dgx-spark``.
        runs_root: folder of archived run folders (default ``data/runs``); SM120 runs there lift
            the items they cover to ``sm120-run``.
        model, tp, pp, users: the setup; defaults are the GPU's default setup
            (:func:`~sm120lab.recommend.setup.resolve_setup`, shared with ``sm120lab roofline``).
        vllm: the vLLM release to answer for (default: the newest recorded in ``data/upstream`` whose vLLM,
            FlashInfer and torch facts were all read from their wheels);
            every item then speaks of that release and the FlashInfer and torch it pins, and an
            item whose flag or variable the release lacks is left out.
        rules_path: another rules file (tests).
        machine: an ``sm120lab.envinfo.collect()`` record; fills each item's ``here``.

    Returns:
        The items in rule order, then one ``backends`` item per NVFP4 ``--moe-backend`` choice.

    Raises:
        ValueError: an unknown GPU, model or release, a bad TP/PP/users, or a setup that does not
            fit (the message names the argument).
    """
    return answer(gpu, runs_root, model=model, tp=tp, pp=pp, users=users, vllm=vllm, rules_path=rules_path,
                  machine=machine).items


@dataclass
class Answer:
    """The whole guide for one GPU, setup and release: the do-this block, then the items."""

    gpu: str
    setup: Setup
    block: Any  # sm120lab.recommend.dothis.DoThis
    items: list[Item]
    backends: list[dict]
    ceiling: Any = None  # sm120lab.recommend.facts.CeilingAnswer of the setup

    def to_json(self) -> dict:
        return to_json(self.items, gpu=self.gpu, setup=self.setup.to_dict(), block=self.block,
                       backends=self.backends)


def canonical_model(model: str | None) -> str | None:
    """The preset name ``model`` spells in any case (``GPT-OSS-120B`` -> ``gpt-oss-120b``), as the
    roofline's preset lookup reads it; the checkpoint and bench lookups are keyed by that name. An
    unknown name passes through (the setup check names it)."""
    if not isinstance(model, str):
        return model
    from ..roofline import get_model

    try:
        return get_model(model.strip()).name
    except ValueError:
        return model


def answer(gpu: str | GPU = "rtx-pro-6000", runs_root: str | Path | None = None, *, model: str | None = None,
           tp: int | None = None, pp: int | None = None, users: int | None = None, vllm: str | None = None,
           rules_path: str | Path | None = None, machine: dict | None = None) -> Answer:
    """:func:`guide` with the do-this block and the backend rows (one object every page reads)."""
    from .facts import compute_value, facts, here_notes, kernel_bench_for
    from .versioned import RELEASE_KINDS, backend_rows, compute, context, has, version_facts

    g = parse_gpu(gpu)
    rules = load_rules(rules_path)
    setup = resolve_setup(g, rules, model=canonical_model(model), tp=tp, pp=pp, users=users)
    require_fit(g, setup)
    ctx = context(g, setup, vllm)
    runs = sm120_runs(runs_root)
    known = facts()
    known.update(version_facts(ctx))
    known.update({"tp": str(setup.tp), "pp": str(setup.pp), "users": str(setup.users), "verify": ctx.block.verify,
                  "model": setup.model})
    try:
        known["kernel_bench"] = kernel_bench_for(setup.model)
    except ValueError:
        known["kernel_bench"] = kernel_bench_for("qwen3.5-397b-a17b")
    notes = here_notes(machine, g) if machine else {}
    items = []
    for r in rules["items"]:
        if g.value not in r.get("gpus", [x.value for x in GPU]) or not has(ctx, r.get("needs")):
            continue
        over = (r.get("per_gpu") or {}).get(g.value, {})
        source = str(over.get("source", r["source"])).format_map(known)
        why = over.get("why", r["why"]).format_map(known)
        if "compute" in r:
            if r["compute"] in RELEASE_KINDS:
                value, extra = compute(r["compute"], ctx)
            else:
                value, extra = compute_value(r["compute"], g, setup, source)
            why = f"{why} {extra}".strip()
        else:
            value = str(over.get("value", r["value"])).format_map(known)
        evidence = evidence_of(source)
        cov = coverage(r, runs, g)
        against = contradictions(r, runs, g)
        if against:
            why = f"{why} " + " ".join(f"MEASURED AGAINST: {k} was judged {v} on {run.gpu} (cc {run.compute_capability}) "
                                       f"in {run.path.name}." for run, k, v in against)
        if cov is not None:
            run, key, shown = cov
            evidence = Evidence.SM120_RUN
            source = _rel(run.path / "results")
            why = f"{why} Measured on {run.gpu} (cc {run.compute_capability}) in {run.path.name}: {shown}."
        elif evidence is not Evidence.SM120_RUN:
            why = f"{why} ({UNVERIFIED})"
        items.append(Item(setting=r["setting"].format_map(known), value=str(value), evidence=evidence, source=source,
                          why=" ".join(why.split()), id=r["id"], topic=Topic(r["topic"]),
                          here=notes.get(r["id"], "")))
    rows = backend_rows(ctx)
    for row in rows:
        items.append(backend_item(row, ctx))
    # a run on this SM that judged the chosen backend's own check garbage stands in the block as a warning
    from .dothis import CHECK_ADAPTERS

    adapters = CHECK_ADAPTERS.get(ctx.block.moe_backend, ())
    for rule in rules["items"]:
        for run, key, verdict in contradictions(rule, runs, g, keys=adapters):
            line = (f"MEASURED AGAINST THIS BLOCK: sm120lab check judged {key} ({ctx.block.moe_backend}'s kernel) "
                    f"{verdict} on {run.gpu} (cc {run.compute_capability}) in {run.path.name}: do not serve with "
                    f"--moe-backend {ctx.block.moe_backend} on this GPU until that check passes.")
            if line not in ctx.block.problems:
                ctx.block.problems.append(line)
    from .facts import ceiling_of

    return Answer(gpu=g.value, setup=setup, block=ctx.block, items=items, backends=rows,
                  ceiling=ceiling_of(g.value, setup))


def backend_item(row: dict, ctx) -> Item:
    """One ``backends`` item from :func:`~sm120lab.recommend.versioned.backend_rows`."""
    verdict = {"accepts": "accepts SM12x", "rejects": "refuses SM12x", "unknown": "SM12x check not readable"}[row["sm12x"]]
    if not row.get("nvfp4", True):
        verdict = f"not an NVFP4 MoE backend in vLLM {ctx.version} (its NVFP4 oracle does not map to it)"
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(row["outcomes"].items())) or "no public SM12x report found"
    reps = "; ".join(f"{r['summary']} ({r['url']})" for r in row["reports"][:4] if r.get("summary"))
    fails = "; ".join(f"{f['what']} ({f['url']})" for f in row["failure_modes"][:4])
    why = (f"Own support check in vLLM {ctx.version}: {row['sm12x']} ({row['check']}). "
           + (f"Auto-selected for NVFP4 at position {row['auto'] + 1}. " if row["auto"] is not None else
              "Not in NVFP4 auto-selection. ")
           + f"Public SM12x reports: {outcomes}. " + (f"{reps}. " if reps else "")
           + (f"Known failure modes: {fails}. " if fails else "")
           + f"Check it here: {'; '.join(row['check_here'])}. ({UNVERIFIED})")
    return Item(setting=f"--moe-backend {row['name']}", value=f"{verdict}; {outcomes}",
                evidence=Evidence.SOURCE_READING, source=f"data/upstream/vllm-{ctx.version}.json",
                why=" ".join(why.split()), id=f"backend:{row['name']}", topic=Topic.BACKENDS)


def require_fit(gpu: GPU, setup) -> None:
    """Refuse a setup that does not fit the GPU's memory: no item may advise as if it ran.

    Raises:
        ValueError: ``setup: ...`` naming what is held and what is usable, and what to change.
    """
    from .setup import fit

    f = fit(gpu, setup)
    if not f.fits:
        raise ValueError(f"setup: {setup.model} on {setup.n_gpus}x {gpu.value} (TP{setup.tp} PP{setup.pp}, "
                         f"{setup.users} user(s), max model length {setup.max_model_len}) {f.describe()}; "
                         "add GPUs with --tp/--pp, or pick a smaller --model")


def section(items: list[Item], topic: str | Topic | list) -> list[Item]:
    """The items of one topic (or several): ``section(items, "archflags")``.

    Raises:
        ValueError: an unknown topic.
    """
    wanted = [topic] if isinstance(topic, (str, Topic)) else list(topic)
    try:
        topics = {Topic(t) for t in wanted}
    except ValueError:
        raise ValueError(f"topic: expected one of {', '.join(t.value for t in Topic)}, got {topic!r}") from None
    return [it for it in items if it.topic in topics]


def to_json(items: list[Item], *, gpu: str, setup: dict | None = None, block=None,
            backends: list[dict] | None = None) -> dict:
    """The JSON document ``sm120lab recommend --json`` writes: ``do_this`` (the block to copy),
    ``items``, ``backends``."""
    return {"gpu": gpu, "setup": setup or {}, "do_this": block.to_dict() if block is not None else None,
            "items": [it.to_dict() for it in items], "backends": backends or [],
            "evidence_levels": [e.value for e in Evidence]}
