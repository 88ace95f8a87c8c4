"""The expected-error band, set by NVFP4 theory measured on the same data.

Two errors bound what a correct backend may show against the exact W4A16 reference:

- ``e_a`` (activation quantization): the error of ``emulated-w4a4`` (NVFP4 activations, exact
  math). A correct W4A4 kernel's error is this plus rounding; a 16-bit-activation kernel's is far
  below it.
- ``e_w`` (weight quantization): the reference computed with the unquantized (bf16) weights vs
  the one with NVFP4 weights: the size of the whole NVFP4 perturbation of the layer.

Global limits (relative Frobenius error of the whole output vs the reference):

    correct  : rel <= 1.5 e_a
    garbage  : rel >  max(clip(2 (e_a + e_w), 0.2, 0.5), 2 e_a)
               (2 e_a, not 1.25 e_a: the garbage limit stays above the correct band when e_a > 1/3,
               which 0.6% of tiny zipf problems reach)
    degraded : in between (an error no NVFP4 rounding explains, still correlated)
    garbage also when cosine < min(0.9, 1/sqrt(1 + garbage_rel^2)) (the cosine of an output whose
    error, uncorrelated with it, is at the garbage limit)
    W4A4 backends: garbage_rel_w4a4 = max(garbage_rel, Z e_a) (and its cosine), Z = W4A4_GLOBAL_Z (5), or
               W4A4_GLOBAL_Z_FEW (10) below W4A4_FEW_TOKENS (8) tokens: a legitimate activation quantizer
               (other block-scale rounding or global scale) has its own activation error, measured up to
               3.1 e_a at T = 48 and 7.2 e_a at T = 1 (notes/correctness.md)

Per (token, expert) cell the band is not usable: W4A4 noise is heavy-tailed per cell
(``cell_a``/``cell_w``, the worst cells, reach ~1 on small shapes). Cells are therefore judged by
their deviation from the nearest of two expected outputs (:mod:`.verdict`): the backend's expected
numerics (:mod:`.metrics` ``dev``) and, per problem, the unquantized-weight forward computed here
(``dev_alt``), whose floored distance from the reference, ``cell_w_dev`` per cell (recorded: its
maximum), is how far a correct backend with more precise weights than NVFP4 (FP8, bf16) may sit
from the NVFP4 reference in that cell. ``dev_correct``/``dev_garbage`` record the limits used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from .grouping import grouped_moe_forward
from .metrics import DEV_FLOOR, cell_rel
from .verdict import DEV_CORRECT, DEV_GARBAGE, W4A4_FEW_TOKENS, W4A4_GLOBAL_Z, W4A4_GLOBAL_Z_FEW

__all__ = ["Envelope", "WEIGHT_FORMAT_ROUNDINGS", "make_envelope", "unquantized_reference_slots",
           "weight_format_alternates"]

#: the weight quantizers of the null family besides the checkpoint's own (block scales rounded to nearest):
#: E4M3 block scales rounded up and down, each expert's own global scale (real quantizers differ here)
WEIGHT_FORMAT_ROUNDINGS = ("up", "down")


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
    cell_w_dev: float | None = None
    garbage_rel_w4a4: float | None = None
    garbage_cosine_w4a4: float | None = None
    dev_correct: float = DEV_CORRECT
    dev_garbage: float = DEV_GARBAGE

    def as_dict(self) -> dict:
        return asdict(self)


def unquantized_reference_slots(problem, dtype: torch.dtype) -> torch.Tensor | None:
    """Per-slot expert outputs [T, k, H] with the unquantized (bf16) weights; None if not kept."""
    if problem.w13_bf16 is None or problem.w2_bf16 is None:
        return None
    return grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, None, problem.config.E,
                               lambda e: problem.w13_bf16[e].to(dtype), lambda e: problem.w2_bf16[e].to(dtype),
                               per_slot=True)


def weight_format_alternates(problem, dtype: torch.dtype, unq_slots=None) -> list[torch.Tensor]:
    """The weight-format family a correct backend may compute with, as per-slot outputs [T, k, H] each:

    - the unquantized (bf16) weights (:func:`unquantized_reference_slots`): a backend with a more precise
      weight format (FP8, bf16);
    - the bf16 weights re-quantized to NVFP4 with E4M3 block scales rounded up, then down, instead of to
      nearest (each expert's own global scale): a backend whose checkpoint came from another legitimate
      quantizer.

    A cell or token is out of envelope only when it is far from the expected numerics AND from every member
    (:mod:`.verdict`). Empty when the problem keeps no unquantized weights."""
    unq = unquantized_reference_slots(problem, dtype) if unq_slots is None else unq_slots
    if unq is None:
        return []
    from .variants import ScaleRounding, requantize_expert

    out = [unq]
    for rounding in map(ScaleRounding, WEIGHT_FORMAT_ROUNDINGS):
        out.append(grouped_moe_forward(
            problem.hidden.to(dtype), problem.topk_ids, None, problem.config.E,
            lambda e, r=rounding: requantize_expert(problem.w13_bf16, problem.w13.global_scale, e, r).to(dtype),
            lambda e, r=rounding: requantize_expert(problem.w2_bf16, problem.w2.global_scale, e, r).to(dtype),
            per_slot=True))
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def _cell_max(slots: torch.Tensor, ref_slots: torch.Tensor) -> float:
    num = ((slots.double() - ref_slots.double()) ** 2).sum(-1)
    den = (ref_slots.double() ** 2).sum(-1)
    ok = den > 0
    return float(torch.sqrt(num[ok] / den[ok]).max()) if bool(ok.any()) else 0.0


_COMPUTE = object()


def make_envelope(emulated_report, problem, ref_out: torch.Tensor, ref_slots: torch.Tensor,
                  unq_slots=_COMPUTE) -> Envelope:
    """Band from the emulated-w4a4 run (a harness report) and the weight-only error on ``problem``.

    ``unq_slots``: :func:`unquantized_reference_slots` if the caller already has it (None: no
    unquantized weights).
    """
    e_a = float(emulated_report.diff.rel_fro)
    if not np.isfinite(e_a):
        raise ValueError("emulated-w4a4 produced non-finite output; the envelope cannot be set")
    rel_cells = emulated_report.cells.rel if emulated_report.cells is not None else np.array([[e_a]])
    fin = rel_cells[np.isfinite(rel_cells)]
    cell_a = float(fin.max()) if fin.size else e_a
    per_exp = emulated_report.per_expert
    expert_a = float(np.nanmax(per_exp)) if per_exp is not None and np.isfinite(per_exp).any() else e_a
    unq = unquantized_reference_slots(problem, ref_slots.dtype) if unq_slots is _COMPUTE else unq_slots
    e_w = cell_w = cell_w_dev = None
    if unq is not None:
        w = problem.topk_weights.to(unq.dtype).unsqueeze(-1)
        e_w = _rel((unq * w).sum(1), ref_out)
        cell_w = _cell_max(unq, ref_slots)
        num = ((unq.double() - ref_slots.double()) ** 2).sum(-1).cpu().numpy()
        den = (ref_slots.double() ** 2).sum(-1).cpu().numpy()
        dev_w = cell_rel(num, den, problem.topk_ids.cpu().numpy(), floor=DEV_FLOOR)
        cell_w_dev = float(dev_w.max()) if dev_w.size else 0.0
    base = e_a + (e_w if e_w is not None else e_a)
    garbage_rel = max(float(np.clip(2 * base, 0.2, 0.5)), 2.0 * e_a)
    z = W4A4_GLOBAL_Z_FEW if problem.tokens < W4A4_FEW_TOKENS else W4A4_GLOBAL_Z
    garbage_w4a4 = max(garbage_rel, z * e_a)
    return Envelope(e_a=e_a, e_w=e_w, cell_a=cell_a, cell_w=cell_w, expert_a=expert_a, correct_rel=1.5 * e_a,
                    garbage_rel=garbage_rel, garbage_cosine=_cosine_at(garbage_rel), cell_w_dev=cell_w_dev,
                    garbage_rel_w4a4=garbage_w4a4, garbage_cosine_w4a4=_cosine_at(garbage_w4a4))


def _cosine_at(rel: float) -> float:
    """min(0.9, 1/sqrt(1 + rel^2)): the cosine of an output whose uncorrelated error is ``rel``."""
    return min(0.9, 1.0 / float(np.sqrt(1.0 + rel ** 2)))
