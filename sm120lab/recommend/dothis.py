"""The do-this block: one block to copy for a GPU, a setup and a vLLM release.

Every value in it is read from recorded data, never typed in:

- versions: the chosen vLLM release (default: the newest recorded release whose vLLM, FlashInfer and
  torch facts were all read from their wheels, :func:`default_release`; the block says so in one
  sentence, :func:`release_reason`) and the FlashInfer and torch releases its wheel pins exactly
  (``Requires-Dist``), so the install line is a set pip accepts (``upstream.check_install`` proves it
  offline on the recorded metadata); a release asked for whose pinned FlashInfer wheel was not read
  still answers: its FlashInfer facts are marked unread and taken from the nearest release read
  (:func:`unread_pins`, :func:`nearest_read`);
- the MoE backend: among the ``--moe-backend`` choices the release offers whose own support check
  does not reject capability 12.x, the one with the fastest published per-user decode rate that
  came with correct output on the same SM (``data/published/tok_s.csv``, concurrency nearest to
  the setup's users, the same GPU preferred);
- ``vllm serve``: the checkpoint, TP/PP, that backend, the KV-cache dtype and the max model length,
  each flag checked against the release's recorded ``serve_flags`` (a flag the release lacks is
  left out and the block says so);
- exports: only variables the pinned FlashInfer reads (its recorded ``env_vars``), with the value its
  own arch-list logic picks for this GPU on CUDA 13.0;
- patch: only when the chosen backend runs the FlashInfer CUTLASS kernels that overflow SM120's
  shared memory;
- verify: ``sm120lab check`` on the setup's model shape with the adapters of the chosen backend;
- expect: the published numbers for the same setup with their source, and the decode ceiling.

Unverified on SM120 hardware until an archived SM120 run says otherwise.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass, field

from .setup import GPU, Fit, Setup, fit, parse_gpu

CUDA_KNOWN_GOOD = "13.0"

# sm120lab check adapters that exercise each --moe-backend choice (sm120lab.moe.backends).
CHECK_ADAPTERS: dict[str, tuple[str, ...]] = {
    "marlin": ("vllm-marlin",),
    "cutlass": ("vllm-cutlass-fp4",),
    "flashinfer_cutlass": ("flashinfer-cutlass",),
    "flashinfer_b12x": ("flashinfer-b12x-w4a4", "flashinfer-b12x-w4a16"),
    "b12x": (),
    "flashinfer_cutedsl": (),  # the SM100 CuTe-DSL MoE; FlashInfer 0.7's SM12x runners have their own adapters
    "flashinfer_trtllm": (),
    "triton": ("triton-w4a16",),
}
# Backends that run FlashInfer's CUTLASS SM120 grouped GEMMs (the stage-count overflow).
STAGE_COUNT_BACKENDS = ("flashinfer_cutlass",)
STAGE_COUNT_PATCH = "fi-sm120-moe-stage-count"


@dataclass
class Export:
    name: str
    value: str
    why: str
    read_by: str  # the package whose recorded env vars hold the name
    read_from: str = ""  # the version of read_by whose record gave the value, when not the pinned one (unread)


@dataclass
class Unread:
    """A release the chosen vLLM pins whose facts were not read from its wheel (no record in data/upstream)."""

    dist: str
    version: str | None  # the exact pin, None when the release pins no exact version
    why: str  # why it is unread: what was observed, where and when
    nearest: str | None  # the nearest recorded release of ``dist`` whose facts stand in, marked so


@dataclass
class Expectation:
    what: str
    value: str
    source: str


@dataclass
class DoThis:
    """One block to copy (module docstring). ``problems`` lists anything the block could not
    satisfy (empty when every flag, variable and pin checked out)."""

    gpu: str
    product: str
    setup: Setup
    fit: Fit
    vllm: str
    flashinfer: str
    torch: str
    cuda: str
    install: str
    exports: list[Export]
    serve: list[str]
    moe_backend: str
    moe_backend_why: str
    patch: str
    patch_why: str
    verify: str
    expect: list[Expectation]
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    release_why: str = ""  # one sentence: why this vLLM release (:func:`release_reason`)
    unread: list[Unread] = field(default_factory=list)

    @property
    def serve_line(self) -> str:
        return shlex.join(self.serve)

    def lines(self) -> list[tuple[str, str]]:
        """``(label, command)`` in reading order: the commands to copy, each one whole line (an export whose
        value stands in for an unread FlashInfer carries a shell comment saying so)."""
        out = [("install", self.install)]
        out += [("export", f"export {e.name}={shlex.quote(e.value)}"
                 + (f"  # unread for {e.read_by} {self.flashinfer}: {e.read_by} {e.read_from}'s value"
                    if e.read_from else "")) for e in self.exports]
        out += [("serve", self.serve_line), ("patch", self.patch), ("verify", self.verify)]
        return out

    def reasons(self) -> list[tuple[str, str, str]]:
        """``(label, text, source)`` behind the commands, in reading order (``source`` only for expectations;
        an empty label for notes)."""
        out = [("release", self.release_why, "")] if self.release_why else []
        out += [("backend", self.moe_backend_why, "")]
        out += [(e.name, e.why, "") for e in self.exports]
        out += [("patch", self.patch_why, ""), ("memory", self.fit.describe(), "")]
        out += [(f"expect, {x.what}", x.value, x.source) for x in self.expect]
        out += [("", n, "") for n in self.notes] + [("PROBLEM", p, "") for p in self.problems]
        return out

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu, "product": self.product, "setup": self.setup.to_dict(),
            "fit": {"fits": self.fit.fits, "held_GB": round(self.fit.held_GB, 2),
                    "usable_GB": round(self.fit.usable_GB, 2), "text": self.fit.describe()},
            "versions": {"vllm": self.vllm, "flashinfer-python": self.flashinfer, "torch": self.torch,
                         "cuda": self.cuda},
            "install": self.install,
            "exports": [{"name": e.name, "value": e.value, "why": e.why, "read_by": e.read_by,
                         "read_from": e.read_from or None} for e in self.exports],
            "release_why": self.release_why,
            "unread": [{"dist": u.dist, "version": u.version, "why": u.why, "nearest": u.nearest} for u in self.unread],
            "serve": self.serve, "serve_line": self.serve_line,
            "moe_backend": self.moe_backend, "moe_backend_why": self.moe_backend_why,
            "patch": self.patch, "patch_why": self.patch_why, "verify": self.verify,
            "expect": [{"what": x.what, "value": x.value, "source": x.source} for x in self.expect],
            "notes": self.notes, "problems": self.problems,
        }

    def title(self) -> str:
        s = self.setup
        return (f"Do this: {s.n_gpus}x {self.product}, {s.model}, TP{s.tp} PP{s.pp}, {s.users} user(s), "
                f"vLLM {self.vllm}")

    def to_text(self, width: int = 80) -> str:
        """Plain text for a terminal of ``width`` columns. Commands stay on one line each (a
        terminal wraps them visually; copying gives the whole command); prose wraps at spaces and
        never splits a word."""
        from .render import fill

        heads = {"install": "# install (one set that installs together)", "export": "# exports", "serve": "# serve",
                 "patch": "# patch", "verify": "# verify on your GPU (exit 1 on garbage)"}
        out = [fill(self.title(), width), ""]
        for label, cmd in self.lines():
            if heads.get(label):
                out.append(heads.pop(label))
            if label == "serve" and "export" in heads:  # no export line: say so under its heading
                out += [heads.pop("export"), "# (none needed)", heads.pop("serve")]
            out.append(cmd)
        out += ["", "Why:"]
        for label, text, source in self.reasons():
            if label.startswith("expect, "):  # listed under one heading
                if "What to expect:" not in out:
                    out.append("What to expect:")
                label = label[len("expect, "):]
            line = f"{label}: {text}" if label else text
            out.append(fill(f"{line} ({source})" if source else line, width, "  "))
        return "\n".join(out)

    def to_markdown(self) -> str:
        out = [f"**{self.title()}**", "", "```bash", *(cmd for _, cmd in self.lines()), "```", ""]
        for label, text, source in self.reasons():
            text = f"{text} ({source})" if source else text
            out.append(f"- **{label}**: {text}" if label else f"- {text}")
        return "\n".join(out)

    def to_html(self) -> str:
        """Safe HTML (every value escaped): a ``<pre>`` to copy, then the reasons."""
        e = html.escape
        cmds = "\n".join(cmd for _, cmd in self.lines())
        why = []
        for label, text, source in self.reasons():
            text = e(text) + (f" ({_link(source)})" if source else "")
            why.append(f"<li><b>{e(label)}</b>: {text}</li>" if label else f"<li>{text}</li>")
        return (f"<div class='do-this'><h2>{e(self.title())}</h2>"
                f"<pre style='white-space:pre-wrap;overflow-wrap:anywhere'>{e(cmds)}</pre>"
                f"<ul>{''.join(why)}</ul></div>")


def _link(source: str) -> str:
    s = html.escape(source)
    return f"<a href='{s}'>{s}</a>" if source.startswith(("https://", "http://")) else s


# ----------------------------------------------------------------------------------------------
# choices


def _same_sm(gpu: GPU) -> tuple[str, ...]:
    """GPUs whose published numbers speak for ``gpu``: the GPU itself first, then those of the same SM."""
    return (gpu.value, "rtx-pro-6000", "rtx-5090") if gpu is not GPU.DGX_SPARK else (gpu.value,)


def published_rows(gpu: GPU) -> list[dict]:
    """Published rows (data/published/tok_s.csv) for ``gpu``'s SM, with ``per_user_tok_s``."""
    from ..roofline.published import load_published

    df = load_published()
    keep = _same_sm(gpu)
    rows = df[df["gpu"].isin(keep)].to_dict("records")
    return [r for r in rows if r["gpu"] in keep]


