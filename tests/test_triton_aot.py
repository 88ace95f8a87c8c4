"""The Triton MoE kernels fit SM120 by construction: every kernel variant x every tile config,
compiled ahead of time for sm_120 and sm_121 (no GPU), stays within SM120's 101,376 B of shared
memory per block, spills no registers (no STL/LDL in the SASS, no local memory), and the PTX holds
the intended instruction (W4A4 native: the block-scaled NVFP4
``mma.sync ... kind::mxf4nvf4 ... scale_vec::4X ... ue4m3``; W4A16 / W4A4-dequant: bf16 mma.sync;
decode: ``cvt.rn.f16x2.e4m3x2``). Rule per row: :func:`sm120lab.archflags.kernel_aot.row_problems`.

The full table lives in data/triton_aot/sm120.json (``sm120lab dev kernel-aot --out ...``,
~7 min on 2 cores). When its source hash matches the kernels, the default test checks the table and
recompiles a sample; a stale table fails it with the command that re-records it. The full recompile
is marked slow (``make test-full``).
Compilation runs in a subprocess: the interpreter tests import the kernels in interpreted form.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from sm120lab.archflags.kernel_aot import SAMPLE, config_key, jobs, row_problems, source_hash  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "data" / "triton_aot" / "sm120.json"
PINNED_TRITON = "3.9.0"


def _compile(args: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "sm120lab", "dev", "kernel-aot", "--quiet", *args],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=1500)
    assert res.stdout.strip(), res.stderr[-2000:]
    return json.loads(res.stdout)


def _check_rows(rows):
    bad = [(r["kernel"], r.get("config"), r.get("cc"), row_problems(r)) for r in rows if row_problems(r)]
    assert not bad, bad[:10]


@pytest.mark.skipif(triton.__version__ != PINNED_TRITON, reason=f"AOT table pinned to Triton {PINNED_TRITON}")
def test_every_kernel_and_config_fits_sm120_and_uses_the_intended_mma():
    doc = json.loads(TABLE.read_text()) if TABLE.exists() else None
    fresh = doc is not None and doc.get("source_hash") == source_hash() and doc.get("triton") == triton.__version__
    if fresh:
        have = {(r["kernel"], r["config"], r["cc"]) for r in doc["rows"] if "config" in r}
        need = {(v, config_key(v, c), cc) for v, c, cc in jobs()}
        assert need <= have, f"table misses {sorted(need - have)[:5]}"
        _check_rows([r for r in doc["rows"]])
        # reproducibility: recompile a sample and compare with the recorded rows
        sample = _compile(["--sample", "--cc", "120", "121"])
        recorded = {(r["kernel"], r["config"], r["cc"]): r for r in doc["rows"]}
        for r in sample["rows"]:
            rec = recorded[(r["kernel"], r["config"], r["cc"])]
            for key in ("shared_bytes", "key_instruction", "n_regs", "n_spill_stores", "sass_sha256"):
                assert r[key] == rec[key], (key, r, rec)
        assert len([r for r in sample["rows"] if r["kernel"].startswith("w13")]) == 2 * len(SAMPLE)
    else:  # stale or missing table: the recorded facts no longer describe the kernels
        pytest.fail(f"{TABLE.relative_to(ROOT)} is stale (its source hash or Triton version differs from the "
                    "kernels'): re-record it with `sm120lab dev kernel-aot --cc 120 121 --jobs 2 --out "
                    "data/triton_aot/sm120.json` (~7 min on 2 cores)")


@pytest.mark.slow
@pytest.mark.skipif(triton.__version__ != PINNED_TRITON, reason=f"AOT table pinned to Triton {PINNED_TRITON}")
def test_every_kernel_and_config_compiles_fresh_for_sm120():
    """Every kernel x config compiled now (minutes on 2 cores; make test-full), not read from the table."""
    full = _compile(["--cc", "120", "121"])
    _check_rows(full["rows"])
    assert len(full["rows"]) >= len(jobs())


def test_sample_and_heuristic_configs_exist():
    from sm120lab.archflags.kernel_aot import frag_config_applies
    from sm120lab.kernels.moe_configs import (
        CONFIGS,
        DECODE_CONFIGS,
        FRAG_CONFIGS,
        pick_configs,
        pick_decode_configs,
        pick_frag_configs,
    )

    assert all(c in CONFIGS or c in DECODE_CONFIGS or c in FRAG_CONFIGS for _, c in SAMPLE)
    for slots in (1, 16, 17, 160, 161, 2560, 2561, 40960):
        a, b = pick_frag_configs(slots)
        assert a.name in FRAG_CONFIGS and b.name in FRAG_CONFIGS and a.SORTED == b.SORTED and a.block_m == b.block_m
        assert frag_config_applies("w13_frag", a) and (b.SORTED or frag_config_applies("w2sum_frag", b))
    for slots in (1, 10, 160, 161, 640):
        a, b = pick_decode_configs(slots)
        assert a.name in DECODE_CONFIGS and b.name in DECODE_CONFIGS and a.SORTED == b.SORTED
    for rows in (0.5, 1, 10, 17, 40, 80, 1000):
        a, b = pick_configs(rows)
        assert a.name in CONFIGS and b.name in CONFIGS and a.BLOCK_M == b.BLOCK_M
    with pytest.raises(ValueError, match="rows_per_expert"):
        pick_configs(0)


TABLE_36 = ROOT / "data" / "triton_aot" / "sm120_triton3.6.0.json"


def test_triton_36_table_records_the_minimum_versions():
    """The table built with Triton 3.6.0 on the benchmark machine: sm_120 gets the native NVFP4 mma
    from 3.6.0 already; sm_121's native path fails there (so its minimum is the pinned 3.9.0); every
    other variant compiles for both targets and fits SM120's shared memory."""
    from sm120lab.archflags.kernel_aot import NVFP4_MMA_RE

    doc = json.loads(TABLE_36.read_text())
    assert doc["triton"] == "3.6.0"
    rows = [r for r in doc["rows"] if r["kernel"].startswith(("w13", "w2"))]
    native120 = [r for r in rows if r["kernel"].endswith("native") and r["cc"] == 120]
    native121 = [r for r in rows if r["kernel"].endswith("native") and r["cc"] == 121]
    assert native120 and all("error" not in r and NVFP4_MMA_RE.fullmatch(r["key_instruction"]) for r in native120)
    assert native121 and all("error" in r for r in native121)
    others = [r for r in rows if not r["kernel"].endswith("native")]
    assert {r["cc"] for r in others} == {120, 121} and all("error" not in r for r in others)
    assert all(r["fits_sm120"] for r in rows if "error" not in r)
    assert all(r["n_spill_stores"] == 0 for r in others if r["kernel"].endswith("decode"))


