"""Where a patch stands in one file's bytes: applicable, applied, anchor-missing, anchor-ambiguous.

Counting is byte-exact (anchor and replacement are UTF-8 encoded; line endings are not
normalised). When one text contains the other (an insertion: the replacement contains the
anchor), occurrences of the shorter inside occurrences of the longer are not counted, so a
file that already carries the replacement does not also count as "anchor present".
"""

from __future__ import annotations

APPLICABLE = "applicable"
APPLIED = "applied"
ANCHOR_MISSING = "anchor-missing"
ANCHOR_AMBIGUOUS = "anchor-ambiguous"
FILE_MISSING = "file-missing"
DOCUMENTED_ONLY = "documented-only"

_SENTINEL = b"\x00sm120lab-masked\x00"


def counts(data: bytes, anchor: bytes, replacement: bytes) -> tuple[int, int]:
    """``(free anchor occurrences, free replacement occurrences)`` in ``data``."""
    if len(anchor) <= len(replacement):
        n_repl = data.count(replacement)
        n_anchor = data.replace(replacement, _SENTINEL).count(anchor)
    else:
        n_anchor = data.count(anchor)
        n_repl = data.replace(anchor, _SENTINEL).count(replacement)
    return n_anchor, n_repl


def classify(data: bytes, anchor: bytes, replacement: bytes) -> str:
    """One of APPLICABLE / APPLIED / ANCHOR_MISSING / ANCHOR_AMBIGUOUS."""
    n_anchor, n_repl = counts(data, anchor, replacement)
    if n_repl == 0:
        if n_anchor == 1:
            return APPLICABLE
        return ANCHOR_MISSING if n_anchor == 0 else ANCHOR_AMBIGUOUS
    if n_repl == 1 and n_anchor == 0:
        return APPLIED
    return ANCHOR_AMBIGUOUS


def line_of(data: bytes, needle: bytes) -> int | None:
    """1-based line number where ``needle`` first starts, or None."""
    i = data.find(needle)
    return None if i < 0 else data.count(b"\n", 0, i) + 1