def choose_moe_backend(gpu: GPU, setup: Setup, offered: dict) -> tuple[str, str, list[dict]]:
    """The MoE backend for the block (module docstring) and the published rows behind it.

    Args:
        offered: ``name -> MoeBackendFact`` of the chosen vLLM release.

    Returns:
        ``(name, why, evidence rows)``.

    Raises:
        ValueError: no offered backend has a correct published result on this SM.
    """
    rows = [r for r in published_rows(gpu) if r["correct_output"] == "yes" and r["vllm_moe_backend"]
            and r["per_user_tok_s"] == r["per_user_tok_s"]]
    usable = [r for r in rows if r["vllm_moe_backend"] in offered
              and getattr(offered[r["vllm_moe_backend"]], "sm12x", "unknown") != "rejects"]
    if not usable:
        raise ValueError(f"gpu: no --moe-backend offered by this vLLM has a published correct result on {gpu.value}")

    def rank(r):
        return (r["gpu"] != gpu.value, abs(int(r["concurrency"]) - setup.users), -float(r["per_user_tok_s"]))

    best = min(usable, key=rank)
    name = best["vllm_moe_backend"]
    same = [r for r in usable if rank(r)[:2] == rank(best)[:2]]
    top: dict[str, dict] = {}
    for r in same:
        k = r["vllm_moe_backend"]
        if k != name and (k not in top or float(r["per_user_tok_s"]) > float(top[k]["per_user_tok_s"])):
            top[k] = r
    others = [f"{k} {_said(r)}" for k, r in sorted(top.items(), key=lambda kv: -float(kv[1]["per_user_tok_s"]))]
    why = (f"{name}: the fastest published correct result on {best['gpu']} at {best['concurrency']} user(s): "
           f"{_said(best)} tok/s per user ({best['backend']}, {best['source']})"
           + (f"; others there: {', '.join(others)} tok/s per user" if others else "") + ".")
    return name, why, same


