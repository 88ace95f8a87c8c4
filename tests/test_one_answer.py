"""One answer everywhere: every page that says what to set reads the same guide object.

The pages: `sm120lab recommend` (the do-this block), `sm120lab patch status` (its arch-list
setting), `sm120lab doctor` (its guide line), notebooks 02/04/05 (their guide sections), the README
(tests/test_readme.py compares its block byte for byte) and report.html (tests/test_run_folder.py).
A test here fails when two of them give a different arch list, version or backend.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sm120lab import doctor, recommend, upstream
from sm120lab.paths import repo_root
from sm120lab.recommend.dothis import installable

GPUS = [g.value for g in recommend.GPU]


def _key(block) -> dict:
    arch = next((e.value for e in block.exports if e.name == "FLASHINFER_CUDA_ARCH_LIST"), None)
    return {"vllm": block.vllm, "flashinfer-python": block.flashinfer, "torch": block.torch,
            "moe_backend": block.moe_backend, "FLASHINFER_CUDA_ARCH_LIST": arch}


@pytest.mark.parametrize("gpu", GPUS)
def test_the_block_the_items_and_the_report_block_agree(gpu):
    ans = recommend.answer(gpu)
    key = _key(ans.block)
    assert _key(recommend.answer_block(gpu)) == key
    by_id = {it.id: it for it in ans.items}
    assert by_id["flashinfer-arch-list"].value == key["FLASHINFER_CUDA_ARCH_LIST"]
    assert by_id["moe-backend"].value == f"--moe-backend {key['moe_backend']}"
    assert by_id["versions"].value == ans.block.install
    for dist in ("vllm", "flashinfer-python", "torch"):
        assert f"{dist}=={key[dist]}" in ans.block.install
    assert key["vllm"] in by_id["versions"].why


def test_patch_status_gives_the_guides_arch_list_for_every_pinned_flashinfer():
    """`patch status` shows arch_list_for(its FlashInfer); the guide exports the same for the release
    that pins that FlashInfer."""
    from types import SimpleNamespace

    from sm120lab.commands.patch import _guide_settings

    seen = 0
    for v in upstream.versions("vllm"):
        if not installable(v)[0]:
            continue
        fi = upstream.load("vllm", v).pins["flashinfer-python"][2:]
        want = recommend.arch_list_for(fi)
        tree = SimpleNamespace(package="flashinfer-python", version=fi)
        got = _guide_settings(tree, [{"id": "fi-cuda-arch-list-suffix", "env": {"FLASHINFER_CUDA_ARCH_LIST": "x"},
                                      "replaces": [], "purpose": "p", "evidence": ""}])
        assert got[0]["env"]["FLASHINFER_CUDA_ARCH_LIST"] == want, (v, fi)
        block = recommend.build("rtx-pro-6000", None, v)
        assert _key(block)["FLASHINFER_CUDA_ARCH_LIST"] == want, (v, fi)
        seen += 1
    assert seen >= 10


def test_doctor_prints_the_guides_answer():
    summary = doctor.guide_summary({"gpu": {"available": False}})
    key = _key(recommend.answer_block("rtx-pro-6000"))
    assert {k: summary[k] for k in key} == key
    assert summary["serve"] == recommend.answer_block("rtx-pro-6000").serve_line


@pytest.mark.parametrize("nb", ["02_arch_flags", "04_throughput", "05_patch_audit"])
def test_notebooks_read_the_guide_and_type_no_answer(nb):
    src = (repo_root() / "notebooks" / "src" / f"{nb}.py").read_text()
    assert re.search(r"recommend\.(answer|guide|answer_block)\(guide_gpu", src), nb
    code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))
    # no arch list, release or backend typed into the notebook's code
    assert not re.search(r"FLASHINFER_CUDA_ARCH_LIST\s*=|['\"]12\.[01][af]['\"]", code), nb
    assert not re.search(r"--moe-backend \w", code), nb


def test_readme_states_the_guides_versions_and_backend():
    text = Path(repo_root() / "README.md").read_text()
    block = recommend.answer_block("rtx-pro-6000")
    assert block.install in text and block.serve_line in text
    key = _key(block)
    assert f"export FLASHINFER_CUDA_ARCH_LIST={key['FLASHINFER_CUDA_ARCH_LIST']}" in text


def test_report_html_heads_with_the_same_block(tmp_path):
    """report.html's first block is answer_block() for the run's machine: same install, serve and arch list."""
    import html
    import json

    from sm120lab.runs.report import build_report

    run = tmp_path / "20260101T000000Z-box-cpu"
    (run / "results").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": [{"name": "01_a", "status": "ok"}]}))
    (run / "environment.json").write_text(json.dumps({"gpu": {"available": False}, "packages": {}}))
    page = html.unescape(build_report(run))
    block = recommend.answer_block("rtx-pro-6000")
    head = page[: page.index("Verdicts")] if "Verdicts" in page else page
    for text in (block.install, block.serve_line, f"export FLASHINFER_CUDA_ARCH_LIST={_key(block)['FLASHINFER_CUDA_ARCH_LIST']}"):
        assert text in head, text


def test_report_html_keeps_every_item_and_backend_row(tmp_path):
    """Issue 31: the README shows the do-this block only; report.html keeps the whole guide (every item
    and one row per --moe-backend choice) below its first screen, for the same GPU as its block."""
    import html
    import json

    from sm120lab.runs.report import build_report

    run = tmp_path / "20260101T000000Z-box-cpu"
    (run / "results").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": [{"name": "01_a", "status": "ok"}]}))
    (run / "environment.json").write_text(json.dumps({"gpu": {"available": False}, "packages": {}}))
    for gpu in (None, "rtx-5090"):
        page = html.unescape(build_report(run, gpu=gpu))
        ans = recommend.answer(gpu or "rtx-pro-6000")
        guide = page[page.index('id="guide"'):]
        assert page.index("Verdicts") < page.index('id="guide"')
        assert all(it.setting in guide and it.value in guide for it in ans.items)
        assert all(f"--moe-backend {r['name']}" in guide for r in ans.backends)
