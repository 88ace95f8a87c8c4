"""sm120lab recommend: the decision guide's items, their computed evidence, and SM120 run upgrades."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from sm120lab import recommend
from sm120lab.cli import main as cli_main
from sm120lab.devtools.arch_suffix import diff_lines, parse_preprocessed
from sm120lab.paths import data_dir, repo_root
from sm120lab.recommend import Evidence, Topic
from sm120lab.recommend.facts import detect_gpu, kernel_summary, smem_overflow

GPUS = [g.value for g in recommend.GPU]
FIELDS = ("setting", "value", "evidence", "source", "why")
URL = re.compile(r"^https?://\S+$")


def _rules() -> dict:
    return yaml.safe_load((repo_root() / "data" / "recommendations.yaml").read_text())


def _all_sources(rules: dict) -> list[str]:
    out = []
    for it in rules["items"]:
        out.append(it["source"])
        out += [o["source"] for o in (it.get("per_gpu") or {}).values() if "source" in o]
    return out


# --------------------------------------------------------------------------------------------
# the items


@pytest.mark.parametrize("gpu", GPUS)
def test_guide_has_at_least_8_complete_items(gpu):
    items = recommend.guide(gpu, runs_root=data_dir() / "runs")
    assert len(items) >= 8
    levels = {e.value for e in Evidence}
    for it in items:
        d = it.to_dict()
        for f in FIELDS:
            assert isinstance(d[f], str) and d[f].strip(), (it.id, f)
        assert d["evidence"] in levels
        if it.evidence is not Evidence.SM120_RUN:
            assert recommend.UNVERIFIED in it.why, it.id
    assert len({it.id for it in items}) == len(items)
    # every topic the notebooks ask for is present
    assert {Topic.ARCHFLAGS, Topic.THROUGHPUT, Topic.PATCHES} <= {it.topic for it in items}


def test_every_source_exists_or_is_a_public_url():
    rules = _rules()
    # templated sources ({vllm_record}, ...) are filled per release: check the filled ones of the guide
    resolved = [it.source for g in GPUS for it in recommend.guide(g)]
    for src in [s for s in _all_sources(rules) if "{" not in s] + resolved:
        assert "shared/" not in src and "/tmp/" not in src, src
        if URL.match(src):
            assert "github.com" in src or "nvidia.com" in src, src
            continue
        assert (repo_root() / src).exists(), f"source {src} does not exist"


def test_rules_never_type_an_evidence_level(tmp_path):
    rules = _rules()
    assert all("evidence" not in it for it in rules["items"])
    bad = dict(rules)
    bad["items"] = [dict(rules["items"][0], evidence="sm120-run")]
    p = tmp_path / "rules.yaml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="evidence is computed"):
        recommend.load_rules(p)


def test_evidence_is_computed_from_the_source(tmp_path):
    assert recommend.evidence_of("https://github.com/flashinfer-ai/flashinfer/issues/2723") is Evidence.SOURCE_READING
    assert recommend.evidence_of("data/correctness/h200_moe_check.json") is Evidence.H200_RUN
    assert recommend.evidence_of("data/archflags/matrix.json") is Evidence.COMPILE
    assert recommend.evidence_of("data/cutlass_smem/0.6.5.json") is Evidence.COMPILE
    assert recommend.evidence_of("sm120lab/patches/specs/vllm_0_17.yaml") is Evidence.SOURCE_READING
    # a data file recorded on an SM120 GPU is an sm120 run, wherever it lies
    f = tmp_path / "data" / "bench" / "x.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"env": {"gpu": {"available": True, "name": "NVIDIA RTX PRO 6000", "compute_capability": "12.0"}}}))
    assert recommend.evidence_of("data/bench/x.json", root=tmp_path) is Evidence.SM120_RUN
    with pytest.raises(FileNotFoundError, match="does not exist"):
        recommend.evidence_of("data/nope.json")


# --------------------------------------------------------------------------------------------
# SM120 runs lift the items they cover


def _fake_run(root: Path, name: str, cc: str, gpu_name: str, *, verdict: str, moe_us: float | None,
              probe: str = "correct") -> Path:
    run = root / name
    (run / "results").mkdir(parents=True)
    (run / "environment.json").write_text(json.dumps(
        {"gpu": {"available": True, "name": gpu_name, "compute_capability": cc, "driver": "999.1"}}))
    (run / "results" / "03_grouped_gemm_correctness.json").write_text(json.dumps(
        {"verdicts": {"flashinfer-cutlass": verdict, "vllm-marlin": "skipped", "torch-bf16": "correct"}}))
    # the key notebook 04 records (sm120lab.roofline.lesson.bench_figures): op_us:contender:timing:T
    bench = {} if moe_us is None else {"moe_us:triton-w4a16:graph:T1": {"value": moe_us, "unit": "us", "spread": 0.01},
                                       "moe_us:triton-w4a16:graph:T16": {"value": 9e9, "unit": "us"}}
    (run / "results" / "04_throughput.json").write_text(json.dumps({"bench": bench}))
    (run / "results" / "02_arch_flags.json").write_text(json.dumps(
        {"verdicts": {f"gpu-probe:mma_nvfp4@sm_{cc.replace('.', '')}f": probe}}))
    return run


def test_an_sm120_run_lifts_exactly_the_items_it_measured(tmp_path, seed):
    rng = random.Random(seed)
    moe_us = round(rng.uniform(40, 400), 1)
    verdict = rng.choice(["correct", "degraded", "garbage"])
    _fake_run(tmp_path, "20270101T000000Z-box-rtx-pro-6000", "12.0", "NVIDIA RTX PRO 6000 Blackwell",
              verdict=verdict, moe_us=moe_us)
    base = {it.id: it for it in recommend.guide("rtx-pro-6000", runs_root=tmp_path / "empty")}
    lifted = {it.id: it for it in recommend.guide("rtx-pro-6000", runs_root=tmp_path)}
    covered = {"toolkit", "flashinfer-arch-list", "moe-backend", "kernel-time", "verify"}
    if verdict != "correct":  # a backend judged garbage/degraded is no evidence for recommending a backend
        covered = covered - {"moe-backend"}
        assert f"MEASURED AGAINST: flashinfer-cutlass was judged {verdict}" in lifted["moe-backend"].why
        assert lifted["moe-backend"].evidence == base["moe-backend"].evidence
    for rid, it in lifted.items():
        if rid == "moe-backend" and rid not in covered:
            continue
        if rid in covered:
            assert it.evidence is Evidence.SM120_RUN, rid
            assert recommend.UNVERIFIED not in it.why, rid
            assert "20270101T000000Z-box-rtx-pro-6000" in it.why and "results" in it.source, rid
        else:
            assert it.evidence == base[rid].evidence and it.why == base[rid].why, rid
    assert f"{moe_us:.1f} us" in lifted["kernel-time"].why and "9000000000" not in lifted["kernel-time"].why
    assert f"flashinfer-cutlass = {verdict}" in lifted["verify"].why
    # vllm-marlin was skipped: the backend item is lifted by flashinfer-cutlass's verdict instead
    assert "vllm-marlin" not in lifted["moe-backend"].why
    # the same SM 12.0 covers the RTX 5090, not the SM121 DGX Spark
    assert all(it.evidence is Evidence.SM120_RUN for it in recommend.guide("rtx-5090", runs_root=tmp_path)
               if it.id in covered)
    assert not any(it.evidence is Evidence.SM120_RUN for it in recommend.guide("dgx-spark", runs_root=tmp_path))


@pytest.mark.parametrize("verdict", ["garbage", "degraded"])
def test_a_run_that_judged_the_chosen_backend_wrong_changes_the_answer(tmp_path, verdict):
    """An SM120 run whose check judged vllm-marlin (the block's backend's kernel) garbage never raises the
    evidence for recommending Marlin: it stands in the do-this block as a PROBLEM and in the item's why."""
    run = _fake_run(tmp_path, "20270101T000000Z-box-rtx-pro-6000", "12.0", "NVIDIA RTX PRO 6000 Blackwell",
                    verdict="correct", moe_us=None)
    res = run / "results" / "03_grouped_gemm_correctness.json"
    res.write_text(json.dumps({"verdicts": {"flashinfer-cutlass": "skipped", "vllm-marlin": verdict}}))
    base = recommend.answer("rtx-pro-6000", runs_root=tmp_path / "empty")
    ans = recommend.answer("rtx-pro-6000", runs_root=tmp_path)
    assert ans.block.moe_backend == base.block.moe_backend == "marlin"
    item = {it.id: it for it in ans.items}["moe-backend"]
    assert item.evidence is not Evidence.SM120_RUN and item.evidence == {it.id: it for it in base.items}[
        "moe-backend"].evidence
    assert f"MEASURED AGAINST: vllm-marlin was judged {verdict}" in item.why
    warn = [p for p in ans.block.problems if p.startswith("MEASURED AGAINST THIS BLOCK")]
    assert len(warn) == 1 and f"vllm-marlin (marlin's kernel) {verdict}" in warn[0] and run.name in warn[0]
    assert not any(p.startswith("MEASURED AGAINST") for p in base.block.problems)
    # a correct verdict lifts instead, and warns nothing
    res.write_text(json.dumps({"verdicts": {"vllm-marlin": "correct"}}))
    ok = recommend.answer("rtx-pro-6000", runs_root=tmp_path)
    assert {it.id: it for it in ok.items}["moe-backend"].evidence is Evidence.SM120_RUN
    assert not any(p.startswith("MEASURED AGAINST") for p in ok.block.problems)


