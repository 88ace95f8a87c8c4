"""The MoE kernel plan (sm120lab.kernels.plan) on CPU: dispatch by rows per active expert from the real E,
tile tables read by nearest key, the formula fallback, the derived SM120/SM121 tables, and the bench's
--shape parsing. No kernel runs here (the plans' kernels run in tests/gpu and, interpreted, in
tests/test_triton_moe.py)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path as FsPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sm120lab.kernels import plan as P
from sm120lab.kernels.moe_configs import CONFIGS, DECODE_CONFIGS, FRAG_CONFIGS
from sm120lab.moe.problem import PRESETS
from sm120lab.paths import repo_root

ROOT = FsPath(__file__).resolve().parents[1]
SM90 = P.Target(name="h200", capability=(9, 0), triton=(3, 6))
SM120 = P.Target.named("sm120", triton=(3, 9))
CPU = P.Target(name="cpu", capability=None, triton=(3, 9), interpret=True)
MODEL_PRESETS = [n for n in PRESETS if n not in ("tiny", "small")]


def _shape(name):
    c = PRESETS[name]
    return P.MoEShape.of(c.E, c.H, c.I, c.k)


@given(e=st.integers(1, 1024), k=st.integers(1, 16), t=st.integers(1, 10_000))
def test_rows_per_expert_counts_from_the_real_E(e, k, t):
    k = min(k, e)
    s = P.MoEShape(E=e, N=64, K=64, top_k=k)
    a = s.active_experts(t)
    assert a <= min(e, t * k) + 1e-6 and a >= k - 1e-6  # at least one token's k experts, at most all
    assert s.rows_per_expert(t) == pytest.approx(t * k / a)
    assert s.rows_per_expert(t) >= 1 - 1e-9
    assert s.rows_per_expert(t + 1) >= s.rows_per_expert(t) - 1e-9  # more tokens never fewer rows per expert


def test_same_slot_count_different_E_gives_different_rows():
    """48 slots (T=6, k=8): 1.04 rows per active expert at E=512 (one slot per program), 1.36 at E=64 (8-slot
    groups); a slot-count threshold (tuned as if E were 512) treats both alike."""
    big, small = P.MoEShape(E=512, N=1024, K=4096, top_k=8), P.MoEShape(E=64, N=1024, K=4096, top_k=8)
    assert big.rows_per_expert(6) == pytest.approx(48 / (512 * (1 - (504 / 512) ** 6)))
    assert big.rows_per_expert(6) < P.FRAG_UNSORTED_MAX_ROWS < small.rows_per_expert(6)
    pb = P.plan_moe(big, 6, target=SM90, table=False)
    ps = P.plan_moe(small, 6, target=SM90, table=False)
    assert pb.sort_block == 0 and ps.sort_block == 8
    assert not pb.w13.SORTED and ps.w13.SORTED and pb.w2_sums and not ps.w2_sums


@pytest.mark.parametrize("name", MODEL_PRESETS)
@pytest.mark.parametrize("target", [SM90, SM120, CPU], ids=lambda t: t.name)
def test_formula_plan_is_valid_at_every_bucket(name, target):
    s = _shape(name)
    for t in P.T_BUCKETS:
        p = P.plan_moe(s, t, target=target, table=False)
        r = s.rows_per_expert(t)
        assert p.source == "formula"
        if target.frag:
            assert (p.path is P.Path.FRAG) == (r <= P.FRAG_MAX_ROWS)
            if p.path is P.Path.FRAG:
                assert (p.sort_block == 0) == (r <= P.FRAG_UNSORTED_MAX_ROWS)
                assert p.w13.TILES % 2 == 0 and (p.sort_block == 0 or p.sort_block == p.w13.block_m == p.w2.block_m)
                assert p.w2_sums == (p.sort_block == 0)
        else:
            assert p.path in (P.Path.DECODE, P.Path.MMA) and (p.path is P.Path.DECODE) == (r <= P.DECODE_MAX_ROWS)
            assert not getattr(p.w13, "FAST", False)  # no inline PTX under the interpreter
        if p.path is P.Path.MMA:
            assert p.sort_block == p.w13.BLOCK_M == p.w2.BLOCK_M
        d = p.as_dict()
        assert d["path"] == p.path.value and d["w13"] == p.w13.name and d["T"] == t and d["shape"]["E"] == s.E
        json.dumps(d)


def test_w4a4_plans_the_mma_kernel_and_native_where_supported():
    s = _shape("qwen3-235b-a22b")
    p = P.plan_moe(s, 1, target=SM120, mode="w4a4", table=False)
    assert p.path is P.Path.MMA and p.native and not p.w13.FAST
    p90 = P.plan_moe(s, 1, target=SM90, mode="w4a4", table=False)
    assert not p90.native
    assert P.Target.named("sm121", triton=(3, 6)).native_fp4 is False
    assert P.Target.named("sm121", triton=(3, 9)).native_fp4 is True


def test_overrides_are_validated_with_one_line_errors():
    s = _shape("qwen3.5-397b-a17b")
    with pytest.raises(ValueError, match="even TILES"):
        P.plan_moe(s, 1, target=SM90, tiles=(FRAG_CONFIGS["f1w8"], FRAG_CONFIGS["f1w8"]))
    with pytest.raises(ValueError, match="agree on SORTED"):
        P.plan_moe(s, 1, target=SM90, tiles=(FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f2w2o"]))
    with pytest.raises(ValueError, match="sm_90"):
        P.plan_moe(s, 1, target=CPU, tiles=(FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f1w8"]))
    with pytest.raises(ValueError, match="share BLOCK_M"):
        P.plan_moe(s, 1, target=SM90, tiles=(CONFIGS["m16n64k128w4s4"], CONFIGS["m128n64k64w8s3"]))
    with pytest.raises(ValueError, match="not a decode tile"):
        P.plan_moe(s, 1, target=SM90, tiles=(DECODE_CONFIGS["d8x64w2s1"], FRAG_CONFIGS["f1w8"]))
    with pytest.raises(ValueError, match="multiples of 64"):
        P.plan_moe(P.MoEShape(E=8, N=96, K=128, top_k=2), 1, target=SM90,
                   tiles=(FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f1w8"]))
    with pytest.raises(ValueError, match="top_k"):
        P.MoEShape(E=4, N=64, K=64, top_k=5)
    p = P.plan_moe(s, 3, target=SM90, tiles=(FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f1w8"]))
    assert p.source == "override" and p.w2_sums


def test_share_b_tiles_are_two_tile_options_the_w2_sum_kernel_does_not_take():
    """SHARE_B (one activation load per lane for both weight tiles) is a tile of its own (``...b``): the formula's
    wide sorted tile; an unsorted w2 runs the w2+sum kernel, which has no such option, so the plan refuses it there
    and the tuner does not offer it."""
    s = P.MoEShape(E=512, N=1024, K=4096, top_k=10)
    assert FRAG_CONFIGS["f2w2oc2b"].SHARE_B and FRAG_CONFIGS["f2w2oc2b"].TILES == 2
    assert FRAG_CONFIGS["f2w2oc2b"].name == "f2w2oc2b" and not FRAG_CONFIGS["f2w2oc2"].SHARE_B
    w13, w2 = P.frag_tiles(P.FRAG_WIDE_MIN_ROWS, 10**6)
    assert w13.name == w2.name == "f2w2oc2b"
    w13, w2 = P.frag_tiles(P.FRAG_WIDE_MIN_ROWS + 0.5, 10**6)  # 32-slot groups above: four tiles share a fragment
    assert w13.name == w2.name == "f2w2oc4b" and w13.SHARE_B and w13.block_m == 32
    with pytest.raises(ValueError, match="SHARE_B is not an option of the unsorted w2"):
        P.plan_moe(s, 1, target=SM90, tiles=(FRAG_CONFIGS["f2w4b"], FRAG_CONFIGS["f2w4b"]))
    assert P.plan_moe(s, 1, target=SM90, tiles=(FRAG_CONFIGS["f2w4b"], FRAG_CONFIGS["f1w8"])).w13.SHARE_B
    for _path, _, w2s in P.tune_candidates(s, 1, SM90):
        assert not any(c.SHARE_B and not c.SORTED for c in w2s)
    assert any("f2w2oc2b" in {c.name for c in g[1]} for g in P.tune_candidates(s, 1024, SM90))


def test_shape_without_fragment_layout_falls_back():
    s = P.MoEShape(E=8, N=96, K=128, top_k=2)  # N % 64 != 0: no fragment layout
    assert P.plan_moe(s, 1, target=SM90, table=False).path is P.Path.DECODE


def _table(tmp_path, entries, device="h200"):
    tab = P.TileTable(device=device, source="test")
    for shape, t, path, a, b in entries:
        tab.put(shape, t, path, P.config_by_name(path, a), P.config_by_name(path, b), us=1.0)
    tab.save(tmp_path / f"{device}.json")
    return P.TileTable.load(tmp_path / f"{device}.json")


def test_table_exact_shape_nearest_T_and_round_trip(tmp_path):
    s = _shape("qwen3.5-397b-a17b")
    tab = _table(tmp_path, [(s, 1, P.Path.FRAG, "f2w4", "f1w4"), (s, 64, P.Path.FRAG, "f2w4o", "f4w4o"),
                            (s, 4096, P.Path.MMA, "m128n64k64w8s2", "m128n64k64w8s2")])
    assert len(tab.entries) == 3 and tab.verified
    p = P.plan_moe(s, 2, target=SM90, table=tab)
    assert (p.w13.name, p.w2.name) == ("f2w4", "f1w4") and "exact shape, T=1" in p.source
    p = P.plan_moe(s, 100, target=SM90, table=tab)  # log-nearest bucket of 100 is 64
    assert (p.w13.name, p.w2.name, p.sort_block) == ("f2w4o", "f4w4o", 8)
    p = P.plan_moe(s, 3000, target=SM90, table=tab)
    assert p.path is P.Path.MMA and p.w13.name == "m128n64k64w8s2"
    # a fragment entry never reaches a target without the fragment kernels: the formula answers
    assert P.plan_moe(s, 1, target=CPU, table=tab).source == "formula"
    # put replaces the entry of the same key
    tab.put(s, 1, P.Path.FRAG, FRAG_CONFIGS["f2w2"], FRAG_CONFIGS["f2w2"])
    assert len(tab.entries) == 3 and P.plan_moe(s, 1, target=SM90, table=tab).w13.name == "f2w2"


def test_table_nearest_shape_matches_rows_per_expert_and_far_shapes_use_the_formula(tmp_path):
    tuned = P.MoEShape(E=128, N=1536, K=4096, top_k=8)
    tab = _table(tmp_path, [(tuned, t, P.Path.FRAG, "f2w4", "f1w8") for t in (1, 4)]
                 + [(tuned, 16, P.Path.FRAG, "f4w4o", "f4w4o"), (tuned, 64, P.Path.FRAG, "f2w4o", "f2w4o")])
    near = P.MoEShape(E=128, N=1024, K=4096, top_k=8)  # distance log2(1.5) = 0.58
    p = P.plan_moe(near, 16, target=SM90, table=tab)
    assert "nearest shape" in p.source and p.w13.name == "f4w4o"
    far = P.MoEShape(E=256, N=2048, K=7168, top_k=8)  # distance 1 + 0.42 + 0.81 = 2.2
    assert far.distance(tuned) > P.NEAREST_SHAPE_MAX_DIST
    assert P.plan_moe(far, 16, target=SM90, table=tab).source == "formula"


def test_table_files_are_one_line_errors(tmp_path):
    bad = tmp_path / "h200.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        P.TileTable.load(bad)
    bad.write_text(json.dumps({"schema": 99, "entries": []}))
    with pytest.raises(ValueError, match="schema 1"):
        P.TileTable.load(bad)


def test_table_path_prefers_the_device_then_the_arch(tmp_path):
    (tmp_path / "sm120.json").write_text("{}")
    t = P.Target(name="rtx-pro-6000-blackwell", capability=(12, 0), triton=(3, 9))
    assert P.table_path(t, tmp_path).name == "sm120.json"
    (tmp_path / "rtx-pro-6000-blackwell.json").write_text("{}")
    assert P.table_path(t, tmp_path).name == "rtx-pro-6000-blackwell.json"
    assert P.table_path(CPU, tmp_path) is None
    assert P.device_slug("NVIDIA H200") == "h200"


@pytest.mark.parametrize("arch", ["sm120", "sm121"])
def test_recorded_sm12x_tables_are_derived_from_the_aot_table(arch):
    """data/tiles/sm12x.json equals what derive_aot_table makes from the recorded AOT table now, is labelled
    unverified, and every tile in it compiled for that arch within SM120's shared memory without spills."""
    aot = json.loads((ROOT / "data" / "triton_aot" / "sm120.json").read_text())
    rec = json.loads((ROOT / "data" / "tiles" / f"{arch}.json").read_text())
    shapes = {n: _shape(n) for n in MODEL_PRESETS}
    derived = P.derive_aot_table(aot, arch, shapes).to_json()
    assert rec == derived
    assert rec["verified"] is False and "never run" in rec["source"]
    assert len(rec["entries"]) == len(MODEL_PRESETS) * len(P.T_BUCKETS)
    rows = {(r["config"], r["target"]): r for r in aot["rows"]}
    for e in rec["entries"]:
        for name in (e["w13"], e["w2"]):
            r = rows[(name, f"sm_{arch[2:]}")]
            assert r["fits_sm120"] and r["n_spill_stores"] == 0


