"""textmatch: the four states are exact and byte-level, for random texts (no wheel needed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sm120lab.patches import textmatch as tm

_alphabet = st.sampled_from(list("ab\n ]=,\r\t") + ["é", "\x00"])
text = st.lists(_alphabet, max_size=60).map("".join)


@settings(deadline=None)
@given(before=text, after=text, core=st.text(min_size=4, max_size=20), extra=st.text(min_size=1, max_size=10),
       insertion=st.booleans())
def test_apply_moves_applicable_to_applied(before, after, core, extra, insertion):
    anchor = ("<<" + core + ">>").encode()
    repl = anchor + extra.encode() if insertion else ("[[" + core + extra + "]]").encode()
    data = before.encode() + anchor + after.encode()
    if data.count(anchor) != 1 or repl in data:
        return
    assert tm.classify(data, anchor, repl) == tm.APPLICABLE
    patched = data.replace(anchor, repl, 1)
    if patched.count(repl) == 1:
        assert tm.classify(patched, anchor, repl) == tm.APPLIED
    assert tm.classify(data + anchor, anchor, repl) == tm.ANCHOR_AMBIGUOUS
    removed = data.replace(anchor, b"")
    if repl not in removed:
        assert tm.classify(removed, anchor, repl) in (tm.ANCHOR_MISSING, tm.ANCHOR_AMBIGUOUS)
    assert tm.line_of(data, anchor) == before.encode().count(b"\n") + 1


def test_crlf_is_not_normalised():
    data = b"x = 1\r\ny = 2\r\n"
    assert tm.classify(data, b"x = 1\ny", b"x = 3\ny") == tm.ANCHOR_MISSING
    assert tm.classify(data, b"x = 1\r\ny", b"x = 3\r\ny") == tm.APPLICABLE