def test_runs_that_measured_nothing_or_are_not_sm120_lift_nothing(tmp_path):
    _fake_run(tmp_path, "a-h200", "9.0", "NVIDIA H200", verdict="correct", moe_us=94.0)
    _fake_run(tmp_path, "b-sm120-skipped", "12.0", "NVIDIA RTX PRO 6000", verdict="skipped", moe_us=None,
              probe="not_run")
    (tmp_path / "c-broken").mkdir()
    (tmp_path / "c-broken" / "environment.json").write_text("{not json")
    assert [r.path.name for r in recommend.sm120_runs(tmp_path)] == ["b-sm120-skipped"]
    items = recommend.guide("rtx-pro-6000", runs_root=tmp_path)
    assert not any(it.evidence is Evidence.SM120_RUN for it in items)


def test_recorded_runs_hold_no_sm120_machine_yet():
    # if this fails, an SM120 run was archived: the README's guide table must be regenerated
    assert recommend.sm120_runs(data_dir() / "runs") == []


# --------------------------------------------------------------------------------------------
# computed values


def test_ceiling_value_follows_the_setup():
    from sm120lab.recommend.facts import checkpoint_of, checkpoint_precision
    from sm120lab.roofline import ceiling, get_gpu, get_model

    for gpu, model, tp, pp, users in (("rtx-pro-6000", "qwen3.5-397b-a17b", 2, 2, 1),
                                      ("rtx-5090", "qwen3-next-80b-a3b", 4, 1, 4)):
        ans = recommend.answer(gpu, model=model, tp=tp, pp=pp, users=users)
        item = next(it for it in ans.items if it.id == "ceiling")
        prec, _ = checkpoint_precision(checkpoint_of(model))
        c = ceiling(get_model(model), get_gpu(gpu), prec, tp=tp, pp=pp, batch=users,
                    collective_latency_us=ans.ceiling.latency_us)
        assert ans.ceiling.latency_us > 0
        assert item.value.startswith(f"{c.per_user_tok_s:.0f} tok/s per user at {users} user")
        assert f"TP{tp} PP{pp}" in item.value
    # the seed's model does not fit 4x 32 GB: the guide refuses to advise as if it ran
    with pytest.raises(ValueError, match=r"^setup: .*does NOT fit"):
        recommend.guide("rtx-5090", model="qwen3.5-397b-a17b", tp=2, pp=2)
    # every GPU's default setup fits
    for gpu in recommend.GPU:
        assert recommend.fit(gpu, recommend.resolve_setup(gpu)).fits


