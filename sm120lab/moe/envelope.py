"""The expected-error band, set by NVFP4 theory measured on the same data.

Two errors bound what a correct backend may show against the exact W4A16 reference:

- ``e_a`` (activation quantization): the error of ``emulated-w4a4`` (NVFP4 activations, exact
  math). A correct W4A4 kernel's error is this plus rounding; a 16-bit-activation kernel's is far
  below it.
- ``e_w`` (weight quantization): the reference computed with the unquantized (bf16) weights vs
  the one with NVFP4 weights: the size of the whole NVFP4 perturbation of the layer.

Global limits (relative Frobenius error of the whole output vs the reference):

    correct  : rel <= 1.5 e_a
    garbage  : rel >  max(clip(2 (e_a + e_w), 0.2, 0.5), 1.25 e_a)
    degraded : in between (an error no NVFP4 rounding explains, still correlated)
    garbage also when cosine < min(0.9, 1/sqrt(1 + garbage_rel^2)) (the cosine of an output whose
    error, uncorrelated with it, is at the garbage limit)

Per (token, expert) cell the band is not usable: W4A4 noise is heavy-tailed per cell
(``cell_a``/``cell_w``, the worst cells, reach ~1 on small shapes). Cells are therefore judged by
their deviation from the backend's expected numerics (:mod:`.metrics` ``dev``), with the fixed
limits of :mod:`.verdict`; ``cell_a``/``cell_w`` are kept for the record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["Envelope", "make_envelope", "unquantized_reference_slots"]


@dataclass(frozen=True)
class Envelope:
    e_a: float
    e_w: float | None
    cell_a: float
    cell_w: float | None
    expert_a: float
    correct_rel: float
    garbage_rel: float
    garbage_cosine: float

    def as_dict(self) -> dict:
        return asdict(self)


def unquantized_reference_slots(problem, dtype: torch.dtype) -> torch.Tensor | None:
    """Per-slot expert outputs [T, k, H] with the unquantized (bf16) weights; None if not kept."""
    if problem.w13_bf16 is None or problem.w2_bf16 is None:
        return None
    t, k = problem.topk_ids.shape
    inter = problem.config.I
    x = problem.hidden.to(dtype)
    flat = problem.topk_ids.reshape(-1)
    out = torch.zeros(t * k, problem.config.H, dtype=dtype, device=x.device)
    for e in torch.unique(flat).tolist():
        rows = torch.nonzero(flat == e).squeeze(1)
        g_u = x[rows // k] @ problem.w13_bf16[e].to(dtype).T
        act = torch.nn.functional.silu(g_u[:, :inter]) * g_u[:, inter:]
        out[rows] = act @ problem.w2_bf16[e].to(dtype).T
    return out.reshape(t, k, -1)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def _cell_max(slots: torch.Tensor, ref_slots: torch.Tensor) -> float:
    num = ((slots.double() - ref_slots.double()) ** 2).sum(-1)
    den = (ref_slots.double() ** 2).sum(-1)
    ok = den > 0
    return float(torch.sqrt(num[ok] / den[ok]).max()) if bool(ok.any()) else 0.0


def make_envelope(emulated_report, problem, ref_out: torch.Tensor, ref_slots: torch.Tensor) -> Envelope:
    """Band from the emulated-w4a4 run (a harness report) and the weight-only error on ``problem``."""
    e_a = float(emulated_report.diff.rel_fro)
    if not np.isfinite(e_a):
        raise ValueError("emulated-w4a4 produced non-finite output; the envelope cannot be set")
    rel_cells = emulated_report.cells.rel if emulated_report.cells is not None else np.array([[e_a]])
    fin = rel_cells[np.isfinite(rel_cells)]
    cell_a = float(fin.max()) if fin.size else e_a
    per_exp = emulated_report.per_expert
    expert_a = float(np.nanmax(per_exp)) if per_exp is not None and np.isfinite(per_exp).any() else e_a
    unq = unquantized_reference_slots(problem, ref_slots.dtype)
    e_w = cell_w = None
    if unq is not None:
        w = problem.topk_weights.to(unq.dtype).unsqueeze(-1)
        e_w = _rel((unq * w).sum(1), ref_out)
        cell_w = _cell_max(unq, ref_slots)
    base = e_a + (e_w if e_w is not None else e_a)
    garbage_rel = max(float(np.clip(2 * base, 0.2, 0.5)), 1.25 * e_a)
    return Envelope(e_a=e_a, e_w=e_w, cell_a=cell_a, cell_w=cell_w, expert_a=expert_a, correct_rel=1.5 * e_a,
                    garbage_rel=garbage_rel, garbage_cosine=min(0.9, 1.0 / float(np.sqrt(1.0 + garbage_rel ** 2))))
