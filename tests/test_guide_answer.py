"""The guide's answer: a do-this block a user can act on, right for the vLLM release it names.

Every check reads the facts recorded from the real wheels (data/upstream) and the public reports
(data/published); nothing here downloads.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from packaging.version import Version

from sm120lab import recommend, upstream
from sm120lab.recommend.dothis import default_release, installable, nearest_read, unread_pins
from sm120lab.recommend.versioned import context, missing_mentions

GPUS = [g.value for g in recommend.GPU]
# every recorded vLLM release whose pinned FlashInfer is recorded too (the guide's universe)
INSTALLABLE = [v for v in upstream.versions("vllm") if installable(v)[0]]
# the oldest, the newest installable, and each release where the FlashInfer pin changes
RELEASES = [v for i, v in enumerate(INSTALLABLE)
            if i in (0, len(INSTALLABLE) - 1)
            or upstream.load("vllm", v).pins.get("flashinfer-python")
            != upstream.load("vllm", INSTALLABLE[i - 1]).pins.get("flashinfer-python")]
# sm120lab's own flags, which appear in the verify and patch commands
OWN_FLAGS = {"--preset", "--device", "--backend", "--only", "--clear-jit-cache", "-y"}


@pytest.fixture(scope="module")
def answers():
    return {(g, v): recommend.answer(g, vllm=v) for g in GPUS for v in RELEASES}


def test_the_guide_knows_at_least_two_releases():
    assert len(RELEASES) >= 2, RELEASES
    assert default_release() in RELEASES


def test_the_default_release_is_the_newest_whose_facts_were_all_read_and_the_block_says_so():
    """The default is the newest recorded vLLM release whose vLLM, FlashInfer and torch facts were all read
    from their wheels (records in data/upstream); the block says so in one sentence, naming each newer
    release it passed over and what of it was unread, and never speaks for PyPI."""
    vs = upstream.versions("vllm")
    default = default_release()
    assert not unread_pins(default)
    for f in ("flashinfer-python", "torch"):
        assert upstream.load(f, upstream.load("vllm", default).pins[f][2:])
    newer = vs[vs.index(default) + 1:]
    assert all(unread_pins(v) for v in newer), newer
    why = recommend.answer("rtx-pro-6000").block.release_why
    assert why.startswith(f"vLLM {default} ") and why.count(". ") == 0 and why.endswith(".")
    assert "vLLM, FlashInfer and torch facts were all read from their wheels" in why
    for v in newer:
        assert f"newer {v}" in why or f"; {v} pins" in why, (v, why)
        for u in unread_pins(v):
            assert f"{u.dist} {u.version}, whose wheel was not read" in why
    assert "PyPI" not in why
    text = recommend.answer("rtx-pro-6000").block.to_text(80)
    assert "release: " + " ".join(why.split()[:3]) in " ".join(text.split())


def _unread_releases() -> list[str]:
    return [v for v in upstream.versions("vllm") if any(u.dist == "flashinfer-python" for u in unread_pins(v))]


@pytest.mark.parametrize("gpu", GPUS)
def test_a_release_whose_flashinfer_wheel_was_not_read_answers_marking_its_unread_parts(gpu):
    """Asked for a release whose pinned FlashInfer wheel was not read (0.34.0 pins 0.7.3, which the package
    index this machine reached did not serve), the guide answers: what its own vLLM record gives, and every
    FlashInfer fact marked unread with the nearest release it was read from."""
    rel = _unread_releases()
    if not rel:
        pytest.skip("every recorded release's FlashInfer was read")
    for v in rel:
        ans = recommend.answer(gpu, vllm=v)
        b, u = ans.block, next(u for u in unread_pins(v) if u.dist == "flashinfer-python")
        near = nearest_read("flashinfer-python", u.version)
        assert b.vllm == v and b.flashinfer == u.version and u.nearest == near and near in upstream.versions(
            "flashinfer-python")
        assert b.release_why.startswith(f"vLLM {v}, as asked (--vllm)")
        assert f"{u.dist} {u.version}, whose wheel was not read" in b.release_why and near in b.release_why
        assert f"the default is {default_release()}" in b.release_why
        # its own facts: the serve flags and the backend come from its own record
        rec = upstream.load("vllm", v)
        assert all(t in rec.serve_flags for t in b.serve if t.startswith("--"))
        assert b.moe_backend in {m.name for m in rec.moe_backends}
        # FlashInfer facts: marked unread, read from the nearest release
        for e in b.exports:
            if e.read_by == "flashinfer-python":
                assert e.read_from == near and "UNREAD" in e.why
                assert e.value == recommend.arch_list_for(near, gpu)
        assert any("# unread for flashinfer-python" in cmd for label, cmd in b.lines() if label == "export")
        by_id = {it.id: it for it in ans.items}
        for rid in ("flashinfer-arch-list", "jit-cache"):
            assert "unread" in by_id[rid].value and near in by_id[rid].value, (rid, by_id[rid].value)
        assert "unread" in by_id["jit-cache"].why and by_id["jit-cache"].source.endswith(f"-{near}.json")
        assert f"FlashInfer {u.version}'s own arch-list logic" not in by_id["flashinfer-arch-list"].why or (
            "unread (" in by_id["flashinfer-arch-list"].why)
        page = b.to_text(80) + "\n" + recommend.to_markdown(ans.items)
        assert "PyPI" not in page


def test_recommend_for_an_unread_release_answers_on_the_command_line():
    """`sm120lab recommend --vllm 0.34.0` (a release whose pinned FlashInfer wheel was not read) exits 0
    with the block and the items, its unread parts marked."""
    rel = _unread_releases()
    if not rel:
        pytest.skip("every recorded release's FlashInfer was read")
    v = rel[-1]
    r = subprocess.run([sys.executable, "-m", "sm120lab", "recommend", "--vllm", v], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Do this:") and f"vLLM {v}" in r.stdout.split("\n\n")[0].replace("\n", " ")
    flat = " ".join(r.stdout.split())
    assert "as asked (--vllm)" in flat and "whose wheel was not read" in flat and "the nearest release read" in flat
    assert "PyPI" not in r.stdout


def test_unread_flashinfer_is_marked_for_any_release(monkeypatch):
    """Any release whose pinned FlashInfer has no record answers the same way: here the default's own
    FlashInfer is hidden from the records, and its block and items fall back to the nearest release read,
    marked so, with no claim about any index (no full resolve names it)."""
    v = default_release()
    pin = upstream.load("vllm", v).pins["flashinfer-python"][2:]
    real = upstream.versions
    monkeypatch.setattr(upstream, "versions", lambda dist: [x for x in real(dist)
                                                            if not (dist == "flashinfer-python" and x == pin)])
    (u,) = [u for u in unread_pins(v) if u.dist == "flashinfer-python"]
    assert u.version == pin and u.nearest == [x for x in real("flashinfer-python")
                                              if Version(x) < Version(pin)][-1]
    assert "no record of it in data/upstream" in u.why and "PyPI" not in u.why
    ans = recommend.answer("rtx-pro-6000", vllm=v)
    assert ans.block.unread and ans.block.flashinfer == pin
    assert "unread" in {it.id: it for it in ans.items}["flashinfer-arch-list"].value
    assert default_release() != v  # no longer all read: the default moves to an older release


@pytest.mark.parametrize("gpu", GPUS)
def test_json_holds_a_do_this_block(gpu, tmp_path):
    out = tmp_path / "g.json"
    r = subprocess.run([sys.executable, "-m", "sm120lab", "recommend", "--gpu", gpu, "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    block = doc["do_this"]
    for key in ("install", "exports", "serve", "patch", "verify", "expect"):
        assert block[key], key
    assert block["serve"][:2] == ["vllm", "serve"]
    assert block["versions"]["vllm"] == default_release()
    assert block["fit"]["fits"] is True
    assert any(x["what"] == "decode ceiling" for x in block["expect"])
    assert not block["problems"], block["problems"]
    # the text output opens with the block
    assert r.stdout.lstrip().startswith("Do this:")


def test_every_flag_and_variable_of_the_block_exists_in_its_release(answers):
    for (gpu, ver), ans in answers.items():
        rec = upstream.load("vllm", ver)
        fi = upstream.load("flashinfer-python", ans.block.flashinfer)
        flags = [t for t in ans.block.serve if t.startswith("--")]
        assert flags, (gpu, ver)
        for f in flags:
            assert f in rec.serve_flags, (gpu, ver, f)
            choices = rec.serve_flags[f].choices
            i = ans.block.serve.index(f)
            if choices is not None and i + 1 < len(ans.block.serve) and not ans.block.serve[i + 1].startswith("--"):
                assert ans.block.serve[i + 1] in choices, (gpu, ver, f)
        for e in ans.block.exports:
            assert e.name in (rec.env_vars if e.read_by == "vllm" else fi.env_vars), (gpu, ver, e.name)
        assert ans.block.moe_backend in {b.name for b in rec.moe_backends}
        assert next(b for b in rec.moe_backends if b.name == ans.block.moe_backend).sm12x.value == "accepts"


def test_no_item_value_names_a_flag_or_variable_its_release_lacks(answers):
    for (gpu, ver), ans in answers.items():
        ctx = context(recommend.GPU(gpu), ans.setup, ver)
        for it in ans.items:
            assert not missing_mentions(it.value, ctx), (gpu, ver, it.id, it.value)
        assert not missing_mentions(ans.block.serve_line, ctx)


def test_install_lines_resolve_with_pips_resolver_offline(answers):
    lines = {ans.block.install for ans in answers.values()}
    for line in lines:
        reqs = shlex.split(line)[2:]
        res = upstream.check_install(reqs)
        assert res.ok, (line, res.detail)
        assert res.resolved["vllm"] == reqs[0].split("==")[1]


def test_the_pair_the_old_guide_named_does_not_resolve():
    """vLLM 0.17.0 pins FlashInfer 0.6.4 exactly, so pip refuses it with 0.6.7 (issue 19's defect)."""
    res = upstream.check_install(["vllm==0.17.0", "flashinfer-python==0.6.7"])
    assert not res.ok


def test_releases_differ_where_upstream_differs(answers):
    """0.17.0 chooses the dense NVFP4 GEMM with an env var, 0.34.0 with a flag; each item says so
    and never the other's knob."""
    old, new = answers[("rtx-pro-6000", RELEASES[0])], answers[("rtx-pro-6000", RELEASES[-1])]
    dense_old, dense_new = (next(it for it in a.items if it.id == "dense-gemm").value for a in (old, new))
    if "VLLM_NVFP4_GEMM_BACKEND" in upstream.load("vllm", RELEASES[0]).env_vars:
        assert "VLLM_NVFP4_GEMM_BACKEND" in dense_old
    if "VLLM_NVFP4_GEMM_BACKEND" not in upstream.load("vllm", RELEASES[-1]).env_vars:
        assert "VLLM_NVFP4_GEMM_BACKEND" not in dense_new
    assert old.block.install != new.block.install


def test_every_nvfp4_backend_of_the_newest_release_has_a_row(answers):
    ans = answers[("rtx-pro-6000", RELEASES[-1])]
    rec = upstream.load("vllm", RELEASES[-1])
    want = {b.name for b in rec.moe_backends if "nvfp4" in b.formats}
    rows = {it.id.split(":", 1)[1] for it in ans.items if it.topic is recommend.Topic.BACKENDS}
    assert want <= rows
    for name in ("marlin", "flashinfer_cutlass", "cutlass", "flashinfer_b12x", "flashinfer_trtllm",
                 "flashinfer_cutedsl", "triton", "b12x"):
        assert name in rows, name
    b12x = next(it for it in ans.items if it.id == "backend:flashinfer_b12x")
    # the public reports against b12x in the seed's territory are quoted with their links
    assert "github.com" in b12x.why and ("garbage" in b12x.value or "crash" in b12x.value)


@pytest.mark.parametrize("gpu", GPUS)
def test_nothing_is_cut_at_80_columns(gpu):
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "sm120lab", "recommend", "--gpu", gpu], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    ans = recommend.answer(gpu)
    for it in ans.items:
        assert " ".join(it.value.split()) in flat, it.id
    lines = r.stdout.splitlines()
    for label, cmd in ans.block.lines():
        assert cmd in lines, label  # a command is one whole line, copyable as it is
    assert "…" not in r.stdout