@pytest.mark.parametrize("gpu", GPUS)
def test_kernel_time_item_quotes_the_bench_file_of_the_setups_model(gpu):
    from sm120lab.recommend.facts import kernel_bench_for

    item = next(it for it in recommend.guide(gpu) if it.id == "kernel-time")
    model = recommend.resolve_setup(gpu).model
    assert item.source == kernel_bench_for(model) and model in item.setting
    raw = json.loads((repo_root() / item.source).read_text())
    assert raw["model"] == model
    t1 = [r["us_median"] for r in raw["rows"] if r["contender"] == "triton-w4a16" and r["T"] == 1
          and r["timing"] == "cuda_graph" and r.get("op", "moe") == "moe"]
    assert kernel_summary(repo_root() / item.source)["us_T1"] == t1[0]
    assert item.value.startswith(f"{t1[0]:.0f} us per MoE layer at T=1")


def test_patch_item_counts_match_the_recorded_records():
    for v in ("0.6.5", "0.7.4"):
        raw = json.loads((data_dir() / "cutlass_smem" / f"{v}.json").read_text())["records"]
        o = smem_overflow(v)
        assert o["over"] == sum(r["kernel_smem"] > 101_376 for r in raw) and o["total"] == len(raw)
        assert o["over"] > 0  # the root cause is in both versions
        assert smem_overflow(v, patched=True)["over"] == 0
    why = next(it.why for it in recommend.guide("rtx-pro-6000") if it.id == "stage-count-patch")
    assert "4 of 40 kernel types in 0.6.5" in why and "102,400 B > 101,376 B" in why