def _said(r: dict) -> str:
    """A published row's per-user tok/s as reported: the range and the midpoint that ranks it
    ("46-49 (midpoint 47.5)"), or an aggregate figure divided by its users, said so."""
    from ..roofline.published import reported_tok_s

    said = reported_tok_s(r["tok_s_low"], r["tok_s_high"])
    if r.get("tok_s_basis") == "aggregate":
        return f"{float(r['per_user_tok_s']):.3g} (aggregate {said} / {r['concurrency']} users)"
    return said


def _pinned(rec, dist: str) -> str | None:
    """The exact version ``rec`` pins ``dist`` to (``==X``), else None."""
    spec = (rec.pins or {}).get(dist, "")
    return spec[2:] if spec.startswith("==") and "," not in spec else None


def _arch_list_value(fi_rec, gpu: GPU, cuda: str) -> tuple[str | None, str]:
    """What the FlashInfer record says its own arch-list logic picks for ``gpu`` on ``cuda``."""
    cap = "12.1" if gpu is GPU.DGX_SPARK else "12.0"
    for r in getattr(fi_rec, "arch_list", []) or []:
        if r.capability == cap and r.cuda == cuda and not r.env_arch_list:
            return r.result, r.case
    return None, ""


def recipe_flags(checkpoint: str) -> list[str]:
    """The ``vllm serve`` flags of the vLLM recipe for ``checkpoint`` (data/published/recipes.yaml)."""
    from .facts import published_yaml

    for r in published_yaml("recipes.yaml").get("recipes", []):
        if r.get("checkpoint") == checkpoint:
            return [str(f) for f in r.get("flags") or []]
    return []


