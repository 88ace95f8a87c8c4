"""Schema and consistency checks for the public-evidence tables in data/published/*.yaml.

Offline: the tests read only the recorded YAML/CSV files. They check that every record carries a
public URL and a valid date, that outcomes, formats and units come from the allowed sets, that
numbers are positive and internally consistent, and that the facts other parts of the workbook
rely on (the seed report's numbers, the b12x failure reports, the checkpoint splits, the PCIe
all-reduce figure) are still there.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sm120lab.paths import data_dir
from sm120lab.roofline.decode import WEIGHT_COMPONENTS
from sm120lab.roofline.formats import BITS_PER_PARAM
from sm120lab.roofline.models import PRESETS

PUBLISHED = data_dir() / "published"
FILES = ("backends", "checkpoints", "latency", "recipes")
SEED_URL = "https://github.com/flashinfer-ai/flashinfer/issues/2723"
OUTCOMES = {"correct", "garbage", "crash", "slow", "unknown"}
TOK_S_BASES = {"per_user", "aggregate"}
SPEC_DECODE = {"none", "mtp", "unknown"}
REQUIRED_BACKENDS = {"marlin", "flashinfer_cutlass", "cutlass", "b12x", "flashinfer_b12x", "flashinfer_trtllm",
                     "flashinfer_cutedsl", "triton"}
COMPONENT_FORMATS = set(BITS_PER_PARAM) | {"n/a", "unknown"}
BASES = {"stated", "inferred", "unknown"}
LATENCY_STATS = {"p50", "p99", "mean", "unspecified"}
URL_RE = re.compile(r"^https://[a-z0-9.-]+\.[a-z]{2,}/\S+$")
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
FORBIDDEN = ("/work/", "/tmp/", "../shared", "shared/research", "seed-report.md")


def _load(name: str) -> dict:
    return yaml.safe_load((PUBLISHED / f"{name}.yaml").read_text())


@pytest.fixture(scope="module")
def tables() -> dict[str, dict]:
    return {name: _load(name) for name in FILES}


def _records(node, path="$"):
    """Yield (path, mapping) for every mapping in the tree that has a 'url' key."""
    if isinstance(node, dict):
        if "url" in node:
            yield path, node
        for key, value in node.items():
            yield from _records(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _records(value, f"{path}[{i}]")


def _date(value: str, collected: dt.date, where: str) -> dt.date | None:
    assert isinstance(value, str), f"{where}: date must be a quoted string, got {value!r}"
    if value == "unknown":
        return None
    day = dt.date.fromisoformat(value)
    assert dt.date(2023, 1, 1) <= day <= collected, f"{where}: date {value} outside 2023..{collected}"
    return day


def _positive_or_unknown(value, where: str) -> None:
    assert value == "unknown" or (isinstance(value, int) and value >= 1), f"{where}: {value!r}"


@pytest.mark.parametrize("name", FILES)
def test_every_record_has_a_public_url_and_date(name):
    table = _load(name)
    assert table["schema"] == 1
    collected = dt.date.fromisoformat(table["collected"])
    records = list(_records(table))
    assert len(records) >= 5, name
    for where, rec in records:
        assert URL_RE.match(rec["url"]), f"{name}{where}: bad url {rec['url']!r}"
        if "date" in rec:
            _date(rec["date"], collected, f"{name}{where}")
    text = (PUBLISHED / f"{name}.yaml").read_text()
    for bad in FORBIDDEN:
        assert bad not in text, f"{name}.yaml mentions {bad!r}"


def test_backend_reports(tables):
    backends = {b["name"]: b for b in tables["backends"]["backends"]}
    assert REQUIRED_BACKENDS <= set(backends)
    for name, backend in backends.items():
        assert backend["reports"], name
        assert backend["failure_modes"], name
        assert backend["vllm_flag"] and backend["kernel"], name
        for fm in backend["failure_modes"]:
            assert 20 <= len(fm["what"]) <= 300, (name, fm["what"])
        for rep in backend["reports"]:
            where = f"{name} {rep['url']}"
            assert rep["outcome"] in OUTCOMES, where
            assert rep["spec_decode"] in SPEC_DECODE, where
            assert rep["sm"] and set(rep["sm"]) <= {120, 121}, where
            assert isinstance(rep["gpu"], str) and rep["gpu"], where
            assert isinstance(rep["n_gpus"], int) and rep["n_gpus"] >= 1, where
            setup = rep["setup"]
            _positive_or_unknown(setup["tp"], where)
            _positive_or_unknown(setup["pp"], where)
            _positive_or_unknown(setup["concurrency"], where)
            assert setup["model"], where
            if isinstance(setup["tp"], int) and isinstance(setup["pp"], int):
                assert setup["tp"] * setup["pp"] <= rep["n_gpus"], where
            assert 20 <= len(rep["summary"]) <= 300, where
            for key, version in rep.get("versions", {}).items():
                assert isinstance(version, str) and re.match(r"^v?\d", version), (where, key, version)
            if "tok_s" in rep:
                tok = rep["tok_s"]
                assert tok["basis"] in TOK_S_BASES, where
                assert 0 < tok["low"] <= tok["high"] < 1e5, where
                # a number without a correctness verdict is fine; a number on garbage output is not
                assert rep["outcome"] != "garbage", where


def test_backend_reports_cover_the_seed_and_the_b12x_failures(tables):
    backends = {b["name"]: b for b in tables["backends"]["backends"]}

    def find(backend, url_tail, outcome):
        hits = [r for r in backends[backend]["reports"] if r["url"].endswith(url_tail) and r["outcome"] == outcome]
        assert hits, (backend, url_tail, outcome)
        return hits

    marlin = find("marlin", "flashinfer/issues/2723", "correct")
    assert any(r["setup"]["concurrency"] == 1 and (r["tok_s"]["low"], r["tok_s"]["high"]) == (46, 49) for r in marlin)
    find("cutlass", "flashinfer/issues/2723", "garbage")
    find("flashinfer_trtllm", "flashinfer/issues/2723", "crash")
    # the three public reports against the b12x path in the seed's territory
    garbage = find("flashinfer_b12x", "vllm/issues/47365", "garbage")
    assert {r["setup"]["tp"] for r in garbage} >= {2} and {r["setup"]["pp"] for r in garbage} >= {2}
    find("flashinfer_b12x", "flashinfer/issues/5446", "crash")
    find("flashinfer_b12x", "flashinfer/issues/3807", "crash")
    # on the seed's own setup no native FP4 backend is published faster than Marlin
    seed = [(b["name"], r) for b in backends.values() for r in b["reports"]
            if r["url"] == SEED_URL and r["setup"]["concurrency"] == 1 and "tok_s" in r]
    best_native = max(r["tok_s"]["high"] for name, r in seed if name != "marlin")
    assert best_native < min(r["tok_s"]["low"] for name, r in seed if name == "marlin")


def test_backend_numbers_agree_with_tok_s_csv(tables):
    """A report whose source also feeds data/published/tok_s.csv carries the same numbers."""
    csv = pd.read_csv(PUBLISHED / "tok_s.csv")
    csv_urls = set(csv["source_url"])
    checked = 0
    for backend in tables["backends"]["backends"]:
        for rep in backend["reports"]:
            if rep["url"] not in csv_urls or "tok_s" not in rep:
                continue
            rows = csv[(csv["source_url"] == rep["url"]) & (csv["concurrency"] == rep["setup"]["concurrency"])
                       & (csv["tok_s_basis"] == rep["tok_s"]["basis"])]
            pairs = set(zip(rows["tok_s_low"].astype(float), rows["tok_s_high"].astype(float), strict=True))
            assert (float(rep["tok_s"]["low"]), float(rep["tok_s"]["high"])) in pairs, (backend["name"], rep["url"])
            checked += 1
    assert checked >= 6


def test_checkpoint_components(tables):
    checkpoints = tables["checkpoints"]["checkpoints"]
    assert len({c["id"] for c in checkpoints}) == len(checkpoints)
    for ckpt in checkpoints:
        assert URL_RE.match(ckpt["url"]) and ckpt["sources"], ckpt["id"]
        for src in ckpt["sources"]:
            assert 20 <= len(src["read"]) <= 400, (ckpt["id"], src["url"])
        assert set(ckpt["components"]) == set(WEIGHT_COMPONENTS), ckpt["id"]
        for comp, entry in ckpt["components"].items():
            where = f"{ckpt['id']}.{comp}"
            assert entry["format"] in COMPONENT_FORMATS, where
            assert entry["basis"] in BASES, where
            assert (entry["format"] == "unknown") == (entry["basis"] == "unknown"), where
            assert URL_RE.match(entry["url"]), where
    # every model the roofline knows has at least one checkpoint row
    models = {c["model"] for c in checkpoints}
    assert set(PRESETS) <= models


def test_checkpoint_facts_the_ceiling_uses(tables):
    comps = {c["id"]: {k: v["format"] for k, v in c["components"].items()} for c in tables["checkpoints"]["checkpoints"]}
    assert comps["nvidia/Qwen3.5-397B-A17B-NVFP4"] == {
        "routed_experts": "nvfp4", "shared_expert": "bf16", "router": "bf16", "attention": "nvfp4",
        "linear_attention": "bf16", "lm_head": "bf16"}
    luke = comps["lukealonso/Qwen3.5-397B-A17B-NVFP4"]
    assert luke["routed_experts"] == "nvfp4" and all(v == "bf16" for k, v in luke.items() if k != "routed_experts")
    assert comps["openai/gpt-oss-120b"]["routed_experts"] == "mxfp4"
    for ckpt in tables["checkpoints"]["checkpoints"]:
        model = PRESETS.get(ckpt["model"])
        if model is None:
            continue
        # components the architecture lacks must say n/a (or unknown), never a format
        absent = {"linear_attention": model.n_linear_attn_layers == 0, "shared_expert": model.n_shared_experts == 0}
        for comp, is_absent in absent.items():
            fmt = comps[ckpt["id"]][comp]
            assert (fmt in {"n/a", "unknown"}) if is_absent else (fmt != "n/a"), (ckpt["id"], comp, fmt)


def test_latency_figures(tables):
    lat = tables["latency"]
    figures = lat["figures"]
    for fig in figures:
        where = f"{fig['url']} {fig['message_bytes']}"
        assert isinstance(fig["n_gpus"], int) and fig["n_gpus"] >= 2, where
        assert isinstance(fig["message_bytes"], int) and 0 < fig["message_bytes"] <= 1 << 20, where
        assert fig["latency_us"] and set(fig["latency_us"]) <= LATENCY_STATS, where
        assert all(0 < v < 1e5 for v in fig["latency_us"].values()), where
        assert fig["measured_in"] in {"standalone", "cuda_graph", "unknown"}, where
        assert "nvlink" in fig["interconnect"].lower() or "pcie" in fig["interconnect"].lower(), where
        stats = fig["latency_us"]
        if "p50" in stats and "p99" in stats:
            assert stats["p50"] <= stats["p99"], where
    # the figure the roofline needs: one token's hidden state on SM120 over PCIe, 4 GPUs, NCCL
    decode_ar = [f for f in figures if f["sm"] == 120 and f["implementation"] == "nccl" and f["n_gpus"] == 4
                 and 8192 <= f["message_bytes"] <= 16384 and "p50" in f["latency_us"]]
    assert decode_ar and all(5 < f["latency_us"]["p50"] < 50 for f in decode_ar)
    for row in lat["allreduces_per_token"]:
        assert isinstance(row["per_token"], int) and row["per_token"] > 0, row["url"]
        if "per_layer" in row and "layers" in row:
            assert row["per_layer"] * row["layers"] == row["per_token"], row["url"]
        if row["model"] in PRESETS and not row.get("approximate"):
            assert row["layers"] == PRESETS[row["model"]].n_layers, row["url"]
    for pol in lat["policies"]:
        assert 20 <= len(pol["what"]) <= 400, pol["url"]


def test_recipes(tables):
    rec = tables["recipes"]
    assert re.fullmatch(r"[0-9a-f]{40}", rec["recipes_commit"])
    by_name = {r["name"]: r for r in rec["recipes"]}
    for recipe in rec["recipes"]:
        where = recipe["name"]
        assert VERSION_RE.match(recipe["min_vllm_version"]), where
        if "github.com/vllm-project/recipes/" in recipe["url"]:
            assert rec["recipes_commit"] in recipe["url"], where
        flags = recipe["flags"]
        assert flags and all(isinstance(f, str) and f for f in flags), where
        assert flags[0].startswith("--"), where
        # a value never follows a value: every non-flag token comes right after a flag
        for prev, cur in zip(flags, flags[1:], strict=False):
            assert cur.startswith("--") or prev.startswith("--"), (where, prev, cur)
        spec = recipe["spec_decode"]
        assert isinstance(spec["num_speculative_tokens"], int) and 1 <= spec["num_speculative_tokens"] <= 8, where
        if "--speculative-config" in flags:
            cfg = flags[flags.index("--speculative-config") + 1]
            assert f'"num_speculative_tokens":{spec["num_speculative_tokens"]}' in cfg.replace(" ", ""), where
    qwen35 = by_name["Qwen3.5-397B-A17B"]
    assert qwen35["checkpoint"] == "nvidia/Qwen3.5-397B-A17B-NVFP4"
    assert qwen35["flags"][qwen35["flags"].index("--kv-cache-dtype") + 1] == "fp8"
    rtx = [r for r in rec["recipes"] if r.get("sm12x_entry") and "RTX Pro 6000" in r["name"]]
    assert rtx and all(r["min_vllm_version"] == "0.24.0" for r in rtx)
    claims = {c["claim"]: c for c in rec["minimum_version_claims"]}
    assert claims["vLLM 0.24.0 or later for NVFP4 on RTX PRO 6000"]["found"] is True
    for section in ("dense_gemm", "attention"):
        assert len(rec[section]) >= 3, section
        for item in rec[section]:
            assert 20 <= len(item["what"]) <= 400, (section, item["url"])


def test_notes_cite_only_recorded_sources():
    """Every URL in notes/published.md also appears in one of the YAML tables (one source of truth)."""
    notes = Path(data_dir().parent / "notes" / "published.md").read_text()
    urls = set(re.findall(r"https://[^\s)\]>]+", notes))
    assert len(urls) >= 15
    recorded = "".join((PUBLISHED / f"{name}.yaml").read_text() for name in FILES)
    missing = sorted(u for u in urls if u.rstrip(".,") not in recorded)
    assert not missing, missing
