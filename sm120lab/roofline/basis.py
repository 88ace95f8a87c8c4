"""What a decode ceiling counts (its *basis*), and the label printed next to every number on it.

Two ceilings of one setup (model, GPU, TP x PP, users, context, routing, bandwidth) differ only
by their basis:

- which weights are FP4 and which 16-bit (a :class:`~.decode.Precision` per model), and
- whether each all-reduce and pipeline hop costs a fixed latency on top of its bytes
  (``collective_latency_us`` of :func:`~.ceiling.ceiling`).

The decision guide's basis (``sm120lab.recommend.facts.guide_basis``: the checkpoint's own
FP4/16-bit split, with the cited all-reduce latency) is the one notebook 04, ``sm120lab roofline``
and ``sm120lab recommend`` state; any number on another basis (:func:`plan_basis`: a named
precision plan, bandwidth only) carries that basis's :meth:`Basis.label_for` beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .ceiling import Ceiling, ceiling
from .decode import PRECISION_PLANS, Precision, precision_plan
from .hardware import GPUSpec
from .models import ModelConfig


@dataclass(frozen=True)
class Basis:
    """What a ceiling counts.

    Attributes:
        label: the words printed next to every number computed on this basis.
        precision_for: the weight formats of a model on this basis.
        latency_for: ``(spec, n_gpus) -> us`` per collective and pipeline hop; None where this
            basis counts a latency but none is cited for that GPU (the ceiling then counts bytes
            only, and :meth:`label_for` says so).
        counts_latency: whether this basis adds a per-collective latency at all.
        formats: what :attr:`precision_for` counts, in words (the label of a GPU without a cited
            latency starts with it).
    """

    label: str
    precision_for: Callable[[ModelConfig], Precision]
    latency_for: Callable[[GPUSpec, int], float | None] = lambda spec, n: 0.0
    counts_latency: bool = False
    formats: str = ""

    def latency_us(self, spec: GPUSpec, n_gpus: int) -> float:
        """Microseconds per collective and pipeline hop on ``n_gpus`` copies of ``spec`` (0 on one GPU)."""
        if n_gpus <= 1:
            return 0.0
        lat = self.latency_for(spec, n_gpus)
        return 0.0 if lat is None else float(lat)

    def label_for(self, spec: GPUSpec, n_gpus: int) -> str:
        """:attr:`label`, plus what this basis could not count for ``spec`` (no cited latency)."""
        if self.counts_latency and n_gpus > 1 and self.latency_for(spec, n_gpus) is None:
            return f"{self.formats or self.label}, link bytes only (no all-reduce latency cited for {spec.gpu})"
        return self.label

    def ceiling(self, model: ModelConfig, spec: GPUSpec, *, tp: int = 1, pp: int = 1, **kw) -> Ceiling:
        """:func:`~.ceiling.ceiling` of ``model`` on TP x PP ``spec`` on this basis (``kw``: batch,
        context, routing, zipf_s, bandwidth)."""
        return ceiling(model, spec, self.precision_for(model), tp=tp, pp=pp,
                       collective_latency_us=self.latency_us(spec, tp * pp), **kw)


def plan_basis(plan: str, weight_format: str = "nvfp4", *, kv_cache: str = "fp8") -> Basis:
    """A named precision plan (:data:`~.decode.PRECISION_PLANS`), link bytes only (no latency);
    gpt-oss-120b ships MXFP4 and is counted so whatever ``weight_format`` says."""
    if plan not in PRECISION_PLANS:
        raise ValueError(f"plan must be one of {sorted(PRECISION_PLANS)}, got {plan!r}")
    precision_plan(plan, weight_format, kv_cache=kv_cache)  # check the format once, here

    def precision_for(model: ModelConfig) -> Precision:
        fmt = "mxfp4" if model.name == "gpt-oss-120b" else weight_format
        return precision_plan(plan, fmt, kv_cache=kv_cache)

    return Basis(f"'{plan}' plan, bandwidth only", precision_for)