def _patch_covers(patch_id: str, flashinfer_version: str) -> bool:
    """Whether a patch spec for ``flashinfer_version`` holds ``patch_id`` (sm120lab/patches/specs)."""
    from ..patches.spec import SpecError, load_specs

    try:
        specs = load_specs("flashinfer-python", flashinfer_version)
    except SpecError:
        return False
    return any(p.id == patch_id for p in specs.patches)


def arch_list_for(flashinfer_version: str, gpu: str | GPU = GPU.RTX_PRO_6000, cuda: str = CUDA_KNOWN_GOOD) -> str | None:
    """FLASHINFER_CUDA_ARCH_LIST as the guide sets it for a FlashInfer release: what that release's own
    arch-list logic picks for ``gpu`` on ``cuda`` (None when the release is not recorded or errors)."""
    from .. import upstream

    try:
        rec = upstream.load("flashinfer-python", flashinfer_version)
    except ValueError:
        return None
    value, _case = _arch_list_value(rec, parse_gpu(gpu), cuda)
    return None if value is None or value.startswith("error") else value


def installable(version: str) -> tuple[bool, str]:
    """Whether vLLM ``version`` installs with its exact FlashInfer and torch pins; ``(ok, reason)``.

    The recorded full resolve (:mod:`sm120lab.upstream.full_resolve`: pip's real resolver over the whole
    dependency tree, on the package index the recording machine reached, with its date) decides when
    there is one; its failure is worded as that index's, never as PyPI's. Without one, the pins are
    checked against the releases the recorded wheels came from (``upstream.unavailable()`` lists the
    pinned versions that index did not serve), and the reason says so."""
    from .. import upstream
    from ..upstream.full_resolve import load_resolve, reason

    doc = load_resolve(version)
    if doc is not None:
        return bool(doc["ok"]), "" if doc["ok"] else reason(doc)
    rec = upstream.load("vllm", version)
    missing = {(u.dist, u.version) for u in upstream.unavailable()}
    for dist in ("flashinfer-python", "torch"):
        pin = _pinned(rec, dist)
        if pin is None:
            return False, f"vLLM {version} pins no exact {dist} ({rec.pins.get(dist)!r})"
        if (dist, pin) in missing:
            return False, (f"vLLM {version} pins {dist}=={pin}, which the package index the records were read "
                           f"from did not serve (`sm120lab upstream record-all`; no full resolve recorded)")
        if pin not in upstream.versions(dist):
            return False, f"{dist} {pin} (pinned by vLLM {version}) is not recorded"
    return True, ""


