"""Run backends on one problem and diff them against the reference.

``check(problem, backends)`` runs the reference (fp64 on CPU, fp32 on CUDA) and its per-slot
outputs, the unquantized-weight forward (where the problem keeps its bf16 weights), then for each
backend: skip with a one-line reason, or run into a sentinel-poisoned buffer (main run with the
real routing weights + one probe per top-k slot with one-hot weights), diff (:mod:`.metrics`:
against the reference, and per cell and per token against the backend's expected numerics:
emulated-w4a4 for W4A4 backends, the reference otherwise, and the unquantized-weight forward), and
judge (:mod:`.verdict`) against the envelope (:mod:`.envelope`) that ``emulated-w4a4`` and the
weight-only error set on the same problem. Every report carries the problem's seed, and
:meth:`CheckResult.to_json` a command that redraws the problem.

:func:`default_device` is where the harness runs by default: the GPU when torch sees one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from sm120lab.constants import SENTINEL

from .backends import Backend, get_backend
from .envelope import (
    Envelope,
    activation_family,
    make_envelope,
    member_spread,
    null_bands,
    unquantized_reference_slots,
    weight_format_family,
)
from .jsonable import jsonable
from .metrics import (
    CellDiff,
    OutputDiff,
    TokenDiff,
    as_alternates,
    cell_diff,
    expert_errors,
    mixing_dev,
    output_diff,
    token_diff,
)
from .problem import one_thread_for_small
from .reference import moe_reference_slots
from .verdict import Verdict, judge

__all__ = ["BackendReport", "CheckResult", "check", "default_device", "one_thread_for_small", "reference_outputs",
           "run_backend"]



def default_device() -> str:
    """``"cuda"`` if torch sees a GPU, else ``"cpu"``: where problems are drawn and backends run by default."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class BackendReport:
    name: str
    status: str                      # "ran" | "skipped" | "error"
    reason: str = ""
    verified: bool = True
    numerics: str = ""
    seed: int | None = None          # the problem's seed (replay)
    notes: dict = field(default_factory=dict)
    seconds: float = 0.0
    diff: OutputDiff | None = None
    diff_twin: OutputDiff | None = None  # vs the expected numerics, where they are not the reference
    diff_alt: OutputDiff | None = None   # vs the unquantized-weight forward, where computed
    cells: CellDiff | None = None
    token_dev: TokenDiff | None = None
    per_expert: np.ndarray | None = None
    mixing: np.ndarray | None = None     # per token: main run vs the weighted sum of its own probes
    # W4A4: the null family's band, the largest deviation from emulated-w4a4 any legitimate activation quantizer
    # reaches (envelope.null_bands; the backend itself left out when it is a member)
    expert_band: np.ndarray | None = None  # pooled, per expert [E]
    cell_band: np.ndarray | None = None    # per (token, expert) cell [T, k]
    token_band: np.ndarray | None = None   # per main-run token [T]
    layer_band: float | None = None        # relative error of the whole output
    topk_ids: np.ndarray | None = None
    output: torch.Tensor | None = None
    slots: torch.Tensor | None = None
    main: torch.Tensor | None = None  # the main-run output on the problem's device (kept with ``slots``)
    verdict: Verdict | str = ""
    reasons: list[str] = field(default_factory=list)
    flagged_experts: list[int] = field(default_factory=list)
    flagged_tokens: list[int] = field(default_factory=list)
    format_mismatch: bool = False
    shared: bool = False

    def summary(self) -> dict:
        out = {"backend": self.name, "status": self.status, "verdict": str(self.verdict or self.status),
               "verified": self.verified, "numerics": self.numerics, "seed": self.seed}
        if self.reason:
            out["reason"] = self.reason
        if self.diff is not None:
            out.update(self.diff.summary())
            if self.cells is not None:
                rel, dev = self.cells.rel, self.cells.dev
                out["max_cell_err"] = float(np.max(rel)) if rel.size else 0.0
                out["max_cell_dev"] = float(np.max(dev)) if dev.size else 0.0
                dev_alt = self.cells.dev_alt
                if dev_alt is not None:
                    out["max_cell_dev_unquantized"] = float(np.max(dev_alt)) if dev_alt.size else 0.0
                out["per_expert_err"] = self.per_expert
            if self.mixing is not None:
                fin = self.mixing[np.isfinite(self.mixing)]
                out["max_mixing_dev"] = float(fin.max()) if fin.size else 0.0
            out["flagged_experts"] = self.flagged_experts
            out["flagged_tokens"] = self.flagged_tokens
            out["format_mismatch"] = self.format_mismatch
            out["shared_by_all_experts"] = self.shared
            out["reasons"] = self.reasons
            out["seconds"] = round(self.seconds, 4)
        if self.notes:
            out["notes"] = self.notes
        return out


