"""Show the guide: a rich table in a terminal, an HTML table in a notebook, markdown for files."""

from __future__ import annotations

import html
import textwrap

from .core import Evidence, Item

COLUMNS = ("setting", "value", "evidence", "source", "why")
_STYLE = {Evidence.SM120_RUN: "bold green", Evidence.H200_RUN: "cyan", Evidence.COMPILE: "blue",
          Evidence.EMULATION: "magenta", Evidence.SOURCE_READING: "yellow"}


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def _cells(it: Item, with_here: bool) -> list[str]:
    cells = [it.setting, it.value, it.evidence.value, it.source, it.why]
    if with_here:
        cells.insert(2, it.here)
    return cells


def to_markdown(items: list[Item]) -> str:
    """A markdown table of ``items`` (pipes escaped), with a ``this machine`` column when any
    item carries one."""
    with_here = any(it.here for it in items)
    cols = list(COLUMNS)
    if with_here:
        cols.insert(2, "this machine")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for it in items:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(it, with_here)) + " |")
    return "\n".join(lines)


GUIDE_START, GUIDE_END = "<!-- guide:start -->", "<!-- guide:end -->"


def replace_guide_block(text: str, items: list[Item], block=None) -> str:
    """``text`` with what stands between ``<!-- guide:start -->`` and ``<!-- guide:end -->`` replaced
    by the do-this block (markdown, when given) and :func:`to_markdown` of ``items``.

    Raises:
        ValueError: the markers are missing, out of order, or there is more than one block (a
            second one would be left stale).
    """
    i, j = text.find(GUIDE_START), text.find(GUIDE_END)
    if i < 0 or j < i:
        raise ValueError(f"expected one '{GUIDE_START}' ... '{GUIDE_END}' block")
    if text.count(GUIDE_START) > 1 or text.count(GUIDE_END) > 1:
        raise ValueError(f"found {text.count(GUIDE_START)} '{GUIDE_START}' markers; expected exactly one block")
    body = (block.to_markdown() + "\n\n" if block is not None else "") + to_markdown(items)
    return text[: i + len(GUIDE_START)] + "\n" + body + "\n" + text[j:]


def to_html(items: list[Item]) -> str:
    with_here = any(it.here for it in items)
    cols = list(COLUMNS)
    if with_here:
        cols.insert(2, "this machine")
    head = "".join(f"<th style='text-align:left'>{c}</th>" for c in cols)
    rows = "".join("<tr>" + "".join(f"<td style='text-align:left;vertical-align:top'>{html.escape(c)}</td>"
                                    for c in _cells(it, with_here)) + "</tr>" for it in items)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def fill(text: str, width: int, first: str = "", rest: str | None = None) -> str:
    """``text`` wrapped to ``width`` (at least 40) columns at spaces only: no word is ever cut or split
    (a word longer than the line overflows it; the terminal wraps it). ``first`` / ``rest`` indent the
    first and the following lines (``rest`` defaults to ``first``)."""
    return textwrap.fill(text, max(40, int(width)), initial_indent=first,
                         subsequent_indent=first if rest is None else rest,
                         break_long_words=False, break_on_hyphens=False)


def to_text(items: list[Item], width: int = 80) -> str:
    """The items as cards for a terminal of ``width`` columns, wrapped by :func:`fill` (no value is
    ever cut)."""

    def field(label: str, text: str) -> str:
        pad = f"  {label:<9} "
        return fill(text or "-", width, pad, " " * len(pad))

    out = []
    for it in items:
        out.append(fill(f"[{it.topic.value}] {it.setting}", width))
        out.append(field("value:", it.value))
        if it.here:
            out.append(field("here:", it.here))
        out.append(field("evidence:", f"{it.evidence.value}; source: {it.source}"))
        out.append(field("why:", it.why))
        out.append("")
    return "\n".join(out)


def show(items: list[Item], *, title: str | None = None, console=None, width: int | None = None) -> None:
    """Display ``items``: an HTML table in a Jupyter notebook, wrapped cards in a terminal (no value
    is cut at any width)."""
    if console is None and _in_notebook():
        from IPython.display import HTML, display

        display(HTML((f"<h4>{html.escape(title)}</h4>" if title else "") + to_html(items)))
        return
    import shutil

    w = width or shutil.get_terminal_size((100, 24)).columns
    text = (fill(title, w) + "\n\n" if title else "") + to_text(items, w)
    if console is not None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        print(text)