def install_note(version: str) -> str:
    """What the block's install line rests on: the recorded full resolve (what, where, when), or that none
    was recorded and only the pins were checked against each other."""
    from ..upstream.full_resolve import load_resolve, reason

    doc = load_resolve(version)
    if doc is None:
        return (f"Install line: no full resolve of vLLM {version} recorded (`sm120lab upstream full-resolve "
                f"{version}`); only its pins were checked against each other.")
    return f"Install line: {reason(doc)}."


#: the releases whose facts the block reads besides vLLM's own: the FlashInfer and torch it pins exactly
FACT_DISTS = ("flashinfer-python", "torch")


def _why_unread(version: str, dist: str, pin: str) -> str:
    """Why ``dist`` ``pin`` (pinned by vLLM ``version``) has no record: what was observed, where and when,
    from the recorded full resolve or the record index (never a claim about an index not seen)."""
    from .. import upstream
    from ..upstream.full_resolve import load_resolve

    doc = load_resolve(version)
    if doc is not None and not doc["ok"] and str(doc.get("missing") or "").startswith(f"{dist}=={pin}"):
        return (f"the full resolve of vLLM {version} on {doc['where']}, {doc['date_utc']}, found no distribution "
                f"for {dist}=={pin}")
    if any(u.dist == dist and u.version == pin for u in upstream.unavailable()):
        return "the package index the records were read from did not serve it (`sm120lab upstream record-all`)"
    return f"no record of it in data/upstream (`sm120lab upstream record {dist} {pin}`)"


def unread_pins(version: str) -> list[Unread]:
    """The FlashInfer and torch releases vLLM ``version`` pins whose facts were not read from their wheels
    (no loadable record in data/upstream), each with why and the nearest release read (:func:`nearest_read`);
    empty when vLLM's, FlashInfer's and torch's facts were all read.

    Raises:
        ValueError: vLLM ``version`` itself is not recorded.
    """
    from .. import upstream

    rec = upstream.load("vllm", version)
    out = []
    for dist in FACT_DISTS:
        pin = _pinned(rec, dist)
        if pin is None:
            out.append(Unread(dist, None, f"vLLM {version} pins no exact {dist} ({rec.pins.get(dist)!r})", None))
        elif pin not in upstream.versions(dist):
            out.append(Unread(dist, pin, _why_unread(version, dist, pin), nearest_read(dist, pin)))
    return out


def nearest_read(dist: str, version: str) -> str | None:
    """The recorded release of ``dist`` nearest ``version``: the newest older one, else the oldest newer one
    (None when none is recorded)."""
    from packaging.version import Version

    from .. import upstream

    have = [v for v in upstream.versions(dist) if v != version]
    older = [v for v in have if Version(v) < Version(version)]
    newer = [v for v in have if Version(v) > Version(version)]
    return older[-1] if older else (newer[0] if newer else None)


def default_release() -> str:
    """The newest recorded vLLM release whose vLLM, FlashInfer and torch facts were all read from their
    wheels (:func:`unread_pins` empty)."""
    from .. import upstream

    for v in reversed(upstream.versions("vllm")):
        if not unread_pins(v):
            return v
    raise ValueError("vllm: no recorded release has its pinned FlashInfer and torch recorded too; record them with "
                     "`sm120lab upstream record-all`")


def _unread_text(u: Unread) -> str:
    if u.version is None:
        return u.why
    return f"{u.dist} {u.version}, whose wheel was not read ({u.why})"


