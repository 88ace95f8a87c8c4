"""The verdict box every notebook opens with: what this run found, in a few lines.

Each line is an :class:`Answer`: a claim, the value this run found for it, a :class:`Status`
and one line of why (the evidence, or why it could not run here). A notebook builds its items
from what it just computed, then::

    answer.show(items)                 # an HTML box in Jupyter, plain text elsewhere
    answer.record(items, "03_grouped_gemm_correctness")

``record`` stores ``[{"claim", "value", "status", "why"}, ...]`` under the top-level key
``"answer"`` of the notebook's results JSON (``sm120lab.runs.results``), where the run report reads it.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from . import results

NOTEBOOK_ENV = "SM120LAB_NOTEBOOK"


class Status(str, Enum):
    """How a claim came out on this run (a str-Enum: JSON and string comparisons keep working)."""

    ok = "ok"            # checked here and fine
    warn = "warn"        # works, with a caveat the reader must know
    bad = "bad"          # checked here and broken (garbage, crash, does not fit)
    info = "info"        # a fact or a number, not a judgement
    not_run = "not_run"  # could not be checked on this machine; ``why`` says why


# Badge colours (background, text) and plain-text tags per status.
_STYLE = {Status.ok: ("#d4edda", "#155724"), Status.warn: ("#fff3cd", "#856404"),
          Status.bad: ("#f8d7da", "#721c24"), Status.info: ("#d1ecf1", "#0c5460"),
          Status.not_run: ("#e2e3e5", "#383d41")}
_TAG = {Status.ok: "OK", Status.warn: "WARN", Status.bad: "BAD", Status.info: "INFO", Status.not_run: "NOT RUN"}


@dataclass(frozen=True)
class Answer:
    """One line of a verdict box.

    Args:
        claim: what is being answered, e.g. ``"FlashInfer CUTLASS NVFP4 MoE on this machine"``.
        value: this run's answer, short, e.g. ``"garbage"``, ``"no (12.9 accepts it)"``, ``"39 tok/s"``.
        status: a :class:`Status` (or its string value).
        why: one line of evidence, or why it was not run here.
    """

    claim: str
    value: str
    status: Status
    why: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", Status(self.status))
        except ValueError:
            raise ValueError(f"status: expected one of {[s.value for s in Status]}, got {self.status!r}") from None
        for name in ("claim", "value", "why"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name}: expected str, got {type(getattr(self, name)).__name__}")

    def as_dict(self) -> dict[str, str]:
        """``{"claim", "value", "status", "why"}`` with the status as its string value."""
        return {"claim": self.claim, "value": self.value, "status": self.status.value, "why": self.why}


def status_of_verdict(verdict: str) -> Status:
    """Map a correctness verdict (``sm120lab.moe.verdict``) onto a box status.

    Returns:
        correct -> ok, degraded -> warn, garbage / error -> bad, skipped -> not_run, anything else -> info.
    """
    value = getattr(verdict, "value", verdict)
    return {"correct": Status.ok, "degraded": Status.warn, "garbage": Status.bad, "error": Status.bad,
            "skipped": Status.not_run}.get(str(value), Status.info)


def _items(items: Iterable[Answer]) -> list[Answer]:
    out = list(items)
    bad = [type(a).__name__ for a in out if not isinstance(a, Answer)]
    if bad:
        raise TypeError(f"items: expected Answer objects, got {bad}")
    return out


def to_text(items: Iterable[Answer], title: str = "On this machine") -> str:
    """Plain-text rendering: one ``[TAG] claim: value (why)`` line per item."""
    lines = [f"{title}:"]
    for a in _items(items):
        lines.append(f"  [{_TAG[a.status]:>7}] {a.claim}: {a.value}" + (f"  ({a.why})" if a.why else ""))
    return "\n".join(lines)


def to_html(items: Iterable[Answer], title: str = "On this machine") -> str:
    """A bordered box: one row per item with a coloured status badge, the claim, the value and why."""
    rows = []
    for a in _items(items):
        bg, fg = _STYLE[a.status]
        rows.append(
            "<tr>"
            f"<td style='padding:3px 8px;white-space:nowrap'><span style='background:{bg};color:{fg};"
            f"padding:1px 6px;border-radius:3px;font-weight:bold;font-size:85%'>{_TAG[a.status]}</span></td>"
            f"<td style='padding:3px 8px;text-align:left'>{html.escape(a.claim)}</td>"
            f"<td style='padding:3px 8px;text-align:left'><b>{html.escape(a.value)}</b></td>"
            f"<td style='padding:3px 8px;text-align:left;color:#555'>{html.escape(a.why)}</td>"
            "</tr>")
    return ("<div style='border:2px solid #444;border-radius:6px;padding:6px 10px;margin:4px 0'>"
            f"<div style='font-weight:bold;margin-bottom:4px'>{html.escape(title)}</div>"
            f"<table style='border-collapse:collapse'>{''.join(rows)}</table></div>")


class AnswerBox:
    """What :func:`show` displays: HTML in a notebook, the plain text in ``text/plain`` beside it."""

    def __init__(self, items: Iterable[Answer], title: str = "On this machine"):
        self.items, self.title = _items(items), title

    def _repr_html_(self) -> str:
        return to_html(self.items, self.title)

    def __repr__(self) -> str:
        return to_text(self.items, self.title)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def show(items: Iterable[Answer], title: str = "On this machine") -> None:
    """Render the verdict box: an HTML box in Jupyter (with the text form as ``text/plain``), else print it."""
    box = AnswerBox(items, title)
    if _in_notebook():
        from IPython.display import display

        display(box)
    else:
        print(repr(box))


def record(items: Iterable[Answer], notebook: str | None = None) -> list[dict[str, str]]:
    """Store the box under the top-level key ``"answer"`` of ``results/<notebook>.json``.

    Args:
        items: the :class:`Answer` lines, in display order.
        notebook: results name, e.g. ``"03_grouped_gemm_correctness"``; default: the
            ``SM120LAB_NOTEBOOK`` environment variable.

    Returns:
        The recorded list of ``{"claim", "value", "status", "why"}`` dicts (also outside a run,
        where :func:`sm120lab.runs.results.record` writes nothing).
    """
    payload = [a.as_dict() for a in _items(items)]
    name = notebook or os.environ.get(NOTEBOOK_ENV)
    if not name:
        raise ValueError(f"notebook: expected the results name (e.g. '03_grouped_gemm_correctness') "
                         f"or {NOTEBOOK_ENV} set, got neither")
    results.record(name, {"answer": payload})
    return payload


def from_records(records: Iterable[dict[str, Any]]) -> list[Answer]:
    """Rebuild :class:`Answer` items from recorded dicts (e.g. a results JSON's ``"answer"``)."""
    return [Answer(str(r["claim"]), str(r["value"]), Status(r["status"]), str(r.get("why", ""))) for r in records]
