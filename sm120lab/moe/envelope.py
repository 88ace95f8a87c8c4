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
    W4A4 backends: garbage_rel_w4a4 = max(garbage_rel, Z B) (and its cosine), Z = W4A4_GLOBAL_Z, B the
               layer band of the null family: the largest relative distance from emulated-w4a4 of any legitimate
               activation quantizer on the same problem (:func:`null_bands`; each backend that is itself a
               member is judged with the band of the others, ``BackendReport.layer_band``)

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
from .verdict import DEV_CORRECT, DEV_GARBAGE, W4A4_GLOBAL_Z, cosine_at

__all__ = ["Envelope", "MemberSpread", "activation_family", "make_envelope", "member_spread", "null_bands",
           "unquantized_reference_slots", "weight_format_family"]

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
    act_layer_band: float | None = None  # the activation family's largest relative distance from emulated-w4a4

    def as_dict(self) -> dict:
        return asdict(self)


def unquantized_reference_slots(problem, dtype: torch.dtype) -> torch.Tensor | None:
    """Per-slot expert outputs [T, k, H] with the unquantized (bf16) weights; None if not kept."""
    if problem.w13_bf16 is None or problem.w2_bf16 is None:
        return None
    return grouped_moe_forward(problem.hidden.to(dtype), problem.topk_ids, None, problem.config.E,
                               lambda e: problem.w13_bf16[e].to(dtype), lambda e: problem.w2_bf16[e].to(dtype),
                               per_slot=True)


def weight_format_family(problem, dtype: torch.dtype, unq_slots=None) -> dict[str, torch.Tensor]:
    """The weight half of the null family: per-slot outputs [T, k, H] of the weight formats a correct backend
    may compute with, by name:

    - ``unquantized``: the bf16 weights themselves (:func:`unquantized_reference_slots`): a backend with a more
      precise weight format (FP8, bf16);
    - each quantizer of :data:`sm120lab.moe.variants.WEIGHT_QUANTIZER_VARIANTS`, by its variant name: the bf16
      weights re-quantized to NVFP4 with E4M3 block scales rounded up or down instead of to nearest, or with
      one global scale for every expert (per-tensor) or each expert's rounded down to a power of two: a backend
      whose checkpoint came from another legitimate quantizer.

    A 16-bit-activation backend's cell or token is out of envelope only when it is far from the expected
    numerics AND from every member (:mod:`.verdict`). Empty when the problem keeps no unquantized weights."""
    unq = unquantized_reference_slots(problem, dtype) if unq_slots is None else unq_slots
    if unq is None:
        return {}
    from .variants import WEIGHT_QUANTIZER_VARIANTS

    out = {"unquantized": unq}
    for v in (cls() for cls in WEIGHT_QUANTIZER_VARIANTS):
        out[v.name] = v.forward(problem, dtype, per_slot=True)
    return out


def activation_family(problem, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The activation half of the null family: per-slot outputs [T, k, H] (fp32 math, the checkpoint's NVFP4
    weights) of each legitimate activation quantizer of :data:`sm120lab.moe.variants.ACT_FAMILY_VARIANTS`, by its
    variant name. Their spread around ``emulated-w4a4`` per cell, expert, token and layer is the band a W4A4
    backend is judged in (:func:`null_bands`)."""
    from .variants import ACT_FAMILY_VARIANTS

    return {v.name: v.forward(problem, per_slot=True).to(dtype) for v in (cls() for cls in ACT_FAMILY_VARIANTS)}


@dataclass
class MemberSpread:
    """How far one null-family member lands from the contract's output (``emulated-w4a4``), at every level."""

    cell: np.ndarray    # float64 [T, k]: floored deviation per (token, expert) cell
    expert: np.ndarray  # float64 [E]: pooled deviation per expert (NaN: unrouted)
    token: np.ndarray   # float64 [T]: floored deviation of the main-run row
    layer: float        # relative Frobenius distance of the whole output


def member_spread(slots: torch.Tensor, twin_slots: torch.Tensor, twin_main: torch.Tensor, problem) -> MemberSpread:
    """:class:`MemberSpread` of one member's per-slot outputs ``slots`` against the twin's."""
    from .metrics import expert_pool, token_diff

    ids = problem.topk_ids.cpu().numpy()
    a, b = slots.double(), twin_slots.double()
    num = ((a - b) ** 2).sum(-1).cpu().numpy()
    den = (b ** 2).sum(-1).cpu().numpy()
    main = (a * problem.topk_weights.to(a.dtype).unsqueeze(-1)).sum(1)
    return MemberSpread(cell=cell_rel(num, den, ids, floor=DEV_FLOOR),
                        expert=expert_pool(num, den, ids, problem.config.E),
                        token=token_diff(main, twin_main).dev, layer=_rel(main, twin_main))


def null_bands(spreads: dict[str, MemberSpread], exclude: str | None = None) -> dict:
    """The W4A4 band at every level: the largest deviation from ``emulated-w4a4`` any legitimate activation
    quantizer of the family reaches there, the member ``exclude`` left out (leave-one-out: a backend that is
    itself a member is judged by the others)::

        cell_band[t, j] = max_m dev_m[t, j]      expert_band[e] = max_m pooled_m[e]
        token_band[t]   = max_m dev_m[t]         layer_band     = max_m rel_m

    Returns a dict of those four (keys as the ``BackendReport`` fields); empty if no member is left."""
    use = [s for name, s in spreads.items() if name != exclude]
    if not use:
        return {}
    with np.errstate(invalid="ignore"):
        return {"cell_band": np.fmax.reduce([s.cell for s in use]),
                "expert_band": np.fmax.reduce([s.expert for s in use]),
                "token_band": np.fmax.reduce([s.token for s in use]),
                "layer_band": max(s.layer for s in use)}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def _cell_max(slots: torch.Tensor, ref_slots: torch.Tensor) -> float:
    num = ((slots.double() - ref_slots.double()) ** 2).sum(-1)
    den = (ref_slots.double() ** 2).sum(-1)
    ok = den > 0
    return float(torch.sqrt(num[ok] / den[ok]).max()) if bool(ok.any()) else 0.0


_COMPUTE = object()


def make_envelope(emulated_report, problem, ref_out: torch.Tensor, ref_slots: torch.Tensor,
                  unq_slots=_COMPUTE, layer_band: float | None = None) -> Envelope:
    """Band from the emulated-w4a4 run (a harness report) and the weight-only error on ``problem``.

    ``unq_slots``: :func:`unquantized_reference_slots` if the caller already has it (None: no
    unquantized weights). ``layer_band``: the activation family's largest relative distance from
    emulated-w4a4 (:func:`null_bands`; None: not computed, the W4A4 limit is then ``W4A4_GLOBAL_Z`` e_a).
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
    garbage_w4a4 = max(garbage_rel, W4A4_GLOBAL_Z * (e_a if layer_band is None else layer_band))
    return Envelope(e_a=e_a, e_w=e_w, cell_a=cell_a, cell_w=cell_w, expert_a=expert_a, correct_rel=1.5 * e_a,
                    garbage_rel=garbage_rel, garbage_cosine=cosine_at(garbage_rel), cell_w_dev=cell_w_dev,
                    garbage_rel_w4a4=garbage_w4a4, garbage_cosine_w4a4=cosine_at(garbage_w4a4),
                    act_layer_band=layer_band)