def release_reason(version: str, asked: bool = False) -> str:
    """One sentence: why the block answers for vLLM ``version``, the default (:func:`default_release`, with
    each newer recorded release it passed over and what of it was unread) or one asked for (``--vllm``,
    with the facts of it that are unread and the nearest release they were read from)."""
    from packaging.version import Version

    from .. import upstream

    rec = upstream.load("vllm", version)
    fi, torch_v = _pinned(rec, "flashinfer-python") or "?", _pinned(rec, "torch") or "?"
    all_read = "whose vLLM, FlashInfer and torch facts were all read from their wheels (data/upstream)"
    unread = unread_pins(version)
    if not asked:
        newer = [v for v in upstream.versions("vllm") if Version(v) > Version(version)]
        passed = [f"{v} pins {' and '.join(_unread_text(u) for u in unread_pins(v))}" for v in newer]
        head = (f"vLLM {version} (FlashInfer {fi}, torch {torch_v}) is the newest recorded release {all_read}")
        return head + (f"; the newer {'; '.join(passed)}." if passed else ".")
    head = f"vLLM {version}, as asked (--vllm)"
    default = default_release()
    tail = "" if default == version else f"; the default is {default}, the newest recorded release {all_read}"
    if not unread:
        return f"{head}: its vLLM, FlashInfer ({fi}) and torch ({torch_v}) facts were all read from their wheels{tail}."
    parts = []
    for u in unread:
        stand_in = (f", so the {u.dist} facts below are marked unread, each as read from {u.dist} {u.nearest}, "
                    "the nearest release read" if u.nearest else f", and no {u.dist} release is recorded to stand in")
        parts.append(_unread_text(u) + stand_in)
    return f"{head}: its own facts are read from its wheel, but it pins {'; and '.join(parts)}{tail}."