def test_the_setup_flags_change_every_row_that_depends_on_them():
    base = recommend.answer("rtx-pro-6000")
    more = recommend.answer("rtx-pro-6000", users=4)
    wide = recommend.answer("rtx-pro-6000", tp=4, pp=1)
    ceil = lambda a: next(it for it in a.items if it.id == "ceiling").value
    assert ceil(base) != ceil(more) and "4 users" in ceil(more)
    assert "--tensor-parallel-size 4" in wide.block.serve_line and "TP4" in ceil(wide)
    ar = lambda a: next(it for it in a.items if it.id == "allreduce")
    assert "TP4" in ar(wide).setting and ar(wide).value != ar(base).value
    with pytest.raises(ValueError, match="^tp: "):
        recommend.answer("rtx-pro-6000", tp=100000)
    with pytest.raises(ValueError, match="^pp: "):
        recommend.answer("rtx-pro-6000", pp=61)


def test_the_ceiling_counts_the_checkpoint_formats_and_the_allreduce_latency():
    it = next(it for it in recommend.answer("rtx-pro-6000").items if it.id == "ceiling")
    assert "16-bit:" in it.why and "FP4:" in it.why and "shared expert" in it.why
    m = re.search(r"without that latency the ceiling would be (\d+) tok/s", it.why)
    assert m and int(m.group(1)) > int(it.value.split()[0])


