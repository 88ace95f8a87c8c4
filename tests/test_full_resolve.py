"""Install facts from a full resolve (issue 31, item 1), read from the records only (offline).

``data/upstream/resolve/vllm-V.json`` holds pip's real resolver run over vLLM V's whole dependency tree
with its exact FlashInfer and torch pins (``sm120lab upstream full-resolve V``): its date, "the package
index this machine reached", and the missing requirement when it failed. The do-this block says what
was resolved, where and when, and never states a fact about PyPI from that index.
"""

from __future__ import annotations

import json
import re

import pytest
from packaging.version import Version

from sm120lab import recommend
from sm120lab.recommend.dothis import install_note, installable
from sm120lab.upstream import full_resolve, versions

RECORDS = sorted(full_resolve.resolve_dir().glob("vllm-*.json"))


def test_the_missing_requirement_is_read_from_pips_own_words():
    out = ("ERROR: Could not find a version that satisfies the requirement llguidance<1.8.0,>=1.7.0 (from vllm) "
           "(from versions: 1.5.0, 1.6.1)\nERROR: No matching distribution found for llguidance<1.8.0,>=1.7.0\n")
    assert full_resolve.missing_requirement(out) == "llguidance<1.8.0,>=1.7.0"
    assert full_resolve.missing_requirement("Would install vllm-0.33.0") is None


def test_a_failure_is_the_index_not_pypi():
    doc = {"requirements": ["vllm==0.31.0", "flashinfer-python==0.7.0.post1", "torch==2.13.0"], "ok": False,
           "date_utc": "2026-12-04", "where": full_resolve.WHERE, "missing": "llguidance<1.8.0,>=1.7.0",
           "n_installs": 0}
    text = full_resolve.reason(doc)
    assert "PyPI" not in text and "on the package index this machine reached" in text and "2026-12-04" in text
    assert text.endswith("failed: that index had no distribution for llguidance<1.8.0,>=1.7.0")


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_each_record_says_what_where_when_and_what_failed(path):
    doc = json.loads(path.read_text())
    v = doc["version"]
    assert path.name == f"vllm-{v}.json" and v in versions("vllm") and doc["kind"] == "resolve"
    assert doc["requirements"] == full_resolve.requirements_of(v)  # the pins read from vLLM's own wheel
    assert doc["where"] == full_resolve.WHERE and re.fullmatch(r"\d{4}-\d\d-\d\d", doc["date_utc"])
    assert "whole dependency tree" in doc["resolver"] and doc["command"] == f"sm120lab upstream full-resolve {v}"
    if doc["ok"]:
        assert doc["missing"] is None and doc["error"] is None
        assert doc["n_installs"] == len(doc["installs"]) > 3  # the whole tree, not three stubs
        for req in doc["requirements"]:
            name, pin = req.split("==")
            assert Version(doc["installs"][name]).public == pin  # torch 2.13.0+cpu satisfies ==2.13.0
        assert doc["local_versions"] == sorted(f"{k}=={x}" for k, x in doc["installs"].items() if "+" in x)
    else:
        assert doc["error"] and not doc["installs"]
    assert "/tmp" not in path.read_text() and "file://" not in path.read_text()


def test_the_block_says_what_was_resolved_where_and_never_speaks_for_pypi():
    assert RECORDS, "no full resolve recorded: sm120lab upstream full-resolve V"
    for gpu in ("rtx-pro-6000", "rtx-5090", "dgx-spark"):
        ans = recommend.answer(gpu)
        page = ans.block.to_markdown() + "\n" + ans.block.to_text(100)
        assert "PyPI" not in page, gpu
        assert install_note(ans.block.vllm) in " ".join(ans.block.to_markdown().split())
        doc = full_resolve.load_resolve(ans.block.vllm)
        if doc is not None:
            assert doc["ok"] and installable(ans.block.vllm) == (True, "")


def test_a_recorded_resolve_decides_installability(tmp_path, monkeypatch):
    monkeypatch.setattr(full_resolve, "resolve_dir", lambda: tmp_path)
    v = versions("vllm")[-1]
    doc = {"kind": "resolve", "version": v, "requirements": full_resolve.requirements_of(v), "ok": False,
           "date_utc": "2026-12-04", "where": full_resolve.WHERE, "missing": "llguidance<1.8.0,>=1.7.0",
           "error": "ERROR: No matching distribution found for llguidance<1.8.0,>=1.7.0", "n_installs": 0}
    (tmp_path / f"vllm-{v}.json").write_text(json.dumps(doc))
    ok, why = installable(v)
    assert not ok and why == full_resolve.reason(doc) and "PyPI" not in why
    (tmp_path / f"vllm-{v}.json").write_text(json.dumps({**doc, "ok": True, "missing": None, "n_installs": 200}))
    assert installable(v) == (True, "")
    assert install_note(v).startswith("Install line: a full pip resolve of") and "succeeded (200 packages)" in install_note(v)