def build(gpu: str | GPU = "rtx-pro-6000", setup: Setup | None = None, vllm: str | None = None) -> DoThis:
    """The do-this block for ``gpu`` and ``setup`` with vLLM release ``vllm`` (default: :func:`default_release`;
    one asked for whose pinned FlashInfer was not read answers with those facts marked unread).

    Raises:
        ValueError: an unknown GPU or an unrecorded vLLM release (``vllm: ...``, one line).
    """
    from .. import upstream
    from .facts import ceiling_value, checkpoint_of
    from .setup import resolve_setup

    g = parse_gpu(gpu)
    setup = setup or resolve_setup(g)
    try:
        version = vllm or default_release()
        rec = upstream.load("vllm", version)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith("vllm:") else f"vllm: {msg}") from None
    problems: list[str] = []
    notes: list[str] = []
    ok, why_not = installable(version)
    if ok:
        notes.append(install_note(version))
    else:  # the install line's failure, as observed where it was observed (never PyPI's)
        problems.append(f"Install line: {why_not}.")
    unread = unread_pins(version)
    release_why = release_reason(version, asked=vllm is not None)
    fi_v, torch_v = _pinned(rec, "flashinfer-python"), _pinned(rec, "torch")
    if fi_v is None:
        problems.append(f"vLLM {version} pins no exact flashinfer-python ({rec.pins.get('flashinfer-python')!r})")
    fi_unread = next((u for u in unread if u.dist == "flashinfer-python"), None)
    fi_from = fi_unread.nearest if fi_unread is not None else fi_v  # the FlashInfer whose facts the block reads
    fi_rec = upstream.load("flashinfer-python", fi_from) if fi_from else None
    offered = {b.name: b for b in rec.moe_backends}
    if rec.moe_backend_flag and offered:
        name, why, _rows = choose_moe_backend(g, setup, offered)
    else:
        name, why = "auto", (f"vLLM {version} has no --moe-backend flag; it picks the NVFP4 MoE backend itself "
                             f"in this order: {', '.join(rec.nvfp4_auto_order) or 'not readable'}.")
    reqs = [f"vllm=={version}"] + ([f"flashinfer-python=={fi_v}"] if fi_v else []) + (
        [f"torch=={torch_v}"] if torch_v else [])
    install = "pip install " + " ".join(shlex.quote(r) for r in reqs)

    exports: list[Export] = []
    arch, case = _arch_list_value(fi_rec, g, CUDA_KNOWN_GOOD) if fi_rec else (None, "")
    if arch and not arch.startswith("error") and "FLASHINFER_CUDA_ARCH_LIST" in (fi_rec.env_vars or {}):
        sm = "12.1" if g is GPU.DGX_SPARK else "12.0"
        picks = (f"what FlashInfer {fi_v}'s own arch-list logic picks" if fi_unread is None else
                 f"UNREAD for FlashInfer {fi_v} (its wheel was not read); this is what FlashInfer {fi_from}, the "
                 "nearest release read, picks with its own arch-list logic")
        exports.append(Export(
            "FLASHINFER_CUDA_ARCH_LIST", arch,
            f"{picks} for SM {sm} on CUDA {CUDA_KNOWN_GOOD} ({case}); set explicitly so a stale bare '12.0' "
            f"(compute_{sm.replace('.', '')}, no FP4 MMA) from an older recipe cannot win", "flashinfer-python",
            read_from=fi_from if fi_unread is not None else ""))

    ckpt = checkpoint_of(setup.model)
    serve = ["vllm", "serve", ckpt]
    wanted = [("--tensor-parallel-size", str(setup.tp)), ("--pipeline-parallel-size", str(setup.pp))]
    if name != "auto":
        wanted.append(("--moe-backend", name))
    wanted += [("--kv-cache-dtype", setup.kv_cache_dtype), ("--max-model-len", str(setup.max_model_len))]
    if "--trust-remote-code" in recipe_flags(ckpt):
        wanted.append(("--trust-remote-code", None))
    for flag, value in wanted:
        f = rec.serve_flags.get(flag)
        if f is None:
            notes.append(f"vLLM {version} has no {flag}; left out.")
            continue
        if value is not None and f.choices is not None and value not in f.choices:
            problems.append(f"{flag} {value}: not one of vLLM {version}'s choices {f.choices}")
            continue
        serve += [flag] if value is None else [flag, value]

    if name in STAGE_COUNT_BACKENDS and not (fi_v and _patch_covers(STAGE_COUNT_PATCH, fi_v)):
        patch = f"# no patch recorded for FlashInfer {fi_v or '?'}"
        patch_why = (f"{name} runs FlashInfer's CUTLASS SM120 grouped GEMMs, whose shared-memory overflow the "
                     f"{STAGE_COUNT_PATCH} patch fixes, but sm120lab has no patch spec for FlashInfer {fi_v or '?'}"
                     + (" (its wheel was not read)." if fi_unread is not None else "."))
    elif name in STAGE_COUNT_BACKENDS:
        aot = fi_rec is not None and fi_rec.jit_load_order.aot_before_jit
        patch = ("pip uninstall -y flashinfer-jit-cache && " if aot else "") + \
            "sm120lab patch apply --only fi-sm120-moe-stage-count --clear-jit-cache"
        patch_why = ("FlashInfer's SM120 CUTLASS grouped GEMM picks 3 pipeline stages for two tiles whose shared "
                     "storage then exceeds 101,376 B; the patch gives them 2 stages (sm120lab cutlass-smem)."
                     + (f" FlashInfer {fi_from} loads an installed flashinfer-jit-cache module before any JIT build, "
                        "so a patched source only takes effect without that package"
                        + (f" (UNREAD for FlashInfer {fi_v}: {fi_from} is the nearest release read)." if fi_unread
                           else ".") if aot else ""))
    else:
        patch = "# no patch needed"
        patch_why = (f"{name} does not run FlashInfer's CUTLASS SM120 grouped GEMMs, whose shared-memory overflow "
                     "is the one patch that matters; none of the seed report's edits is needed.")
    adapters = CHECK_ADAPTERS.get(name, ()) or ("triton-w4a16",)
    verify = (f"sm120lab check --preset {setup.model} --device cuda " + " ".join(f"--backend {a}" for a in adapters))

    notes.extend(verify_evidence(setup.model, adapters))
    expect = []
    ceiling, _extra = ceiling_value(g.value, setup)
    for r in published_rows(g):
        same = (r["gpu"] == g.value and r["model"] == setup.model and int(r["tp"]) == setup.tp
                and int(r["pp"]) == setup.pp and int(r["concurrency"]) == setup.users
                and r["vllm_moe_backend"] == name and r["correct_output"] == "yes")
        if same:
            lo, hi = r["tok_s_low"], r["tok_s_high"]
            rng = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
            expect.append(Expectation(f"published, {r['backend']}", f"{rng} tok/s {r['tok_s_basis'].replace('_', ' ')}",
                                      r["source_url"]))
    if not expect:
        expect.append(Expectation("published", f"no published number for {name} at this exact setup",
                                  "data/published/tok_s.csv"))
    expect.append(Expectation("decode ceiling", ceiling, "sm120lab roofline"))
    notes.append("Unverified on SM120 hardware: read from the wheels and public reports, not run on an SM120 GPU.")
    from .core import load_rules

    product = str(((load_rules().get("gpus") or {}).get(g.value) or {}).get("product", g.value))
    return DoThis(gpu=g.value, product=product, setup=setup, fit=fit(g, setup), vllm=version,
                  flashinfer=fi_v or "?", torch=torch_v or "?", cuda=CUDA_KNOWN_GOOD, install=install,
                  exports=exports, serve=serve, moe_backend=name, moe_backend_why=why, patch=patch,
                  patch_why=patch_why, verify=verify, expect=expect, notes=notes, problems=problems,
                  release_why=release_why, unread=unread)


