"""Notebook HTML made inert: what a report or a notebook page shows never runs anything.

:func:`clean_html` keeps formatting (headings, paragraphs, lists, tables, code, images from
``data:image/png|jpeg|gif`` or relative paths, links to http(s)/mailto/anchors/relative paths, and
inline styles limited to :data:`CSS_PROPERTIES`) and drops everything else through ``bleach``:
``<script>``, ``<style>`` and ``<iframe>`` with their content, event handlers, ``javascript:`` URLs,
forms, embeds. :func:`active_content` lists what would run in a finished page (a check, used by
the tests and before a page is written).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
    "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd",
    "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
})
ATTRIBUTES = frozenset({"class", "id", "title", "align", "colspan", "rowspan", "style", "alt", "width", "height",
                        "href", "src", "open", "start", "border", "valign"})
CSS_PROPERTIES = frozenset({
    "background", "background-color", "border", "border-bottom", "border-collapse", "border-color",
    "border-left", "border-radius", "border-right", "border-style", "border-top", "border-width", "color",
    "display", "overflow-wrap", "word-break", "font-family", "font-size", "font-style", "font-weight", "height", "line-height", "margin",
    "margin-bottom", "margin-left", "margin-right", "margin-top", "max-width", "min-width", "padding",
    "padding-bottom", "padding-left", "padding-right", "padding-top", "text-align", "text-decoration",
    "vertical-align", "white-space", "width",
})
#: elements dropped with everything inside them (bleach alone would keep their text)
DROP_WITH_CONTENT = re.compile(r"<(script|style|iframe|object|embed|template|noscript|textarea|title)\b.*?</\1\s*>",
                               re.IGNORECASE | re.DOTALL)
IMG_DATA = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.-]*):")


def _url_ok(tag: str, value: str) -> bool:
    """Relative URLs and anchors anywhere; ``data:image`` only in ``img``; http(s)/mailto only in ``a``."""
    value = value.strip()
    m = SCHEME.match(value)
    if m is None:
        return not value.startswith("//")  # protocol-relative would fetch from a host
    scheme = m.group(1).lower()
    if tag == "img":
        return bool(IMG_DATA.match(value))
    return tag == "a" and scheme in ("http", "https", "mailto")


def _allow_attr(tag: str, name: str, value: str) -> bool:
    if name == "href":
        return tag == "a" and _url_ok(tag, value)
    if name == "src":
        return tag == "img" and _url_ok(tag, value)
    return name in ATTRIBUTES


def clean_html(fragment: str | bytes) -> str:
    """``fragment`` with only :data:`TAGS`, :data:`ATTRIBUTES`, safe URLs and :data:`CSS_PROPERTIES` kept."""
    import bleach
    from bleach.css_sanitizer import CSSSanitizer

    text = fragment.decode("utf-8", "replace") if isinstance(fragment, bytes) else str(fragment)
    text = DROP_WITH_CONTENT.sub("", text)
    return bleach.clean(text, tags=TAGS, attributes=_allow_attr, protocols=["http", "https", "mailto", "data"],
                        strip=True, strip_comments=True,
                        css_sanitizer=CSSSanitizer(allowed_css_properties=CSS_PROPERTIES))


ACTIVE_TAGS = frozenset({"script", "iframe", "object", "embed", "frame", "frameset", "applet", "base", "form",
                         "portal"})


class _Finder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ACTIVE_TAGS:
            self.found.append(f"<{tag}>")
        if tag == "meta" and any(k == "http-equiv" and (v or "").lower() == "refresh" for k, v in attrs):
            self.found.append("<meta http-equiv=refresh>")
        for k, v in attrs:
            if k.startswith("on"):
                self.found.append(f"<{tag} {k}=...>")
            elif k in ("href", "src", "action", "formaction", "xlink:href", "srcdoc", "data") and v is not None:
                if k == "srcdoc" or re.match(r"\s*(javascript|vbscript|data:text/html)", v, re.IGNORECASE):
                    self.found.append(f"<{tag} {k}={v[:30]!r}>")

    handle_startendtag = handle_starttag


def active_content(page: str) -> list[str]:
    """What in ``page`` would run or load a page in a browser: script-like elements, event handler
    attributes, ``javascript:`` / ``data:text/html`` URLs, ``srcdoc``, a refresh ``<meta>``."""
    finder = _Finder()
    finder.feed(page)
    finder.close()
    return finder.found