def test_setup_defaults_and_bad_input():
    s = recommend.resolve_setup("rtx-pro-6000")
    assert (s.model, s.tp, s.pp, s.users) == ("qwen3.5-397b-a17b", 2, 2, 1)  # the seed's
    assert recommend.resolve_setup("dgx-spark").n_gpus == 1
    with pytest.raises(ValueError, match="^gpu: expected"):
        recommend.guide("h200")
    with pytest.raises(ValueError, match="^tp: expected a positive integer"):
        recommend.guide("rtx-pro-6000", tp=0)
    with pytest.raises(ValueError, match="^model:"):
        recommend.guide("rtx-pro-6000", model="llama")


def test_every_rule_field_is_answered_by_the_data():
    from sm120lab.recommend.facts import Facts, facts
    from sm120lab.recommend.versioned import context, version_facts

    known = facts()
    for gpu in GPUS:
        known.update(version_facts(context(recommend.GPU(gpu), recommend.resolve_setup(gpu))))
    known.update({"tp": "2", "pp": "2", "users": "1", "verify": "x"})
    names = set()
    for it in _rules()["items"]:
        texts = [it["why"]] + [o.get("why", "") for o in (it.get("per_gpu") or {}).values()]
        for t in texts:
            names |= set(re.findall(r"{(\w+)}", t))
    assert names and names <= set(known), names - set(known)
    assert not any("not recorded" in v for k, v in known.items()), [k for k, v in known.items() if "not recorded" in v]
    assert Facts()["a_missing_name"] == "(not recorded)"


def test_section_filters_by_topic():
    items = recommend.guide("rtx-pro-6000")
    arch = recommend.section(items, "archflags")
    assert arch and all(it.topic is Topic.ARCHFLAGS for it in arch)
    both = recommend.section(items, ["patches", Topic.THROUGHPUT])
    assert {it.topic for it in both} == {Topic.PATCHES, Topic.THROUGHPUT}
    with pytest.raises(ValueError, match="^topic: expected one of"):
        recommend.section(items, "speed")