def replay_command(problem) -> str:
    """The ``sm120lab check`` arguments that redraw ``problem`` (same seed, tokens, routing, device type)."""
    from sm120lab.cmdline import command_line

    desc = problem.describe()
    drawn = desc.get("drawn_tokens") or desc["tokens"]
    args = ["check", "--preset", desc["preset"], "--routing", desc["routing"], "--seed", str(desc["seed"]),
            "--device", problem.device.type]
    if desc["routing"] != "single":
        args += ["--tokens", str(drawn)]
    if drawn != desc["tokens"]:
        args += ["--take-tokens", str(desc["tokens"])]
    return command_line("sm120lab", args)


@dataclass
class CheckResult:
    problem: object
    envelope: Envelope
    reports: dict[str, BackendReport]
    reference_seconds: float

    @property
    def any_garbage(self) -> bool:
        return any(r.verdict == Verdict.GARBAGE for r in self.reports.values())

    def table(self) -> list[dict]:
        """One row per backend: the deterministic part of the verdict (no timings), with the problem's seed."""
        rows = []
        for r in self.reports.values():
            row = {"backend": r.name, "verdict": str(r.verdict or r.status), "seed": r.seed}
            if r.diff is not None:
                row.update(rel_err=r.diff.rel_fro, cosine=r.diff.cosine,
                           max_cell_dev=float(np.max(r.cells.dev)) if r.cells is not None and r.cells.dev.size else float("nan"),
                           nan=r.diff.nan, untouched=r.diff.untouched, zero_rows=len(r.diff.zero_rows),
                           flagged_experts=r.flagged_experts[:6], flagged_tokens=r.flagged_tokens[:6])
            else:
                row["reason"] = r.reason
            rows.append(row)
        return rows

    def to_json(self) -> dict:
        """Strict JSON (NaN -> null, inf -> "inf"), with the problem's seed and a command that redraws it."""
        problem = self.problem.describe()
        replay = replay_command(self.problem) if problem.get("replayable", True) else None
        return jsonable({"problem": problem, "replay": replay,
                         "envelope": self.envelope.as_dict(), "reference_seconds": round(self.reference_seconds, 4),
                         "backends": [r.summary() for r in self.reports.values()]})


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _run_into(backend: Backend, problem, dtype) -> tuple[torch.Tensor, dict]:
    out = torch.full((problem.tokens, problem.config.H), SENTINEL, dtype=dtype, device=problem.device)
    notes = backend.run(problem, out) or {}
    return out, notes


def run_backend(backend: Backend | str, problem, ref_out: torch.Tensor, ref_slots: torch.Tensor, *,
                probes: bool = True, keep_output: bool = True, twin_slots: torch.Tensor | None = None,
                keep_slots: bool = False, twin_out: torch.Tensor | None = None, alt_out: torch.Tensor | None = None,
                alt_slots: torch.Tensor | None = None) -> BackendReport:
    """Run one backend (main run + per-slot probes) and diff it; the verdict is set by :func:`check`.

    ``twin_out``/``twin_slots``: outputs of the backend's expected numerics (default: the reference);
    ``alt_out``/``alt_slots``: the weight-format family's outputs (:func:`sm120lab.moe.envelope.weight_format_family`: the
    unquantized-weight forward first), one tensor or a list each, or None; the nearest member counts;
    ``keep_slots``: keep the probe outputs as ``report.slots`` [T, k, H] and the main output as
    ``report.main`` on the device (the emulated-w4a4 twin).
    """
    if isinstance(backend, str):
        backend = get_backend(backend)
    rep = BackendReport(name=backend.name, status="ran", verified=backend.verified, numerics=backend.numerics,
                        seed=getattr(problem, "seed", None))
    reason = backend.skip_reason(problem.device)
    if reason:
        rep.status, rep.reason = "skipped", reason
        return rep
    dtype = backend.output_dtype(problem.device)
    try:
        _sync(problem.device)
        t0 = time.perf_counter()
        out, notes = _run_into(backend, problem, dtype)
        _sync(problem.device)
        rep.seconds = time.perf_counter() - t0
        rep.notes = dict(notes)
        slot_outs = []
        if probes:
            k = problem.config.k
            for j in range(k):
                w = torch.zeros_like(problem.topk_weights)
                w[:, j] = 1.0
                slot_outs.append(_run_into(backend, problem.with_topk_weights(w), dtype)[0])
    except Exception as exc:  # a backend that raises is reported, not fatal
        rep.status, rep.reason = "error", _one_line(exc)
        return rep
    rep.diff = output_diff(out, ref_out)
    rep.diff_twin = None if twin_out is None else output_diff(out, twin_out)
    rep.diff_alt = min((output_diff(out, a) for a in as_alternates(alt_out)), key=lambda d: d.rel_fro, default=None)
    rep.token_dev = token_diff(out, ref_out if twin_out is None else twin_out, alt_out)
    rep.topk_ids = problem.topk_ids.cpu().numpy()
    if probes:
        rep.cells = cell_diff(slot_outs, ref_slots, problem.topk_ids, twin_slots, alt_slots)
        rep.mixing = mixing_dev(out, slot_outs, problem.topk_weights)
        rep.per_expert = expert_errors(rep.cells, problem.topk_ids, problem.config.E)
        if keep_slots:
            rep.slots = torch.stack(slot_outs, dim=1)
    if keep_slots:
        rep.main = out
    if keep_output:
        rep.output = out.detach().cpu()
    return rep