def test_the_dgx_spark_block_never_builds_sm120_code_for_sm121(answers):
    for ver in RELEASES:
        ans = answers[("dgx-spark", ver)]
        arch = [e.value for e in ans.block.exports if e.name == "FLASHINFER_CUDA_ARCH_LIST"]
        assert all(a.startswith("12.1") for a in arch), arch
        item = next(it for it in ans.items if it.id == "flashinfer-arch-list")
        assert "a 12.0f build also runs" not in item.value + item.why


def test_the_blocks_own_commands_parse_with_sm120labs_cli(answers):
    """The verify and patch commands name real sm120lab subcommands, flags and backends."""
    from sm120lab.cli import build_parser
    from sm120lab.moe.backends import backend_names

    parser = build_parser()
    for ans in answers.values():
        for cmd in (ans.block.verify, ans.block.patch):
            tokens = shlex.split(cmd.split("&&")[-1])
            if not tokens or tokens[0] != "sm120lab":
                continue
            args = parser.parse_args(tokens[1:])
            for b in getattr(args, "backend", None) or []:
                assert b in backend_names(), b


def test_every_adapter_the_guide_names_is_registered():
    from sm120lab.moe.backends import backend_names
    from sm120lab.recommend.dothis import CHECK_ADAPTERS

    names = set(backend_names())
    for backend, adapters in CHECK_ADAPTERS.items():
        assert set(adapters) <= names, (backend, adapters)


@pytest.mark.parametrize("args", [["--gpu", "rtx-pro-6000"], ["--vllm", "0.34.0"]], ids=["default", "0.34.0"])
def test_the_whole_answer_at_80_columns_never_speaks_for_pypi(args):
    """`COLUMNS=80 sm120lab recommend ...`, block and every item: what the records observed was on the package
    index the recording machine reached, so no sentence names PyPI."""
    if args[0] == "--vllm" and args[1] not in upstream.versions("vllm"):
        pytest.skip(f"vLLM {args[1]} not recorded")
    r = subprocess.run([sys.executable, "-m", "sm120lab", "recommend", *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "pypi" not in r.stdout.lower()
    assert "release: vLLM" in r.stdout
