"""The guide's facts that depend on the vLLM release: read from the upstream records, never typed.

:func:`context` resolves the chosen vLLM release (default: the newest recorded whose vLLM, FlashInfer and
torch facts were all read from their wheels; a pinned FlashInfer not read stands in as its nearest release
read, every such fact marked unread), the FlashInfer and
torch releases it pins, and the do-this block; :func:`version_facts` turns them into the ``{name}``
fields the rules' ``why`` texts use; :func:`compute` answers the rules' ``compute:`` kinds that
depend on the release (``install``, ``moe_backend``, ``avoid_backends``, ``arch_list``,
``env_vars``, ``dense_gemm``, ``attention``, ``kv_cache``, ``mtp``, ``cuda_graphs``, ``allreduce``,
``jit_cache``); :func:`backend_items` gives one row per ``--moe-backend`` choice of the release.

A rule whose ``needs`` names a flag or variable the release lacks is left out, so a flag or variable
the release lacks never appears.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .dothis import CHECK_ADAPTERS, DoThis, build
from .setup import GPU, Setup


@dataclass
class Context:
    gpu: GPU
    setup: Setup
    vllm: object  # VllmRecord
    flashinfer: object | None  # FlashInferRecord of the pinned release, or of the nearest one read (fi_unread)
    block: DoThis
    fi_unread: bool = False  # the pinned FlashInfer's wheel was not read: ``flashinfer`` is the nearest release read

    @property
    def version(self) -> str:
        return self.vllm.version

    @property
    def fi_from(self) -> str | None:
        """The FlashInfer release whose recorded facts the guide reads (None when none is recorded)."""
        return getattr(self.flashinfer, "version", None)


def context(gpu: GPU, setup: Setup, vllm: str | None = None) -> Context:
    """The release context of the guide (module docstring). A release whose pinned FlashInfer was not read
    from its wheel still answers: ``flashinfer`` is then the nearest release read
    (:func:`~sm120lab.recommend.dothis.nearest_read`) and every FlashInfer fact says it is unread.

    Raises:
        ValueError: ``vllm: ...`` for an unrecorded release.
    """
    from .. import upstream

    block = build(gpu, setup, vllm)
    rec = upstream.load("vllm", block.vllm)
    unread = next((u for u in block.unread if u.dist == "flashinfer-python"), None)
    fi_from = block.flashinfer if unread is None else unread.nearest
    fi = upstream.load("flashinfer-python", fi_from) if fi_from else None
    return Context(gpu, setup, rec, fi, block, fi_unread=unread is not None)


def record_path(dist: str, version: str) -> str:
    return f"data/upstream/{dist}-{version}.json"


def _url(rec, anchor) -> str:
    if rec is None or anchor is None:
        return "not read"
    try:
        return rec.source_url(anchor)
    except ValueError:
        return f"{anchor.file}:{anchor.line}"


def _fact(rec, key: str) -> str:
    """``<url>`` of a recorded text fact, or ``absent in <dist> <version>``."""
    f = (getattr(rec, "facts", None) or {}).get(key)
    if f is None:
        return "not recorded"
    if not f.found or f.anchor is None:
        return f"absent in {rec.dist} {rec.version}"
    return _url(rec, f.anchor)


def _arch(fi, cap: str, cuda: str, env: str | None = None) -> str:
    for r in getattr(fi, "arch_list", None) or []:
        if r.capability == cap and r.cuda == cuda and (r.env_arch_list or None) == env:
            return r.result
    return "not recorded"


def version_facts(ctx: Context) -> dict[str, str]:
    """The ``{name}`` fields of the rules that depend on the release (module docstring)."""
    v, fi, b = ctx.vllm, ctx.flashinfer, ctx.block
    fv = ctx.fi_from or b.flashinfer  # the FlashInfer whose facts are read (the pinned one unless unread)

    def read(text: str) -> str:
        """A FlashInfer fact as read, or marked unread with the release it was read from."""
        if not ctx.fi_unread:
            return text
        if fi is None:
            return f"unread (FlashInfer {b.flashinfer}'s wheel was not read, and no FlashInfer release is recorded)"
        return f"unread ({text} in FlashInfer {fv}, the nearest release read)"

    out = {
        "vllm": v.version, "flashinfer": b.flashinfer, "torch": b.torch, "cuda": b.cuda,
        "vllm_record": record_path("vllm", v.version),
        "fi_record": record_path("flashinfer-python", fv) if fi is not None else record_path("vllm", v.version),
        "install": b.install, "moe_backend": b.moe_backend,
    }
    for cap, tag in (("12.0", "120"), ("12.1", "121")):
        for cuda in ("12.8", "12.9", "13.0"):
            out[f"fi_arch_{tag}_{cuda.replace('.', '_')}"] = read(_arch(fi, cap, cuda))
    out["fi_arch_120_bare"] = read(_arch(fi, "12.0", "13.0", "12.0"))  # an explicit FLASHINFER_CUDA_ARCH_LIST=12.0
    out["fi_arch_src"] = _url(fi, getattr(fi, "arch_list_anchor", None))
    out["fi_sm121_warning"] = _sm121_warning()
    jit = getattr(fi, "jit_load_order", None)
    who = f"FlashInfer {fv}" + (", the nearest release read," if ctx.fi_unread else "")
    if jit is None or jit.aot_before_jit is None:
        out["fi_aot"] = f"FlashInfer {fv}: load order not recorded"
    elif jit.aot_before_jit:
        out["fi_aot"] = (f"{who} loads an installed flashinfer-jit-cache module before any JIT "
                         f"build ({_url(fi, jit.aot_anchor)}), so a patched source never takes effect while that "
                         "package is installed; clearing the JIT cache does not change that")
    else:
        out["fi_aot"] = (f"{who} builds from source on first use and checks no AOT package first "
                         f"({_url(fi, jit.build_anchor)})")
    if ctx.fi_unread:
        out["fi_aot"] = (f"FlashInfer {b.flashinfer}'s load order is unread (its wheel was not read); "
                         + (out["fi_aot"] if fi is not None else "no FlashInfer release is recorded"))
    if jit is not None and jit.cache_dir_key:
        keys, url = ", ".join(jit.cache_dir_key), _url(fi, jit.cache_dir_anchor)
        out["fi_cache_key"] = (f"{keys} in FlashInfer {fv}, the nearest release read (unread for {b.flashinfer}; "
                               f"{url})" if ctx.fi_unread else f"{keys} ({url})")
    else:
        out["fi_cache_key"] = read("not recorded")
    out["nvfp4_auto"] = " -> ".join(v.nvfp4_auto_order) or "not readable"
    out["nvfp4_auto_src"] = _url(v, v.nvfp4_auto_anchor)
    out["spawn_src"] = _fact(v, "spawn_when_cuda_initialized")
    cumem = (v.facts or {}).get("nccl_cumem_forced_off")
    out["cumem_state"] = (f"still sets it itself ({_url(v, cumem.anchor)})" if cumem is not None and cumem.found
                          else "no longer sets it (not found in its sources)")
    warn = _fact(v, "unknown_env_var_only_warns")
    if "VLLM_NVFP4_GEMM_BACKEND" in v.env_vars:
        out["gemm_env_state"] = (f"VLLM_NVFP4_GEMM_BACKEND exists in vLLM {v.version} "
                                 f"({_url(v, v.env_vars['VLLM_NVFP4_GEMM_BACKEND'])}): leave it unset unless the "
                                 "dense-GEMM item says otherwise.")
    else:
        flag = v.dense_nvfp4_gemm.flag.name if v.dense_nvfp4_gemm.flag is not None else "no"
        out["gemm_env_state"] = (f"vLLM {v.version} has no VLLM_NVFP4_GEMM_BACKEND: setting it only draws an "
                                 f"unknown-variable warning ({warn}); the dense backend is chosen with the {flag} flag.")
    out.update(_allreduce_facts(ctx))
    out.update(_recipe_facts(ctx))
    out["pin_history"] = pin_history()
    return out


_SM120LAB_CMD = re.compile(r"(sm120lab|pip) [^;)`]*")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_ENV = re.compile(r"\bVLLM_[A-Z0-9_]+\b")


def missing_mentions(text: str, ctx: Context) -> list[str]:
    """The ``--flags`` and ``VLLM_*`` variables ``text`` names that the release lacks
    (``sm120lab ...`` and ``pip ...`` commands are not vLLM's and are skipped)."""
    text = _SM120LAB_CMD.sub("", text)
    flags, env = ctx.vllm.serve_flags, ctx.vllm.env_vars
    return sorted({f for f in _FLAG.findall(text) if f not in flags} | {e for e in _ENV.findall(text) if e not in env})


def _sm121_warning() -> str:
    """Where FlashInfer says SM120 code on SM121 can fail with an illegal instruction: the recorded
    releases whose sources carry that note, and the newest one's line."""
    from .. import upstream

    found = []
    for ver in upstream.versions("flashinfer-python"):
        rec = upstream.load("flashinfer-python", ver)
        f = (rec.facts or {}).get("sm121_illegal_instruction_warning")
        if f is not None and f.found and f.anchor is not None:
            found.append((ver, _url(rec, f.anchor)))
    if not found:
        return "no recorded FlashInfer release carries that note"
    return f"FlashInfer {found[0][0]} to {found[-1][0]} say so in their sources ({found[-1][1]})"


def pin_history() -> str:
    """``vLLM 0.17.0 pins flashinfer-python 0.6.4, ...`` for every recorded release where the pin changes."""
    from .. import upstream

    parts, last = [], None
    for ver in upstream.versions("vllm"):
        rec = upstream.load("vllm", ver)
        pin = (rec.pins.get("flashinfer-python", "?"), rec.pins.get("torch", "?"))
        if pin != last:
            parts.append(f"{ver}: flashinfer-python{pin[0]}, torch{pin[1]}")
        last = pin
    return "Pins by release (where they change): " + "; ".join(parts) + "."


def _allreduce_facts(ctx: Context) -> dict[str, str]:
    from .facts import allreduce_latency_us

    v, tp = ctx.vllm, ctx.setup.tp
    off = _fact(v, "custom_allreduce_off_over_two_pcie_gpus")
    ipc = "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC" in v.env_vars
    lat, lat_text = allreduce_latency_us(ctx.gpu.value)
    if tp == 1:
        return {"allreduce_value": "not used (TP1)", "allreduce_why": "No tensor parallelism, no all-reduce."}
    if tp == 2:
        value = "vLLM's custom all-reduce may run (needs PCIe peer-to-peer access between the two GPUs)"
    else:
        value = "off: NCCL carries every all-reduce" + (
            " (opt-in: VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1, unverified)" if ipc else "")
    why = (f"vLLM {v.version}'s custom all-reduce turns itself off above two PCIe-only GPUs ({off}); "
           f"at TP{tp} that is {'not' if tp == 2 else ''} the case. "
           + (f"vLLM {v.version} has the opt-in VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC "
              f"({_url(v, v.env_vars['VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC'])}). " if ipc else
              f"vLLM {v.version} has no VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC. ")
           + (f"Each all-reduce costs about {lat_text}; the ceiling counts it." if lat else ""))
    return {"allreduce_value": value, "allreduce_why": " ".join(why.split())}


def _recipe_facts(ctx: Context) -> dict[str, str]:
    """MTP, KV-cache and dense-GEMM facts from ``data/published/recipes.yaml`` for the checkpoint."""
    import json

    from packaging.version import Version

    from .facts import checkpoint_of, published_yaml

    doc = published_yaml("recipes.yaml")
    ckpt = checkpoint_of(ctx.setup.model)
    recipe = next((r for r in doc.get("recipes", []) if r.get("checkpoint") == ckpt), None)
    out = {}
    if recipe and recipe.get("spec_decode"):
        sd = recipe["spec_decode"]
        cfg = json.dumps({"method": sd["method"], "num_speculative_tokens": sd["num_speculative_tokens"]},
                         separators=(",", ":"))
        out["mtp_flag"] = f"--speculative-config '{cfg}'"
        out["mtp_why"] = (f"The vLLM recipe for {ckpt} offers MTP with {sd['num_speculative_tokens']} speculative "
                          f"tokens as an opt-in.")
        out["mtp_source"] = recipe["url"]
    else:
        out["mtp_flag"] = "no recipe recorded for this checkpoint"
        out["mtp_why"] = f"No vLLM recipe with speculative decoding recorded for {ckpt}."
        out["mtp_source"] = "data/published/recipes.yaml"
    out["recipe_kv"] = (f"The vLLM recipe for {ckpt} sets --kv-cache-dtype fp8 too ({recipe['url']})."
                        if recipe and "fp8" in (recipe.get("flags") or []) else "")
    probs = []
    v = ctx.vllm
    for d in doc.get("dense_gemm", []):
        if not missing_mentions(d["what"], ctx):  # a report naming a flag this release lacks is left out
            probs.append(f"{d['what']} ({d['url']})")
    if "VLLM_DISABLED_KERNELS" in v.env_vars and Version(v.version) <= Version("0.29.0"):
        probs.append(f"vLLM {v.version} is at or before the fixed ordering: the workaround "
                     "VLLM_DISABLED_KERNELS=FlashInferCuteDslNvFp4W4A16LinearKernel exists in it.")
    out["dense_problems"] = " ".join(probs[:5]) or "none recorded"
    floor = next((c for c in doc.get("minimum_version_claims", []) if c.get("found")
                  and re.search(r"vLLM (\d+\.\d+\.\d+) or later", c.get("claim", ""))), None)
    if floor:
        fv = re.search(r"vLLM (\d+\.\d+\.\d+) or later", floor["claim"]).group(1)
        where = "at or above" if Version(v.version) >= Version(fv) else "BELOW"
        out["recipe_floor"] = (f"The vLLM recipes state {floor['claim']} ({floor['url']}); {v.version} is {where} "
                               "that floor.")
    else:
        out["recipe_floor"] = ""
    return out


# ----------------------------------------------------------------------------------------------
# rule filters and computed values


def has(ctx: Context, needs: dict | None) -> bool:
    """Whether the release has every flag (``vllm_flags``) and variable (``vllm_env``) a rule names,
    and lacks every one under ``vllm_lacks``."""
    needs = needs or {}
    flags, env = ctx.vllm.serve_flags, ctx.vllm.env_vars
    return (all(f in flags for f in needs.get("vllm_flags", []))
            and all(e in env for e in needs.get("vllm_env", []))
            and not any(x in flags or x in env for x in needs.get("vllm_lacks", [])))


def _choices(ctx: Context, flag: str) -> list[str] | None:
    f = ctx.vllm.serve_flags.get(flag)
    return None if f is None else f.choices


#: the rules' ``compute:`` kinds answered here (the others: :func:`sm120lab.recommend.facts.compute_value`)
RELEASE_KINDS = frozenset({"install", "moe_backend", "arch_list", "avoid_backends", "env_vars", "dense_gemm",
                           "attention", "kv_cache", "cuda_graphs", "jit_cache"})


def compute(kind: str, ctx: Context) -> tuple[str, str]:
    """``(value, extra why)`` of a release-dependent rule (module docstring).

    Raises:
        ValueError: an unknown kind.
    """
    v, b = ctx.vllm, ctx.block
    if kind == "install":  # a failed install line says so here too, as observed where it was observed
        return b.install, " ".join(x for x in b.problems if x.startswith("Install line: "))
    if kind == "moe_backend":
        flag = f"--moe-backend {b.moe_backend}" if b.moe_backend != "auto" else "auto (no --moe-backend flag)"
        return flag, b.moe_backend_why
    if kind == "arch_list":
        ex = [e for e in b.exports if e.name == "FLASHINFER_CUDA_ARCH_LIST"]
        if ex and ex[0].read_from:
            return (f"{ex[0].value} (unread for FlashInfer {b.flashinfer}; FlashInfer {ex[0].read_from}'s value, "
                    "the nearest release read)"), ""
        return (ex[0].value if ex else "leave unset"), ""
    if kind == "avoid_backends":
        bad = [m for m in v.moe_backends if m.sm12x.value == "rejects"]
        names = ", ".join(m.name for m in bad) or "none rejected by their own checks"
        return names, ("Each of these refuses capability 12.x in its own support check in vLLM "
                       f"{v.version}: " + "; ".join(f"{m.name} ({_url(v, m.sm12x_anchor)})" for m in bad[:6]) + "."
                       if bad else "")
    if kind == "env_vars":
        return "none needed", ""
    if kind == "dense_gemm":
        d = v.dense_nvfp4_gemm
        if d.flag is not None:
            ch = f" ({', '.join(d.flag.choices)})" if d.flag.choices else ""
            return f"{d.flag.name} auto{ch}", f"vLLM {v.version} chooses it with {d.flag.name} ({_url(v, d.flag.anchor)})."
        if d.env is not None:
            ch = f" ({', '.join(d.env.choices)})" if d.env.choices else ""
            return f"{d.env.name} unset{ch}", f"vLLM {v.version} chooses it with {d.env.name} ({_url(v, d.env.anchor)})."
        return "not configurable in this release", ""
    if kind == "attention":
        order = v.attention_priority_cuda
        seq = order.get("sm121" if ctx.gpu is GPU.DGX_SPARK else "sm120") or order.get("sm120") or next(
            iter(order.values()), [])
        return "auto", (f"vLLM {v.version} tries {' -> '.join(seq)} on CUDA ({_url(v, v.attention_priority_anchor)})."
                        if seq else "")
    if kind == "kv_cache":
        ch = _choices(ctx, "--kv-cache-dtype")
        return f"--kv-cache-dtype {ctx.setup.kv_cache_dtype}", (f"vLLM {v.version}'s choices: {', '.join(ch)}." if ch else "")
    if kind == "cuda_graphs":
        for flag in ("--max-cudagraph-capture-size", "--cuda-graph-sizes", "--max-seq-len-to-capture"):
            if flag in v.serve_flags:
                return f"default ({flag})", f"vLLM {v.version} sets the largest captured batch with {flag}."
        return "default", ""
    if kind == "jit_cache":
        jit = getattr(ctx.flashinfer, "jit_load_order", None)
        mark = (f" (unread for FlashInfer {b.flashinfer}; as in FlashInfer {ctx.fi_from}, the nearest release read)"
                if ctx.fi_unread and ctx.fi_from else "")
        if jit is not None and jit.aot_before_jit:
            return "pip uninstall flashinfer-jit-cache before patching FlashInfer, then clear the JIT cache" + mark, ""
        return "clear the JIT cache after patching FlashInfer (sm120lab patch apply --clear-jit-cache)" + mark, ""
    raise ValueError(f"compute: unknown release-dependent kind {kind!r}")


def published_backends() -> dict:
    """``data/published/backends.yaml`` by backend name."""
    from .facts import published_yaml

    doc = published_yaml("backends.yaml")
    return {b["name"]: b for b in doc.get("backends", []) if isinstance(b, dict) and "name" in b}


# Choices users ask about for NVFP4 that a release may not map NVFP4 to: they get a row saying so.
ALSO_ROW = ("triton",)


def backend_rows(ctx: Context) -> list[dict]:
    """One row per NVFP4 ``--moe-backend`` choice of the release: whether its own check accepts
    SM12x, what public reports say on SM12x (with links), known failure modes, how to check it here."""
    pub = published_backends()
    sm = "121" if ctx.gpu is GPU.DGX_SPARK else "120"
    rows = []
    for m in ctx.vllm.moe_backends:
        nvfp4 = "nvfp4" in m.formats
        if not nvfp4 and m.name not in ALSO_ROW:
            continue
        p = pub.get(m.name, {})
        reports = [r for r in p.get("reports", []) if sm in {str(x) for x in r.get("sm", [])} or not r.get("sm")]
        outcomes = {}
        for r in reports:
            outcomes[r.get("outcome", "unknown")] = outcomes.get(r.get("outcome", "unknown"), 0) + 1
        rows.append({
            "name": m.name,
            "nvfp4": nvfp4,
            "sm12x": m.sm121.value if ctx.gpu is GPU.DGX_SPARK else m.sm12x.value,
            "check": _url(ctx.vllm, m.sm12x_anchor),
            "auto": m.auto_order if m.auto_selected else None,
            "reports": [{k: r.get(k) for k in ("url", "date", "gpu", "outcome", "tok_s", "summary")} for r in reports],
            "outcomes": outcomes,
            "failure_modes": [{"what": f.get("what"), "url": f.get("url")} for f in p.get("failure_modes", [])],
            "check_here": ([f"sm120lab check --preset {ctx.setup.model} --device cuda --backend {a}"
                            for a in CHECK_ADAPTERS.get(m.name, ())] or ["no adapter in sm120lab check yet"]),
        })
    return rows
