"""The README, its do-this block, its why lines and its findings table, and the guide page
(``docs/guide.md``: every item and backend row) agree with the recorded data they name.

When a recorded file changes, these tests say which README number to update; the do-this block and
the guide page are regenerated with ``sm120lab recommend --update-readme README.md``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest

from sm120lab import recommend
from sm120lab.cli import build_parser
from sm120lab.paths import data_dir, repo_root
from sm120lab.recommend.facts import arch_suffix_facts, kernel_summary, seed_patch_facts, smem_overflow

README = repo_root() / "README.md"
GUIDE = repo_root() / "docs" / "guide.md"


def _text() -> str:
    return README.read_text()


def _block(text: str, name: str) -> str:
    m = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert m, f"no <!-- {name}:start --> block"
    return m.group(1)


def _section(title: str) -> str:
    text = _text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else None]


def _findings_row(prefix: str) -> str:
    rows = [ln for ln in _section("What the workbook found").splitlines() if ln.startswith(f"| {prefix}")]
    assert len(rows) == 1, f"README findings table: expected one row starting with {prefix!r}"
    return rows[0]


def _pct(x: float) -> str:
    return f"{x:.0f}%"


# --------------------------------------------------------------------------------------------
# the guide


def test_readme_opens_with_the_do_this_block_and_the_guide_page_holds_every_item():
    text = _text()
    ans = recommend.answer("rtx-pro-6000", runs_root=data_dir() / "runs")
    stale = "stale: run `sm120lab recommend --update-readme README.md`"
    assert _block(text, "dothis") == ans.block.to_markdown(), f"README do-this block {stale}"
    assert "<!-- guide:start -->" not in text  # every item lives on the guide page
    page = GUIDE.read_text()
    assert _block(page, "guide") == ans.block.to_markdown() + "\n\n" + recommend.to_markdown(ans.items), \
        f"docs/guide.md {stale}"
    assert ans.backends and all(f"| --moe-backend {r['name']} |" in page for r in ans.backends)
    s = recommend.resolve_setup("rtx-pro-6000")
    assert (s.model, s.tp, s.pp, s.users) == ("qwen3.5-397b-a17b", 2, 2, 1)
    assert "4x RTX PRO 6000, TP2 PP2" in text and "4x RTX PRO 6000, TP2 PP2" in page


def test_readme_reaches_its_quick_start_within_one_screen():
    """Issue 31: the pitch, the do-this block, at most 8 lines of why (each linking to evidence), then
    the Quick start, within 60 lines."""
    lines = _text().splitlines()
    heads = [ln for ln in lines if ln.startswith("## ")]
    assert heads[:3] == ["## Do this", "## Why", "## Quick start"], heads[:4]
    assert lines.index("## Quick start") < 60, lines.index("## Quick start")
    why = [ln for ln in _section("Why").splitlines()[1:] if ln.strip()]
    assert 1 <= len(why) <= 8 and all(ln.startswith("- ") for ln in why), why
    assert all(re.search(r"\]\([^)]+\)", ln) for ln in why), "every why line links to its evidence"


def test_the_why_lines_say_what_the_block_and_the_data_say():
    why = _section("Why")
    block = recommend.answer_block("rtx-pro-6000")
    ca = recommend.answer("rtx-pro-6000").ceiling
    pub = {r["backend"]: r for r in csv.DictReader((data_dir() / "published" / "tok_s.csv").open())
           if r["gpu"] == "rtx-pro-6000" and r["concurrency"] == "1"}
    m = pub["Marlin"]
    assert f"--moe-backend {block.moe_backend} " in block.serve_line and block.moe_backend == "marlin"
    assert f"**Marlin**: the fastest published correct result on this GPU, {m['tok_s_low']}-{m['tok_s_high']} tok/s" in why
    lo, hi = (100 * float(m[k]) / ca.per_user_tok_s for k in ("tok_s_low", "tok_s_high"))
    assert (f"**Expect**: {m['tok_s_low']}-{m['tok_s_high']} tok/s is {lo:.0f}-{_pct(hi)} of the "
            f"{ca.per_user_tok_s:.0f} tok/s decode ceiling") in why
    f = seed_patch_facts()
    assert f"none of the seed report's {f['seed_edits']} edits is needed and {f['seed_harmful']} are harmful" in why
    arch = re.search(r"export FLASHINFER_CUDA_ARCH_LIST=(\S+)", block.to_markdown()).group(1)
    assert f"`FLASHINFER_CUDA_ARCH_LIST={arch}`" in why
    assert smem_overflow("0.6.5")["tiles"] == ["256x128x128", "128x256x128"] and "two CUTLASS tiles" in why


# --------------------------------------------------------------------------------------------
# the findings table, row by row


def _cells() -> list[dict]:
    return json.loads((data_dir() / "archflags" / "matrix.json").read_text())["cells"]


def _cell(probe, toolkit, target) -> dict:
    hit = [c for c in _cells() if (c["probe"], c["toolkit"], c["target"]) == (probe, toolkit, target)]
    assert len(hit) == 1, (probe, toolkit, target)
    return hit[0]


def test_arch_conditional_row():
    row = _findings_row("`compute_120` gives")
    assert "True, at run time" in row and "data/archflags/matrix.json" in row
    for tk in ("12.8", "12.9", "13.0"):
        stub = _cell("arch_conditional", tk, "sm_120")
        assert stub["status"] == "accepted" and stub["stub"] and not stub["feature_in_sass"]
        assert _cell("mma_nvfp4", tk, "sm_120")["status"] == "rejected-ptxas"


def test_cuda_13_row():
    row = _findings_row("`compute_120f` needs CUDA 13.0")
    assert "**False**" in row
    c = _cell("mma_nvfp4", "12.9", "sm_120f")
    assert c["status"] == "accepted" and c["feature_in_sass"]
    sass = re.search(r"`(OMMA[^`]+)`", row).group(1)
    assert sass in json.dumps(c)
    assert all(c["status"] != "accepted" for c in _cells() if c["toolkit"] == "12.8" and c["target"].endswith("f"))
    assert _cell("mma_nvfp4", "13.0", "compute_120f->sm_121")["status"] == "accepted"
    assert _cell("mma_nvfp4", "13.0", "compute_120a->sm_121a")["status"] != "accepted"


def test_stage_count_row():
    row = _findings_row("All TMA warp-specialized")
    a, b = smem_overflow("0.6.5"), smem_overflow("0.7.4")
    assert f"{a['over']} of {a['total']} kernel types in FlashInfer 0.6.5" in row
    assert f"{b['over']} of {b['total']} compiled (f16-output) kernel types in 0.7.4" in row
    assert b["selection"] != "all"  # 0.7.4 was measured for the f16-output instantiations only
    assert a["tiles"] == b["tiles"] == ["256x128x128", "128x256x128"]
    assert "NVFP4 256x128x128 and 128x256x128 FINALIZE" in row
    assert f"{a['bytes'][0]:,} B > 101,376 B" in row and a["bytes"] == b["bytes"]
    for v in ("0.6.5", "0.7.4"):
        recs = json.loads((data_dir() / "cutlass_smem" / f"{v}.json").read_text())["records"]
        over = [r for r in recs if r["kernel_smem"] > 101_376]
        # one epilogue fusion (FINALIZE; NONE = 0), no swap_ab, 3 stages, in both versions
        assert {(r["fusion"], r["swap_ab"], r["stages"]) for r in over} == {(3, 0, 3)}


def test_arch_suffix_row():
    row = _findings_row("`compute_120f` nearly triples")
    f = arch_suffix_facts()
    assert f"{f['suffix_units_065']} units in 0.6.5, {f['suffix_units_074']} in 0.7.4" in row
    for v in ("0.6.5", "0.7.4"):
        d = json.loads((data_dir() / "arch_suffix" / f"flashinfer-{v}.json").read_text())
        assert d["all_identical"] and not d["control"]["identical"]
    ptx = json.loads((data_dir() / "arch_suffix" / "flashinfer-0.6.5.json").read_text())["ptx"]
    fa, ff = ptx["feature_instructions"]["120a"], ptx["feature_instructions"]["120f"]
    assert fa == ff and f"same {fa['mma.sync']} block-scaled MMAs" in row
    n = ptx["instructions"]
    assert f"({n['120a']:,} vs {n['120f']:,} instructions, the faster 120f build has more)" in row
    assert n["120f"] > n["120a"]
    pub = list(csv.DictReader((data_dir() / "published" / "tok_s.csv").open()))
    seed = {(r["backend"], r["concurrency"]): r for r in pub if r["gpu"] == "rtx-pro-6000"}
    assert seed[("FlashInfer CUTLASS 120a", "1")]["tok_s_low"] == "14.6"
    assert seed[("FlashInfer CUTLASS 120f", "1")]["tok_s_low"] == "39.0"
    assert seed[("FlashInfer CUTLASS 120a", "1")]["cuda"] == "12.8" and seed[("FlashInfer CUTLASS 120f", "1")]["cuda"] == "13.0"


def test_patches_row():
    row = _findings_row("FlashInfer needs extensive patching")
    f = seed_patch_facts()
    assert f"None of its {f['seed_edits']} edits" in row
    assert f"{f['seed_noop']} are no-ops or already upstream, {f['seed_harmful']} are harmful" in row
    assert int(f["seed_noop"]) + int(f["seed_harmful"]) == int(f["seed_edits"]) and f["seed_needed"] == "0"
    patched = smem_overflow("0.6.5", patched=True)
    assert patched["over"] == 0
    def key(r):
        return r["act"], r["out"], r["fusion"], r["swap_ab"], r["tile_m"], r["tile_n"], r["tile_k"]

    before = json.loads((data_dir() / "cutlass_smem" / "0.6.5.json").read_text())["records"]
    after = json.loads((data_dir() / "cutlass_smem" / "0.6.5-patched.json").read_text())["records"]
    over = {key(r) for r in before if r["kernel_smem"] > 101_376}
    fixed = [r for r in after if key(r) in over]
    assert len(fixed) == len(over) and {r["stages"] for r in fixed} == {2}
    assert len({r["kernel_smem"] for r in fixed}) == 1
    assert f"2 stages ({fixed[0]['kernel_smem']:,} B)" in row


_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty")


def _count_in(row: str, noun: str) -> int:
    """The count the README writes before ``noun`` (a word such as "Eight", or digits such as "1,200")."""
    m = re.search(rf"\b([A-Za-z]+|[\d,]+) {noun}", row)
    assert m, f"README findings row: no count before {noun!r}"
    word = m.group(1).replace(",", "")
    return int(word) if word.isdigit() else _NUMBER_WORDS.index(word.lower())


def test_harness_row():
    from sm120lab.moe.faults import FAULTS

    row = _findings_row("Correctness was judged")
    diffs = json.loads((data_dir() / "correctness" / "h200_fp4_quantize.json").read_text())["diffs"]
    by_layout = {d["layout"]: d for d in diffs}
    assert (f"{100 * by_layout['linear']['scale_match']:.3f}% (linear) / "
            f"{100 * by_layout['swizzled']['scale_match']:.3f}% (swizzled)") in row
    assert all(d["verdict"] == "garbage" and d["silent"] for d in diffs)
    # planted faults: the count the README gives is the number of required faults that the recorded
    # false-alarm sweep caught AND localized in every one of its problems
    sweep = json.loads((data_dir() / "correctness" / "false_alarm_sweep.json").read_text())["totals"]
    required = {n: f for n, f in sweep["faults"].items() if f["required"]}
    assert required and all(f["caught"] == f["localized"] == f["of"] == sweep["problems"] for f in required.values())
    assert sweep["false_garbage"] == 0 and sweep["required_faults_not_localized"] == 0
    assert _count_in(row, "planted MoE faults") == len(required)
    if re.search(r"[\d,]+ (?:sweep )?problems", row):
        assert _count_in(row, "(?:sweep )?problems") == sweep["problems"]
    assert set(required) <= {f.name for f in FAULTS}  # the recorded required faults still exist in the code
    # the 10,000-problem validation sweep: its size, its 0 false garbage, the count of held legitimate variants
    # and the 95% bound (3 / n, the rule of three)
    val = json.loads((data_dir() / "correctness" / "sweep10k_2026-12-05" / "seeds60000000_validation.json").read_text())
    assert f"{val['totals']['problems']:,} fresh problems" in row and val["totals"]["false_garbage"] == 0
    held = [b for b in val["backends"]["correct"] if b not in ("reference", "emulated-w4a4")]
    assert f"{len(held)} legitimate backends held" in row
    bound = 3 / val["totals"]["problems"]
    exp = math.floor(math.log10(bound))
    assert f"below {bound / 10 ** exp:.2f}e{exp} at 95%" in row
    # and the archived H200 run's notebook 03 called every one of them garbage
    h200 = next(p for p in (data_dir() / "runs").iterdir() if "h200" in p.name)
    verdicts = json.loads(next((h200 / "results").glob("03_*.json")).read_text())["verdicts"]
    # a routing-normalization fault may move no token beyond resolution on a given problem: then it is
    # "not applicable" there and the notebook's verdict for it is not garbage
    routing = {n for n in required if n.startswith("fault-routing-")}
    assert all(verdicts.get(n) == "garbage" for n in set(required) - routing), {n: verdicts.get(n) for n in required}
    assert all(verdicts.get(n) in ("garbage", "correct") for n in routing), {n: verdicts.get(n) for n in routing}


def test_roofline_row():
    row = _findings_row("Marlin's 46-49 tok/s")
    ca = recommend.answer("rtx-pro-6000").ceiling  # the guide's ceiling: one answer everywhere
    c = ca.ceiling
    pub = {r["backend"]: r for r in csv.DictReader((data_dir() / "published" / "tok_s.csv").open())
           if r["gpu"] == "rtx-pro-6000" and r["concurrency"] == "1"}
    lo, hi = (100 * float(pub["Marlin"][k]) / c.per_user_tok_s for k in ("tok_s_low", "tok_s_high"))
    fi = float(pub["FlashInfer CUTLASS 120f"]["tok_s_low"])
    assert f"{pub['Marlin']['tok_s_low']}-{pub['Marlin']['tok_s_high']} tok/s" in row
    assert f"**{lo:.0f}-{_pct(hi)}**" in row  # the reported range over the ceiling, not a midpoint
    assert f"{c.per_user_tok_s:.0f} tok/s per user" in row and c.bound == "memory"
    assert f"{ca.latency_us:g} us each; {ca.without_latency.per_user_tok_s:.0f} without that latency" in row
    assert f"{fi:.1f} is {_pct(100 * fi / c.per_user_tok_s)}" in row


def test_kernel_row_reads_the_newest_bench_file_it_names():
    from sm120lab.kernels.plan import FRAG_MAX_ROWS
    from sm120lab.recommend.facts import kernel_bench_for

    row = _findings_row("(no portable FP4 MoE kernel)")
    path = re.search(r"`(data/bench/[^`]+\.json)`", row).group(1)
    newest = kernel_bench_for("qwen3.5-397b-a17b")  # the row is "at the Qwen3.5 shape"
    assert "at the Qwen3.5 shape" in row and path == newest, f"README kernel row names {path}; the newest is {newest}"
    s = kernel_summary(repo_root() / path)
    assert f"up to {FRAG_MAX_ROWS:.0f} rows per expert" in row
    assert f"on an {s['gpu']}" in row
    assert f"{s['us_T1']:.0f} us per MoE layer at T=1 ({s['vs_bf16_T1']:.2f}x" in row
    assert f"{s['vs_bf16_Tmax']:.2f}x at T={s['Tmax']}" in row
    peer, marlin = s["vs_peer"], s["vs_marlin"]
    assert peer or marlin, "the kernel row's bench file has neither Marlin nor peer rows"
    if marlin:  # vLLM's Marlin, the kernel SM120 owners serve with
        assert f"Marlin time / ours) {marlin[1]:.2f}x at T=1 and {marlin[s['Tmax']]:.2f}x at T={s['Tmax']}" in row
        ahead = [t for t, v in marlin.items() if v > 1.0]
        assert f"ahead at T={min(ahead)}-{max(ahead)}" in row and ahead == sorted(ahead)
        behind = [t for t, v in marlin.items() if v <= 1.0]
        assert all(f"T={t}" in row for t in behind) and f"({marlin[behind[0]]:.2f}x)" in row
    if peer:
        assert f"production peer (triton_kernels `matmul_ogs`, bf16 x MXFP4) {peer[1]:.2f}x at T=1 and " \
               f"{peer[s['Tmax']]:.2f}x at T={s['Tmax']}" in row
    # the newest H100 tuning: every preset and two untuned shapes, Marlin in the same process
    from sm120lab.bench.lesson import marlin_range_text, marlin_ranges
    from sm120lab.bench.records import load_bench

    tuned = sorted((data_dir() / "bench").glob("moe_h100-80gb-hbm3_2026-12-07_*_tune.json"))
    assert len(tuned) == 6 and all(load_bench(p).checks_ok for p in tuned)
    ranges = marlin_ranges(tuned)
    assert sorted(ranges) == [1, 4, 16, 64, 256, 1024, 4096]
    assert "`data/bench/moe_h100-80gb-hbm3_2026-12-07_<preset>_tune.json`" in row
    assert f"Marlin time / ours: {marlin_range_text(ranges)}." in row
    pct = s["pct_copy_bw"]
    t_best = max(pct, key=pct.get)
    assert f"{pct[1]:.1f}% of the measured {s['copy_GBps']:,.0f} GB/s copy bandwidth at T=1" in row
    assert f"at most {pct[t_best]:.1f}% (T={t_best})" in row
    aot = json.loads((data_dir() / "triton_aot" / "sm120.json").read_text())["rows"]
    sm120 = [r for r in aot if r["cc"] == 120]
    assert all(r["fits_sm120"] for r in sm120)
    assert f"All {len(sm120)} sm_120 kernel configs fit" in row
    assert f"{sum(r.get('n_nvfp4_mma', 0) > 0 for r in sm120)} lower to the native NVFP4 MMA" in row


# --------------------------------------------------------------------------------------------
# versions, commands, standalone


def test_versions_table_matches_adapters_and_specs():
    import yaml

    from sm120lab.moe.backends import all_backends

    table = _section("FlashInfer and vLLM versions")
    adapters = [b for b in all_backends().values() if getattr(b, "api", None) is not None]
    assert adapters
    for b in adapters:
        rows = [ln for ln in table.splitlines() if f"`{b.name}`" in ln]
        assert len(rows) == 1, f"README versions table: no row for adapter {b.name}"
        for v in b.api.checked:
            assert v in rows[0], (b.name, v)
    for spec in sorted((repo_root() / "sm120lab" / "patches" / "specs").glob("*.yaml")):
        versions = yaml.safe_load(spec.read_text())["versions"]
        rows = [ln for ln in table.splitlines() if spec.name in ln]
        assert rows and f"`{versions}`" in rows[0], (spec.name, versions)


def test_readme_commands_exist():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    names = set(sub.choices)
    used = set(re.findall(r"`sm120lab ([a-z][a-z-]+)", _text() + GUIDE.read_text()))
    assert used and used <= names, used - names
    assert "make lab" in _text() and ".[gpu]" in _text() and "report.html" in _text()


def test_notebook_table_lists_every_notebook():
    table = _section("Notebooks")
    listed = re.findall(r"^\| `(\d\d_[a-z0-9_]+)` \|", table, re.M)
    assert listed == sorted(p.stem for p in (repo_root() / "notebooks" / "src").glob("[0-9][0-9]_*.py"))


def test_every_help_text_is_plain_text():
    """`sm120lab --help` and each subcommand's help: docstring RST (``x``, :func:`x`) is stripped, the words kept."""
    from sm120lab.cmdline import plain_text

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    pages = {"": parser.format_help()} | {name: p.format_help() for name, p in sub.choices.items()}
    assert len(pages) > 10
    for name, page in pages.items():
        assert not re.search(r"``|:(func|mod|class|meth):`", page), (name, page)
    assert plain_text("``--x N``: see :func:`sm120lab.run` and :mod:`~a.b`") == "--x N: see sm120lab.run and a.b"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip("# ").lower()).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", "docs/guide.md"])
def test_readme_stands_alone(page):
    path = repo_root() / page
    text = path.read_text()
    for bad in ("../shared", "/tmp/", "landscape.md", "METHOD.md", "KINDS.md"):
        assert bad not in text, bad
    anchors = {_anchor(ln) for ln in text.splitlines() if ln.startswith("#")}
    for link in re.findall(r"\]\(([^)]+)\)", text):
        if link.startswith("#"):
            assert link[1:] in anchors, link
        elif not link.startswith("http"):
            assert (path.parent / link).resolve().exists(), link


@pytest.mark.parametrize("name", sorted(p.name for p in (repo_root() / "notes").glob("arch_suffix*.md")))
def test_arch_suffix_note_cites_public_sources(name):
    text = (repo_root() / "notes" / name).read_text()
    assert "https://github.com/flashinfer-ai/flashinfer" in text
    for bad in ("../shared", "/tmp/", "landscape.md"):
        assert bad not in text
    for rel in re.findall(r"`(data/[^`]+)`", text):
        assert (repo_root() / rel.rstrip("/")).exists() or list(Path(repo_root()).glob(rel)), rel
