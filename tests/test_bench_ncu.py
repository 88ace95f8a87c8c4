"""sm120lab.bench.ncu on the recorded H200 reports (data/profiles/ncu_h200_2026-12-04/)."""

from __future__ import annotations

import json

import pytest

from sm120lab.bench import ncu
from sm120lab.paths import data_dir

AUX = data_dir() / "profiles" / "ncu_h200_2026-12-04"
MODELS = ("qwen3.5-397b-a17b", "gpt-oss-120b")


@pytest.mark.parametrize("model", MODELS)
def test_the_recorded_reports_split_into_their_windows(model):
    kernels = ncu.read_details(AUX / f"ncu_{model}.csv.xz")
    order = json.loads((AUX / f"ncu_windows_{model}.json").read_text())["windows"]
    wins = ncu.windows(kernels, order)
    assert [(w["T"], w["contender"]) for w in wins] == [(t, c) for t in (1, 16, 256, 1024)
                                                        for c in ("triton-w4a16", "vllm-marlin")]
    for w in wins:
        names = {ncu.short_name(k["name"]) for k in w["kernels"]}
        if w["contender"] == "vllm-marlin":  # two GEMM launches of vLLM's Marlin, its align and activation
            assert sum("Marlin" in ncu.short_name(k["name"]) for k in w["kernels"]) == 2
            assert {"moe::moe_align_block_size_kernel", "vllm::act_and_mul_kernel"} <= names
        else:
            assert any(n.startswith("moe_w4a16_") for n in names) and not any("Marlin" in n for n in names)
        assert all(k.get("duration_us", 0) > 0 for k in w["kernels"])
    with pytest.raises(ValueError, match="marked windows"):
        ncu.windows(kernels, order[:-1])


def test_summary_json_is_what_the_parser_gives():
    rec = json.loads((AUX / "summary.json").read_text())
    rows = []
    for m in MODELS:
        order = json.loads((AUX / f"ncu_windows_{m}.json").read_text())["windows"]
        rows += ncu.summarize(ncu.windows(ncu.read_details(AUX / f"ncu_{m}.csv.xz"), order))
    assert rec["rows"] == json.loads(json.dumps(rows))


def test_bound_reads_the_speed_of_light_percentages():
    assert ncu.bound({"dram_pct": 71.3, "sm_pct": 68.4}) == "DRAM"
    assert ncu.bound({"dram_pct": 33.6, "sm_pct": 57.8}) == "latency"
    assert ncu.bound({"dram_pct": 57.0, "sm_pct": 65.8}) == "compute"
    assert ncu.short_name("void marlin_moe_wna16::Marlin<1125, 56>(const int4 *, int)") == "marlin_moe_wna16::Marlin"


def test_a_file_without_the_header_is_refused(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("==PROF== nothing\n")
    with pytest.raises(ValueError, match="no ncu --csv --page details header"):
        ncu.read_details(f)


def test_durations_follow_each_rows_unit(tmp_path):
    """ncu picks ns, us or ms per kernel (no --print-units base): one report mixes them, and each is read in us."""
    import lzma

    src = data_dir() / "profiles" / "ncu_h100_2026-12-06_source_T256_1024" / "deep_details_qwen3.5-397b-a17b.csv.xz"
    text = lzma.open(src, "rt").read()
    assert '"Duration","ms"' in text and '"Duration","us"' in text
    kernels = ncu.read_details(src)
    durations = [k["duration_us"] for k in kernels]
    # T = 256 and 1024 layer kernels on an H100: every one between 1 us and 10 ms, none read as ms-in-us
    assert all(1.0 <= d <= 1e4 for d in durations), durations
    assert max(durations) > 1000.0  # the T = 1024 fragment kernels run above 1 ms: their "ms" rows were scaled
    f = tmp_path / "bad.csv"
    f.write_text('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
                 '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                 '"0","1","p","h","k","1","7","(64, 1, 1)","(1, 1, 1)","0","9.0","GPU Speed Of Light Throughput",'
                 '"Duration","cycle","12"\n')
    with pytest.raises(ValueError, match="Duration has unit 'cycle'"):
        ncu.read_details(f)