def reference_outputs(problem) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(reference [T, H], per-slot reference [T, k, H], seconds): fp64 on CPU, fp32 on a GPU."""
    dtype = torch.float64 if problem.device.type == "cpu" else torch.float32
    _sync(problem.device)
    t0 = time.perf_counter()
    slots = moe_reference_slots(problem.hidden, problem.topk_ids, problem.w13, problem.w2, dtype=dtype)
    ref = _combine(slots, problem)
    _sync(problem.device)
    return ref, slots, time.perf_counter() - t0


def _combine(slots: torch.Tensor, problem) -> torch.Tensor:
    return (slots * problem.topk_weights.to(slots.dtype).unsqueeze(-1)).sum(dim=1)


def _judged(rep: BackendReport, env: Envelope) -> BackendReport:
    if rep.status == "ran":
        j = judge(rep, env)
        rep.verdict, rep.reasons, rep.format_mismatch, rep.shared = j.verdict, j.reasons, j.format_mismatch, j.shared
        rep.flagged_experts, rep.flagged_tokens = j.flagged_experts, j.flagged_tokens
    else:
        rep.verdict = Verdict(rep.status)
    return rep


def _set_bands(rep: BackendReport, bands: dict) -> None:
    """Hand a W4A4 report the null family's band (:func:`sm120lab.moe.envelope.null_bands`)."""
    for key, value in bands.items():
        setattr(rep, key, value)


def check(problem, backends=None, *, probes: bool = True, keep_output: bool = True, progress=None) -> CheckResult:
    """Diff ``backends`` (names or Backend objects; default: every registered one) on ``problem``.

    ``progress``: optional callable wrapping the backend list (e.g. ``tqdm``).
    """
    from .backends import all_backends

    if backends is None:
        backends = list(all_backends().values())
    backends = [get_backend(b) if isinstance(b, str) else b for b in backends]
    for b in backends:
        if not isinstance(b, Backend):
            raise TypeError(f"backends must be names or Backend objects, got {type(b).__name__}")
    cfg = problem.config
    with one_thread_for_small(problem.device, cfg.E * 3 * cfg.I * cfg.H):
        return _check(problem, backends, probes, keep_output, progress)


def _check(problem, backends, probes, keep_output, progress) -> CheckResult:
    ref, slots, ref_s = reference_outputs(problem)
    unq_slots = unquantized_reference_slots(problem, slots.dtype)
    # the null family (notes/correctness.md, "One calibrated rule per verdict"): weight formats for 16-bit-activation
    # backends (the nearest member counts), activation quantizers for W4A4 backends (their spread is the band; a
    # W4A4 backend that is itself a member is judged by the others)
    wfam = {name: (a, _combine(a, problem))
            for name, a in weight_format_family(problem, slots.dtype, unq_slots).items()}

    emulated = next((b for b in backends if b.name == "emulated-w4a4"), None) or get_backend("emulated-w4a4")
    reports: dict[str, BackendReport] = {}
    emu = run_backend(emulated, problem, ref, slots, probes=probes, keep_output=keep_output, keep_slots=True)
    if emu.status != "ran":
        raise RuntimeError(f"emulated-w4a4 could not run ({emu.reason}); it sets the error envelope")
    spreads = {}
    if emu.slots is not None:
        # the exact reference is the family's member with unquantized activations (a W4A4 backend that keeps some
        # activations in 16 bits lies between it and the contract); never left out: it is no W4A4 backend
        spreads = {name: member_spread(y.to(emu.slots.dtype), emu.slots, emu.main, problem)
                   for name, y in {"unquantized-activations": slots, **activation_family(problem, slots.dtype)}.items()}
    full = null_bands(spreads)
    env = make_envelope(emu, problem, ref, slots, unq_slots, layer_band=full.get("layer_band"))
    # the emulated backend's own twin is itself
    emu.token_dev = token_diff(emu.main, emu.main)
    emu.diff_twin = output_diff(emu.main, emu.main)
    if emu.cells is not None:
        emu.cells = cell_diff(list(emu.slots.unbind(1)), slots, problem.topk_ids, emu.slots)
    _set_bands(emu, full)
    iterable = progress(backends) if progress is not None else backends
    for b in iterable:
        if b is emulated:
            rep = emu
        elif b.numerics == "w4a4":
            rep = run_backend(b, problem, ref, slots, probes=probes, keep_output=keep_output, twin_out=emu.main,
                              twin_slots=emu.slots)
            _set_bands(rep, null_bands(spreads, exclude=b.name) if b.name in spreads else full)
        else:
            rep = run_backend(b, problem, ref, slots, probes=probes, keep_output=keep_output,
                              alt_out=[o for _, o in wfam.values()] or None,
                              alt_slots=[a for a, _ in wfam.values()] or None)
        reports[b.name] = _judged(rep, env)
    emu.slots = emu.main = None  # free the twin
    return CheckResult(problem=problem, envelope=env, reports=reports, reference_seconds=ref_s)
