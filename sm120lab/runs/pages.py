"""Each executed notebook's HTML page, from nbconvert's JupyterLab template without scripts.

:func:`render_page` uses the template ``runs/templates/nbpage`` (it extends nbconvert's ``lab``
template, drops every script block, and links one stylesheet when asked), with the exporter's
``sanitize_html`` on and its ``clean_html`` filter replaced by :func:`sm120lab.runs.sanitize.clean_html`.
:func:`stylesheet` is the CSS the ``lab`` template would inline into every page, written once per
run folder as :data:`STYLESHEET` so the pages link it instead of repeating it.
"""

from __future__ import annotations

import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from .files import SchemaError
from .sanitize import active_content, clean_html

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: the one stylesheet of a run folder's notebook pages
STYLESHEET = "notebook.css"
STYLE_BLOCK = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL | re.IGNORECASE)


def _exporter(stylesheet: str | None):
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="nbpage", extra_template_basedirs=[str(TEMPLATES)], sanitize_html=True)
    exporter.register_filter("clean_html", clean_html)
    return exporter


def render_page(nb: Any, stylesheet: str | None = None, title: str | None = None) -> str:
    """The HTML page of notebook ``nb`` (an ``nbformat`` node).

    Args:
        nb: the notebook.
        stylesheet: relative URL of the shared stylesheet to link; None inlines the CSS.
        title: the page title (default: the notebook's).

    Raises:
        RuntimeError: the page would hold active content (a template or sanitizer bug); not returned.
    """
    resources: dict[str, Any] = {"sm120lab_stylesheet": stylesheet}
    if title:
        resources["metadata"] = {"name": title}
    body, _ = _exporter(stylesheet).from_notebook_node(nb, resources=resources)
    if stylesheet:  # every <style> the template inlines is in the shared stylesheet; outputs hold none
        body = STYLE_BLOCK.sub("", body)
    found = active_content(body)
    if found:
        raise RuntimeError(f"notebook page would hold active content {found[:3]}; not written")
    return body


@lru_cache(maxsize=1)
def stylesheet() -> str:
    """The CSS of nbconvert's ``lab`` page (theme, pygments and layout), as one file's text."""
    import nbformat

    page = render_page(nbformat.v4.new_notebook(), stylesheet=None)
    css = "\n".join(block.strip() for block in STYLE_BLOCK.findall(page))
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)  # comments
    return re.sub(r"\n\s*", "\n", css).strip() + "\n"  # indentation and blank lines (no string spans a line)


def write_stylesheet(folder: Path) -> Path:
    """Write :data:`STYLESHEET` into ``folder`` (atomically) and return its path."""
    from ..atomic_io import write_text_atomic

    return write_text_atomic(folder / STYLESHEET, stylesheet())


def read_notebook(path: Path, root: Path | None = None):
    """An ``nbformat`` node from a run folder's ``.ipynb`` (a regular file of sane size inside
    ``root``); :class:`SchemaError` naming the file when it is not a readable notebook."""
    import nbformat

    from .files import MAX_NOTEBOOK_BYTES, read_text

    text = read_text(path, MAX_NOTEBOOK_BYTES, root)
    try:
        with warnings.catch_warnings():  # e.g. "cell is missing an id": not the reader's concern
            warnings.simplefilter("ignore")
            nb = nbformat.reads(text, as_version=4)
            nbformat.validate(nb)
    except Exception as exc:  # nbformat raises JSON, validation, key and type errors alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SchemaError(f"{path}: not a valid notebook ({first})") from None
    return nb