def test_recorded_h200_table_is_valid_where_present():
    p = ROOT / "data" / "tiles" / "h200.json"
    if not p.exists():
        pytest.skip("no H200 tile table recorded")
    tab = P.TileTable.load(p)
    assert tab.verified
    for e in tab.entries:
        path = P.Path(e["path"])
        s = P.MoEShape(E=e["E"], N=e["N"], K=e["K"], top_k=e["top_k"])
        plan = P.plan_moe(s, e["T"], target=SM90, table=tab)
        assert (plan.path, plan.w13.name.rstrip("f"), plan.w2.name.rstrip("f")) == (
            path, e["w13"].rstrip("f"), e["w2"].rstrip("f"))
        assert e["us"] > 0 and math.isfinite(e["us"])


def test_tune_candidates_cover_the_formula_choice():
    for name in MODEL_PRESETS:
        s = _shape(name)
        for t in P.T_BUCKETS:
            groups = P.tune_candidates(s, t, SM90)
            path, w13, w2 = P.formula_choice(s, t, SM90)
            assert any(g[0] is path and w13 in g[1] and (w2 in g[2] or (not g[2] and w2 is w13)) for g in groups), \
                (name, t, path, w13.name, w2.name)


@pytest.mark.parametrize("text,msg", [("1,2,3", "four positive integers"), ("a,b,c,d", "four positive integers"),
                                      ("4096,1024,8,10", "top-k must be <="), ("4000,1024,64,4", "multiples of 64"),
                                      ("4096,0,64,4", "four positive integers")])
