"""The roofline's input tables: every number has a source; bench JSON files are read per contract."""

import json
import math

import numpy as np
import pytest

from sm120lab.paths import data_dir
from sm120lab.roofline import PRESETS, apply_bench_ceilings, get_gpu, load_gpus, load_hardware_table
from sm120lab.roofline.measured import bench_files, moe_layer_table
from sm120lab.roofline.published import load_published

VALUE_SOURCE = [("compute_capability", "compute_capability_source"), ("mem_bw_GBps", "mem_bw_source"),
                ("mem_GB", "mem_source"), ("bf16_dense_TFLOPs", "bf16_source"),
                ("fp8_dense_TFLOPs", "fp8_source"), ("fp4_dense_TFLOPs", "fp4_source"),
                ("smem_per_block_bytes", "smem_source"), ("pcie_GBps_per_dir", "pcie_source"),
                ("nvlink_GBps_per_dir", "nvlink_source")]


def test_hardware_rows_and_sources():
    df = load_hardware_table()
    assert set(df["gpu"]) == {"rtx-pro-6000", "rtx-5090", "dgx-spark", "h200", "b200"}
    for _, row in df.iterrows():
        for value, source in VALUE_SOURCE:
            # every cell, filled or empty, says where it came from or why it is missing
            assert isinstance(row[source], str) and len(row[source]) > 10, (row["gpu"], source)
            if isinstance(row[value], float) and not math.isnan(row[value]) and row[source].startswith("UNSOURCED"):
                assert "derived" in row[source]
        assert isinstance(row["measured_source"], str)
    # datasheet and measured values live apart: the CSV types in no measurement, the recorded
    # bench run is the only source of one (one copy-bandwidth number everywhere)
    assert df["measured_copy_GBps"].isna().all() and df["measured_bf16_TFLOPs"].isna().all()
    for text in map(str, df.to_numpy().ravel()):
        assert not any(bad in text for bad in ("landscape.md", "../shared", "/work/", "/tmp/", "KINDS.md")), text
    newest = bench_files()[-1]
    ceilings = json.loads(newest.read_text())["ceilings"]
    h200 = get_gpu("h200")
    assert h200.measured_copy_GBps == ceilings["copy_GBps"] and h200.measured_bf16_TFLOPs == ceilings["bf16_TFLOPs"]
    assert h200.measured_source == f"data/bench/{newest.name} ceilings"
    assert h200.measured_copy_GBps < h200.mem_bw_GBps            # copy never beats the datasheet
    assert h200.measured_bf16_TFLOPs < h200.bf16_TFLOPs
    assert load_gpus(measurements=False)["h200"].measured_copy_GBps is None
    assert all(g.measured_copy_GBps is None for name, g in load_gpus().items() if name != "h200")
    sm12x = df[df["compute_capability"].str.startswith("12")]
    assert set(sm12x["smem_per_block_bytes"]) == {101376}


def test_rate_fallback_and_link_choice():
    gpus = load_gpus()
    assert gpus["h200"].rate_TFLOPs("fp4") == gpus["h200"].fp8_TFLOPs   # no FP4 on Hopper
    assert gpus["h200"].link_GBps("auto") == gpus["h200"].nvlink_GBps_per_dir
    assert gpus["rtx-pro-6000"].link_GBps("auto") == gpus["rtx-pro-6000"].pcie_GBps_per_dir
    with pytest.raises(ValueError, match="unknown gpu"):
        get_gpu("a100")


def test_published_rows():
    df = load_published()
    assert df["source_url"].str.startswith("https://").all()
    seed = df[df["source_url"].str.contains("flashinfer/issues/2723")]
    assert {"Marlin", "FlashInfer CUTLASS 120f", "FlashInfer CUTLASS 120a", "FlashInfer CUTLASS Hybrid",
            "vLLM native CUTLASS", "CUTLASS 4.4.1 rebuild", "FlashInfer TRT-LLM"} <= set(seed["backend"])
    ok = df["tok_s"].notna()
    assert (df.loc[ok, "tok_s_low"] <= df.loc[ok, "tok_s_high"]).all()
    # a run that produced garbage or crashed has no speed worth quoting, and vice versa
    assert (df.loc[~ok, "correct_output"] == "no").all()
    agg = df["tok_s_basis"] == "aggregate"
    np.testing.assert_allclose(df.loc[agg, "per_user_tok_s"] * df.loc[agg, "concurrency"], df.loc[agg, "tok_s"])
    assert set(df["gpu"]) <= set(load_gpus())