def test_sass_digest_ignores_names_and_catches_any_changed_instruction():
    from sm120lab.archflags.kernel_aot import sass_changes, sass_digest

    sass = "\tcode for sm_90\n\t\tFunction : kernel_a\n        /*0000*/  MOV R1, c[0x0][0x28] ;\n        /*0010*/  EXIT ;\n"
    renamed = sass.replace("kernel_a", "kernel_b")
    edited = sass.replace("EXIT", "BRA 0x0")
    assert sass_digest(sass) == sass_digest(renamed) != sass_digest(edited)
    assert sass_digest("") is None
    old = [{"kernel": "w2_frag", "config": "f2w4", "cc": 90, "sass_sha256": sass_digest(sass)}]
    assert sass_changes(old, [{**old[0], "sass_sha256": sass_digest(renamed)}]) == []
    changed = sass_changes(old, [{**old[0], "sass_sha256": sass_digest(edited)}])
    assert len(changed) == 1 and changed[0].startswith("w2_frag f2w4 sm_90")
    assert len(sass_changes(old, [{**old[0], "config": "f4w4"}])) == 1  # a row the old table lacks


def test_quantizer_row_fails_on_an_approximate_division_or_an_fma():
    """The activation quantizer is bit-exact with quantize_nvfp4 only without approximate fp32 division and
    without fp32 fma (Triton 3.6 emitted both on the H200: data/bench/aux/quantizer_ptx_triton3.6_sm90_before_fix.ptx);
    the table's quantizer rows record neither, and a row that had one would fail."""
    from sm120lab.archflags.kernel_aot import DIV_APPROX_RE, FMA_F32_RE, division_facts

    before = (ROOT / "data" / "bench" / "aux" / "quantizer_ptx_triton3.6_sm90_before_fix.ptx").read_text()
    assert division_facts(before) == {"n_div_approx_f32": 2, "n_fma_f32": 1}
    assert not DIV_APPROX_RE.search("div.rn.f32 %r1, %r2, %r3;") and not FMA_F32_RE.search("fma.rn.f16x2 %r1;")
    rows = [r for r in json.loads(TABLE.read_text())["rows"] if r["kernel"] == "nvfp4_quantize_rows"]
    assert {r["cc"] for r in rows} == {120, 121}
    assert all(r["n_div_approx_f32"] == 0 and r["n_fma_f32"] == 0 and not row_problems(r) for r in rows)
    for key in ("n_div_approx_f32", "n_fma_f32"):
        assert any("quantizer not bit-exact" in p for p in row_problems({**rows[0], key: 1}))