def test_shape_argument_errors_are_one_line(text, msg):
    from sm120lab.bench.moe import parse_shape

    with pytest.raises(ValueError, match=msg) as ei:
        parse_shape(text)
    assert "\n" not in str(ei.value)


def test_shape_argument_builds_the_config():
    from sm120lab.bench.moe import parse_shape, resolve_shape

    c = parse_shape("7168,2048,256,8")
    assert (c.H, c.I, c.E, c.k) == (7168, 2048, 256, 8) and c.name == "shape-H7168-I2048-E256-k8"
    assert resolve_shape(None, None).name == "qwen3.5-397b-a17b"
    with pytest.raises(ValueError, match="not both"):
        resolve_shape("gpt-oss-120b", "7168,2048,256,8")
    with pytest.raises(ValueError, match="--model must be one of"):
        resolve_shape("nope", None)


def test_cli_bad_shape_is_one_line_exit_2():
    res = subprocess.run([sys.executable, "-m", "sm120lab", "bench", "moe", "--shape", "1,2"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "--shape must be four positive integers" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_custom_op_fake_impl_and_unknown_weights():
    """sm120lab::moe_nvfp4 traces with fake tensors (bf16 [T, H] out) and names an unregistered layer in one line.
    The real kernels, torch.compile(fullgraph=True) and CUDA-graph capture run in tests/gpu."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from sm120lab.kernels import moe_op  # noqa: F401  (registers the op)

    with FakeTensorMode():
        h = torch.empty(5, 256, dtype=torch.bfloat16)
        out = torch.ops.sm120lab.moe_nvfp4(h, torch.empty(5, 4, dtype=torch.int64), torch.empty(5, 4), "layer0")
    assert out.shape == (5, 256) and out.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="no MoE weights registered as 'nope'"):
        torch.ops.sm120lab.moe_nvfp4(torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(1, 1, dtype=torch.int64),
                                     torch.ones(1, 1), "nope")
    with pytest.raises(ValueError, match="name must be"):
        moe_op.register_moe_weights("", None)


def test_formula_bounds_are_the_recorded_graph_timings():
    """FRAG_WIDE_MIN_ROWS and FRAG_MAX_ROWS restate the lent H100's graph-timed probe of 2026-12-07
    (data/bench/aux/wide_b_probe_h100_2026-12-07/, every preset and two untuned shapes, T = 256-4096): the
    32-slot f2w2oc4b beats the 16-slot f2w2oc2b exactly above FRAG_WIDE_MIN_ROWS rows per expert, with
    bit-identical outputs; above FRAG_MAX_ROWS the MMA tile the table picks beats it on every layer, and at or
    below it f2w2oc4b beats the table's MMA tile on all layers but one (qwen3-next, H = 2048, 80 rows)."""
    path = repo_root() / "data" / "bench" / "aux" / "wide_b_probe_h100_2026-12-07" / "wide_b_probe.jsonl"
    rows: dict = {}
    for line in path.read_text().splitlines()[1:]:
        d = json.loads(line)
        if d.get("kernel") == "layer":
            rows.setdefault((d["preset"], d["T"]), {})[d["plan"]] = d
    assert len(rows) == 18
    frag_wins, frag_losses = 0, 0
    for (name, t), r in rows.items():
        if name in PRESETS:
            e, k = PRESETS[name].E, PRESETS[name].k
        else:
            e, k = (int(v) for v in re.search(r"-E(\d+)-k(\d+)$", name).groups())
        per_expert = t * k / e
        wide, base, table = r["f2w2oc4b+f2w2oc4b"], r["f2w2oc2b+f2w2oc2b"], r["table"]
        assert wide["bit_equal_to_base"] is True
        assert (wide["us"] < base["us"]) == (per_expert > P.FRAG_WIDE_MIN_ROWS), (name, t)
        if table["path"] == "mma":
            if per_expert > P.FRAG_MAX_ROWS:
                assert table["us"] < wide["us"], (name, t)
            else:
                frag_wins += wide["us"] < table["us"]
                frag_losses += wide["us"] >= table["us"]
    assert (frag_wins, frag_losses) == (5, 1)