def _fake_bench(path, rows, ceilings=None):
    data = {"env": {"gpu": {"name": "NVIDIA H200"}}, "command": "pytest", "model": "qwen3.5-397b-a17b",
            "shape": {"E": 512, "k": 10, "H": 4096, "I": 1024}, "rows": rows,
            "active_experts": {"1": 10.0, "4": 38.5}}
    if ceilings:
        data["ceilings"] = ceilings
    path.write_text(json.dumps(data))
    return path


def test_bench_json_to_moe_layer_only_tok_s(tmp_path, seed):
    rng = np.random.default_rng(seed)
    us = rng.uniform(20, 400, size=3)
    rows = [{"T": T, "contender": "triton-w4a16", "op": "moe", "us_median": float(u), "us_p10": float(u) * 0.9,
             "us_p90": float(u) * 1.1, "n_reps": 50, "weight_bytes": 1, "GBps": 1.0, "TFLOPs": 1.0,
             "pct_copy_bw": 1.0, "pct_bf16": 1.0, "timing": "cuda_graph"} for T, u in zip((1, 4, 16), us)]
    rows.append(dict(rows[0], op="w13"))    # per-GEMM rows are not whole layers: ignored
    f = _fake_bench(tmp_path / "moe_h200_2026-12-02.json", rows,
                    {"copy_GBps": float(rng.uniform(3000, 4500)), "bf16_TFLOPs": 700.0})
    table = moe_layer_table(bench_files(tmp_path), {m: c.n_layers for m, c in PRESETS.items()})
    assert len(table) == 3 and set(table["timing"]) == {"graph"}
    for (_, r), u, T in zip(table.iterrows(), us, (1, 4, 16)):
        assert r["moe_only_per_user_tok_s"] == pytest.approx(1 / (60 * u * 1e-6))
        assert r["moe_only_aggregate_tok_s"] == pytest.approx(T / (60 * u * 1e-6))
        assert r["moe_us_per_token"] == pytest.approx(60 * u / T)
    from sm120lab.roofline.measured import measured_active_experts

    act = {r["T"]: r["active_experts"] for r in measured_active_experts([f])}
    assert act == {1: 10.0, 4: 38.5}
    gpus, used = apply_bench_ceilings(load_gpus(), [f])
    assert used == str(f)
    assert gpus["h200"].measured_copy_GBps == json.loads(f.read_text())["ceilings"]["copy_GBps"]
    assert gpus["h200"].mem_bw_GBps == load_gpus()["h200"].mem_bw_GBps   # datasheet untouched


def test_bench_file_missing_keys_is_a_clear_error(tmp_path):
    bad = tmp_path / "moe_x_2026-01-01.json"
    bad.write_text(json.dumps({"model": "qwen3.5-397b-a17b", "rows": []}))
    with pytest.raises(ValueError, match="shape"):
        moe_layer_table([bad], {"qwen3.5-397b-a17b": 60})


def test_roofline_presets_take_the_moe_block_from_the_moe_lab():
    from sm120lab.moe.problem import PRESETS as MOE

    for name, cfg in PRESETS.items():
        assert cfg.moe_shape == {"E": MOE[name].E, "k": MOE[name].k, "H": MOE[name].H, "I": MOE[name].I}


def test_data_dir_points_at_the_repository_data():
    assert (data_dir() / "hardware.csv").exists()
    assert list((data_dir() / "published").glob("*.csv"))


def test_cli_prints_the_library_ceiling(capsys, seed):
    from sm120lab.cli import main
    from sm120lab.recommend.facts import guide_basis
    from sm120lab.roofline import ceiling, get_model, precision_plan

    B = int(np.random.default_rng(seed).integers(1, 33))
    assert main(["roofline", "--gpu", "rtx-pro-6000", "--tp", "2", "--pp", "2", "--batch", str(B)]) == 0
    out = capsys.readouterr().out
    basis = guide_basis()  # the default: the guide's basis, named above the numbers
    ce = basis.ceiling(get_model("qwen3.5-397b-a17b"), get_gpu("rtx-pro-6000"), tp=2, pp=2, batch=B, context=2048)
    assert f"{ce.per_user_tok_s:.1f}" in out and f"{ce.aggregate_tok_s:.1f}" in out
    assert "1792 GB/s, datasheet;" in out and f"{ce.memory_per_gpu_GB:.2f}" in out
    assert f"basis: {basis.label} (13.9 us per all-reduce and pipeline hop)" in out
    assert main(["roofline", "--gpu", "rtx-pro-6000", "--tp", "2", "--pp", "2", "--batch", str(B),
                 "--plan", "linear-quantized"]) == 0
    out = capsys.readouterr().out
    ce = ceiling(get_model("qwen3.5-397b-a17b"), get_gpu("rtx-pro-6000"), precision_plan("linear-quantized", "nvfp4"),
                 tp=2, pp=2, batch=B, context=2048)
    assert f"{ce.per_user_tok_s:.1f}" in out and "basis: 'linear-quantized' plan, bandwidth only" in out
    with pytest.raises(SystemExit, match=r"^--plan: expected checkpoint, "):
        main(["roofline", "--plan", "all"])
    with pytest.raises(SystemExit, match=r"^--format: applies to a named --plan only"):
        main(["roofline", "--format", "mxfp4"])
    with pytest.raises(SystemExit, match=r"^--gpu: unknown gpu 'a100'"):
        main(["roofline", "--gpu", "a100"])
    with pytest.raises(SystemExit, match=r"^--batch: expected positive ints"):
        main(["roofline", "--batch", "0"])