def test_show_and_markdown_render_every_item():
    items = recommend.guide("dgx-spark")
    console = Console(record=True, width=200)
    recommend.show(items, title="guide", console=console)
    text = console.export_text()
    for it in items:
        assert it.evidence.value in text
    md = recommend.to_markdown(items)
    assert md.count("\n") == len(items) + 1
    assert md.splitlines()[0] == "| setting | value | evidence | source | why |"


# --------------------------------------------------------------------------------------------
# this machine


def test_detect_gpu_and_here_notes():
    m = {"gpu": {"available": True, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0", "driver": "580.1"},
         "nvcc": [{"version": "12.8.93"}], "env": {"FLASHINFER_CUDA_ARCH_LIST": "12.0"},
         "packages": {"flashinfer-python": "0.6.5", "vllm": None, "torch": "2.11.0"}}
    assert detect_gpu(m) == "rtx-5090"
    assert detect_gpu({"gpu": {"available": True, "name": "NVIDIA GB10", "compute_capability": "12.1"}}) == "dgx-spark"
    assert detect_gpu({"gpu": {"available": True, "name": "NVIDIA RTX PRO 6000 Blackwell", "compute_capability": "12.0"}}) \
        == "rtx-pro-6000"
    with pytest.raises(ValueError, match="not SM120/SM121"):
        detect_gpu({"gpu": {"available": True, "name": "NVIDIA H200", "compute_capability": "9.0"}})
    with pytest.raises(ValueError, match="no CUDA GPU"):
        detect_gpu({"gpu": {"available": False, "reason": "none"}})
    here = {it.id: it.here for it in recommend.guide("rtx-5090", machine=m)}
    assert "too old" in here["toolkit"] and "torch 2.11.0" in here["toolkit"]
    assert "bare 12.x" in here["flashinfer-arch-list"]
    assert "flashinfer-python 0.6.5" in here["versions"] and "vllm not installed" in here["versions"]


# --------------------------------------------------------------------------------------------
# CLI


@pytest.mark.parametrize("gpu", GPUS)
def test_cli_writes_json(tmp_path, gpu, capsys):
    out = tmp_path / f"{gpu}.json"
    assert cli_main(["recommend", "--gpu", gpu, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["gpu"] == gpu and len(doc["items"]) >= 8
    assert doc["command"].startswith("sm120lab")
    for it in doc["items"]:
        assert set(FIELDS) <= set(it)
        if it["evidence"] != "sm120-run":
            assert "unverified on SM120 hardware" in it["why"]
        if not URL.match(it["source"]):
            assert (repo_root() / it["source"]).exists()


@pytest.mark.parametrize("argv, prefix", [
    (["--gpu", "h100"], "--gpu: expected"),
    (["--tp", "0"], "--tp: expected a positive integer"),
    (["--model", "llama"], "--model:"),
    (["--topic", "speed"], "--topic: expected one of"),
    (["--runs", "/nonexistent-folder"], "--runs: expected a folder"),
    (["--json", "{file}/x.json"], "--json: cannot write"),
    (["--gpu", "dgx-spark", "--tp", "2"], "--tp/--pp:"),
])
def test_cli_bad_input_is_one_line(argv, prefix, tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(SystemExit) as exc:
        cli_main(["recommend", *[a.format(file=a_file) for a in argv]])
    msg = str(exc.value)
    assert msg.startswith(prefix) and "\n" not in msg


def test_cli_auto_without_sm120_gpu_says_what_it_found():
    import torch

    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 12:
        pytest.skip("this machine has an SM12x GPU")
    with pytest.raises(SystemExit) as exc:
        cli_main(["recommend", "--gpu", "auto"])
    assert str(exc.value).startswith("--gpu auto:")


# --------------------------------------------------------------------------------------------
# the 120a -> 120f question


def test_preprocessed_diff_points_at_the_source_line():
    a = '# 1 "x.cu"\nint a;\n# 10 "h.h" 1\nconstexpr bool s = true;\nint z;\n'
    b = '# 1 "x.cu"\nint a;\n# 10 "h.h" 1\n\n\nconstexpr bool s = false;\nint z;\n'
    pa, pb = parse_preprocessed(a), parse_preprocessed(b)
    assert pa[1] == ("h.h", 10, "constexpr bool s = true;")
    assert pb[1] == ("h.h", 12, "constexpr bool s = false;")
    hunks = diff_lines(pa, pb)
    assert len(hunks) == 1
    assert hunks[0]["120a"] == ["h.h:10: constexpr bool s = true;"]
    assert hunks[0]["120f"] == ["h.h:12: constexpr bool s = false;"]
    assert diff_lines(pa, pa) == []


@pytest.mark.parametrize("version", ["0.6.5", "0.7.4"])
def test_recorded_arch_suffix_scan(version):
    d = json.loads((data_dir() / "arch_suffix" / f"flashinfer-{version}.json").read_text())
    assert d["flashinfer_version"] == version and d["command"].startswith("python -m sm120lab.recommend.arch_suffix")
    # the method sees a real suffix branch (the control) ...
    assert not d["control"]["identical"]
    ctrl = " ".join(d["control"]["hunks"][0]["120a"] + d["control"]["hunks"][0]["120f"])
    assert "isArchSpecific = true" in ctrl and "isArchSpecific = false" in ctrl
    # ... and finds none in the MoE units, which include FlashInfer's generated SM120 GEMMs
    assert d["all_identical"] and all(u["identical"] and not u["hunks"] for u in d["units"])
    assert sum("sm120" in u["unit"] for u in d["units"]) >= 5
    assert all(u["lines"]["120a"] > 100_000 for u in d["units"])
    assert "__CUDA_ARCH_FEAT_SM120_ALL" in d["device_macros"]["120a"]
    assert "__CUDA_ARCH_FEAT_SM120_ALL" not in d["device_macros"]["120f"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_device_preprocessing_sees_the_suffix(tmp_path):
    from sm120lab.devtools.arch_suffix import device_macros

    nvcc = shutil.which("nvcc")
    macros = device_macros(nvcc)
    assert "__CUDA_ARCH_SPECIFIC__=1200" in macros["120a"] and "__CUDA_ARCH_SPECIFIC__=1200" not in macros["120f"]
    src = tmp_path / "t.cu"
    src.write_text("#ifdef __CUDA_ARCH_FEAT_SM120_ALL\nint feat_all;\n#else\nint no_feat;\n#endif\n")
    outs = {}
    for s in ("120a", "120f"):
        proc = subprocess.run([nvcc, "-E", f"-gencode=arch=compute_{s},code=sm_{s}", str(src)],
                              capture_output=True, text=True, check=True)
        outs[s] = [t for f, _, t in parse_preprocessed(proc.stdout) if f.endswith("t.cu")]
    assert "int feat_all;" in outs["120a"] and "int no_feat;" in outs["120f"]


def test_ptx_opcode_count():
    from sm120lab.devtools.arch_suffix import ptx_opcodes

    ptx = """
.version 8.8
.target sm_120a
// comment
.entry k(
.param .u64 p)
{
\t.reg .b32 %r<4>;
$L__BB0_1:
\tadd.s32 %r1, %r2, %r3;
\t@%p1 bra $L__BB0_1;
\t@!%p1 mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 {%f1}, {%r1}, {%r2}, {%f2}, %r3, {0, 0}, %r3, {0, 0};
\tadd.s32 %r1, %r1, 1;
\tret;
}
"""
    assert ptx_opcodes(ptx.splitlines()) == {
        "add.s32": 2, "bra": 1, "ret": 1,
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3": 1}


def test_recorded_ptx_comparison_if_present():
    d = json.loads((data_dir() / "arch_suffix" / "flashinfer-0.6.5.json").read_text())
    if "ptx" not in d:
        pytest.skip("recorded without --ptx")
    p = d["ptx"]
    assert p["target_lines"] == {"120a": [".target sm_120a"], "120f": [".target sm_120f"]}
    assert "FINALIZE, 256, 128, 128" in p["instantiation"]
    # the tensor-core, TMA, barrier and memory instructions are the same under both suffixes
    assert p["feature_instructions"]["120a"] == p["feature_instructions"]["120f"]
    assert p["feature_instructions"]["120a"]["mma.sync"] > 0
    diffs = p["opcode_differences"]
    assert all(not op.startswith(("mma", "cp.async", "mbarrier", "tensormap", "ld.", "st.")) or op.startswith("ld.param")
               for op in diffs), diffs
    assert sum(a for a, _ in diffs.values()) - sum(f for _, f in diffs.values()) == \
        p["instructions"]["120a"] - p["instructions"]["120f"]


def test_update_readme_rewrites_only_the_guide_block(tmp_path):
    f = tmp_path / "README.md"
    f.write_text("# t\n\n<!-- guide:start -->\nold\n<!-- guide:end -->\n\ntail\n")
    assert cli_main(["recommend", "--gpu", "rtx-5090", "--update-readme", str(f)]) == 0
    text = f.read_text()
    ans = recommend.answer("rtx-5090")
    table = ans.block.to_markdown() + "\n\n" + recommend.to_markdown(ans.items)
    assert text == "# t\n\n<!-- guide:start -->\n" + table + "\n<!-- guide:end -->\n\ntail\n"
    f.write_text("no markers")
    with pytest.raises(SystemExit) as exc:
        cli_main(["recommend", "--update-readme", str(f)])
    assert str(exc.value).startswith("--update-readme:")
    assert f.read_text() == "no markers"


def test_update_readme_writes_the_block_to_the_readme_and_every_item_to_the_guide_page(tmp_path):
    """Issue 31: a README with a do-this block gets the block alone; docs/guide.md beside it (made when
    missing, its own words kept when present) gets the block and every item."""
    from sm120lab.recommend.render import NEW_GUIDE_PAGE

    f = tmp_path / "README.md"
    f.write_text("# t\n\n<!-- dothis:start -->\nold\n<!-- dothis:end -->\n\ntail\n")
    assert cli_main(["recommend", "--update-readme", str(f)]) == 0
    ans = recommend.answer("rtx-pro-6000")
    assert f.read_text() == "# t\n\n<!-- dothis:start -->\n" + ans.block.to_markdown() + "\n<!-- dothis:end -->\n\ntail\n"
    page = tmp_path / "docs" / "guide.md"
    full = ans.block.to_markdown() + "\n\n" + recommend.to_markdown(ans.items)
    assert page.read_text() == NEW_GUIDE_PAGE.replace("<!-- guide:end -->", full + "\n<!-- guide:end -->")
    page.write_text("# mine\n\n<!-- guide:start -->\nold\n<!-- guide:end -->\nmore\n")
    assert cli_main(["recommend", "--update-readme", str(f)]) == 0
    assert page.read_text() == "# mine\n\n<!-- guide:start -->\n" + full + "\n<!-- guide:end -->\nmore\n"
    # a guide page without its markers: nothing is written, the README included
    page.write_text("no markers")
    f.write_text("<!-- dothis:start -->\nold\n<!-- dothis:end -->\n")
    with pytest.raises(SystemExit, match=r"^--update-readme:"):
        cli_main(["recommend", "--update-readme", str(f)])
    assert page.read_text() == "no markers" and "old" in f.read_text()


def test_html_table_escapes_and_keeps_every_item():
    from sm120lab.recommend.render import to_html

    items = recommend.guide("rtx-pro-6000")
    items[0].why = "<script>x</script> & more"
    html = to_html(items)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<tr>") == len(items) + 1


def test_run_folders_with_hostile_files_never_hang_the_guide(tmp_path):
    """A FIFO or a link to /dev/zero where environment.json should be is skipped, not read."""
    import os

    a = tmp_path / "a"
    a.mkdir()
    os.mkfifo(a / "environment.json")
    b = tmp_path / "b"
    b.mkdir()
    (b / "environment.json").symlink_to("/dev/zero")
    assert recommend.sm120_runs(tmp_path) == []