def verify_evidence(model: str, adapters: tuple[str, ...]) -> list[str]:
    """Where the verify line's own command ran: per adapter, the recorded ``sm120lab check --json`` reports
    (``data/correctness/*/check_*.json``) of that backend at ``model``'s preset, with their GPU, evidence
    level (:func:`sm120lab.recommend.core.evidence_of`), date, verdicts and error range; nothing when none."""
    import json

    from ..paths import data_dir, repo_root
    from .core import evidence_of

    out = []
    for backend in adapters:
        hits = []
        for f in sorted((data_dir() / "correctness").glob("*/check_*.json")):
            try:
                d = json.loads(f.read_text())
                cmd = str(d["command"])
                rep = next(b for b in d["backends"] if b.get("backend") == backend and b.get("status") == "ran")
            except (OSError, ValueError, KeyError, TypeError, StopIteration):
                continue
            if f"--backend {backend}" in cmd and f"--preset {model}" in cmd:
                hits.append((f, d, rep))
        if not hits:
            continue
        rel = [h[2].get("rel_fro") for h in hits if isinstance(h[2].get("rel_fro"), (int, float))]
        verdicts = sorted({str(h[2].get("verdict")) for h in hits})
        tokens = sorted({int(h[1]["problem"]["tokens"]) for h in hits})
        first = hits[0]
        gpu = first[1]["env"]["gpu"]["name"]
        level = evidence_of(first[0].relative_to(repo_root()).as_posix()).value
        day = str(first[1]["env"].get("timestamp_utc", ""))[:10]
        versions = sorted({str((h[2].get("notes") or {}).get("vllm")) for h in hits} - {"None"})
        extra = f" with vLLM {', '.join(versions)}'s own Marlin" if versions else ""
        out.append(f"The verify line's command for {backend} ran on the {gpu} ({level}, {day}): "
                   f"{'/'.join(verdicts)} at T={', '.join(map(str, tokens))}"
                   + (f", rel. error {min(rel):.1e}-{max(rel):.1e} vs the exact reference" if rel else "")
                   + f"{extra} ({first[0].parent.relative_to(repo_root()).as_posix()}); "
                   "unverified on SM120 hardware.")
    return out


def answer_block(gpu: str | GPU | None = None, machine: dict | None = None, vllm: str | None = None) -> DoThis:
    """The do-this block every page heads with (report.html, README, notebooks).

    Args:
        gpu: the GPU to answer for; default: this machine's (``machine``, an envinfo record) when it
            is an SM120/SM121 GPU, else ``rtx-pro-6000`` (the seed report's).
        vllm: the vLLM release (default: :func:`default_release`).

    Returns:
        :class:`DoThis` for the GPU's default setup (``.to_html()``, ``.to_text()``, ``.to_markdown()``).
    """
    if gpu is None and machine:
        from .facts import detect_gpu

        try:
            gpu = detect_gpu(machine)
        except ValueError:
            gpu = None
    return build(gpu or GPU.RTX_PRO_6000, None, vllm)