def test_cli_says_when_measured_bandwidth_is_the_datasheet_and_when_nothing_fits(capsys):
    """Issue 12: 'fits True' for ~10 TB per GPU on a 96 GB card; datasheet bandwidth labelled 'measured'."""
    from sm120lab.cli import main

    assert main(["roofline", "--gpu", "rtx-pro-6000", "--tp", "2", "--pp", "2", "--batch", "1", "256",
                 "--context", "1000000", "--bandwidth", "measured"]) == 0
    out = capsys.readouterr().out
    assert "1792 GB/s, datasheet (no measurement)" in out
    lines = [line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("1", "256")]
    assert [row[-1] for row in lines] == ["yes", "NO"]
    assert float(lines[1][-2]) > 96 and "exceed 96 GB per GPU" in out


def test_live_sweep_calls_the_bench_with_arguments_it_takes(tmp_path, monkeypatch):
    """Notebook 04's GPU sweep: a renamed or removed bench argument must fail here, not on the GPU box."""
    import inspect

    import torch

    from sm120lab.bench import moe
    from sm120lab.roofline.lesson import live_sweep

    real = inspect.signature(moe.run_moe_bench)
    seen = {}

    def fake(out_path, **kwargs):
        real.bind(out_path, **kwargs)           # TypeError for an argument the real function does not take
        seen.update(kwargs)
        return {"rows": []}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(moe, "run_moe_bench", fake)
    doc, why = live_sweep(tmp_path / "sweep.json", model="qwen3.5-397b-a17b")
    assert why == "" and doc == {"rows": []}
    assert seen["tune"] is False and set(seen["contenders"]) <= set(moe.CONTENDERS + moe.OPTIONAL_CONTENDERS)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert live_sweep(tmp_path / "sweep.json", model="qwen3.5-397b-a17b") == (None, "no CUDA GPU on this machine")


def test_notes_quote_the_prediction_the_data_gives():
    """notes/roofline.md's prediction numbers are recomputed from the bench file it names, against the
    decision guide's ceiling (checkpoint formats + all-reduce latency), as notebook 04 computes them."""
    import re

    from sm120lab import recommend
    from sm120lab.roofline import get_model
    from sm120lab.roofline.lesson import kernel_efficiency, predict_with_kernel

    text = (data_dir().parent / "notes" / "roofline.md").read_text()
    m = re.search(r"With `(data/bench/moe_h200_[\w.-]+\.json)`: (\S+) at T=1\s+takes ([\d.]+) us, ([\d.]+)% of its "
                  r"([\d.]+) us floor, giving (\d+) tok/s per user = (\d+)% of the guide's (\d+) tok/s ceiling", text)
    assert m, "notes/roofline.md: prediction sentence not found"
    path, contender, us, pct, floor, tok, share, ceil = m.groups()
    gpus = load_gpus()
    eff = kernel_efficiency(data_dir().parent / path, tokens=1, gpu=gpus["h200"])
    assert eff["contender"] == contender and f"{eff['us_median']:.1f}" == us and f"{eff['floor_us']:.1f}" == floor
    assert f"{100 * eff['eta']:.1f}" == pct
    guide = recommend.answer("rtx-pro-6000")
    s = guide.setup
    p = predict_with_kernel(get_model(s.model), gpus["rtx-pro-6000"], guide.ceiling.precision, eff["eta"], tp=s.tp,
                            pp=s.pp, batch=1, context=s.context, collective_latency_us=guide.ceiling.latency_us)
    assert (f"{p['predicted_tok_s']:.0f}", f"{p['pct_of_ceiling']:.0f}", f"{p['ceiling_tok_s']:.0f}") == (tok, share, ceil)
