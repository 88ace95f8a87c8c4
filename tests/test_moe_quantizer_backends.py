"""Quantizer byte diff verdicts, FlashInfer/vLLM argument packing (pure torch), and the CLI."""

import json

import pytest
import torch

from sm120lab.moe import make_moe_problem
from sm120lab.moe.backends._packing import per_expert, up_gate_order
from sm120lab.moe.backends.flashinfer_cutlass import pack_cutlass_fused_moe_nvfp4
from sm120lab.moe.quantizer_diff import compare_nvfp4_bytes, diff_quantizer, flashinfer_fp4_quantize_diffs
from sm120lab.nvfp4 import NVFP4Tensor, dequantize_nvfp4, quantize_nvfp4, unswizzle_scales_128x4


def _x(seed, m=48, k=256):
    return (torch.randn(m, k, generator=torch.Generator().manual_seed(seed)) * 3).to(torch.bfloat16)


def _gs(x):
    return torch.tensor([448 * 6 / float(x.float().abs().max())])


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_exact_quantizer_is_correct(layout, seed):
    x = _x(seed)

    def ours(a, g):
        q = quantize_nvfp4(a, g.reshape(()), scale_layout=layout)
        return q.data, q.scale

    res = diff_quantizer(ours, x, _gs(x), layout=layout, name="self")
    assert res.verdict == "correct" and res.byte_match == 1.0 and res.scale_match == 1.0 and not res.silent


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_unwritten_output_is_silent_garbage(layout, seed):
    """What FlashInfer 0.6.5 fp4_quantize does on SM90: returns, bytes wrong (here: zeros)."""
    x = _x(seed)
    ref = quantize_nvfp4(x, _gs(x).reshape(()), scale_layout=layout)
    res = diff_quantizer(lambda a, g: (torch.zeros_like(ref.data), torch.zeros_like(ref.scale)), x, _gs(x),
                         layout=layout, name="zeros")
    assert res.verdict == "garbage" and res.silent and "SILENT" in res.note
    if layout == "linear":  # (swizzled padding bytes are zero in both)
        assert res.scale_match < 0.05


def test_one_step_rounding_difference_is_degraded(seed):
    x = _x(seed, 128, 256)
    q = quantize_nvfp4(x, _gs(x).reshape(()))
    codes = q.codes().clone()
    # move one code with magnitude 1..6 one step (same sign): a rounding-mode difference
    candidates = torch.nonzero(((codes & 7) > 0) & ((codes & 7) < 7))
    row, idx = (int(v) for v in candidates[torch.randint(len(candidates), (1,), generator=torch.Generator().manual_seed(seed))[0]])
    codes[row, idx] += 1
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    res = compare_nvfp4_bytes(packed, q.scale, q.data, q.scale)
    assert res.verdict == "degraded" and res.code_one_step == 1.0 and res.code_match < 1.0
    codes[row, idx] = (codes[row, idx] & 8) | ((codes[row, idx] + 3) & 7)  # a jump, not a rounding step
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    assert compare_nvfp4_bytes(packed, q.scale, q.data, q.scale).verdict == "garbage"


def test_size_mismatch_is_garbage_and_flashinfer_skips_on_cpu(seed):
    x = _x(seed)
    q = quantize_nvfp4(x)
    assert compare_nvfp4_bytes(q.data[:-1], q.scale, q.data, q.scale).verdict == "garbage"
    (res,) = flashinfer_fp4_quantize_diffs(x)
    assert res.status == "skipped" and res.reason


def test_cutlass_fused_moe_packing_round_trips(seed):
    """The packed tensors decode back to our weights: w31 order, swizzled int32 scales, alphas."""
    p = make_moe_problem("tiny", tokens=8, seed=seed)
    kw = pack_cutlass_fused_moe_nvfp4(p)
    c = p.config
    fc1, fc2 = kw["fc1_expert_weights"], kw["fc2_expert_weights"]
    assert fc1.dtype == torch.int64 and fc1.shape == (c.E, 2 * c.I, c.H // 16)
    assert fc2.dtype == torch.int64 and fc2.shape == (c.E, c.H, c.I // 16)
    assert kw["token_selected_experts"].dtype == torch.int32
    a1, s13, alpha1, a2, s2, alpha2 = kw["quant_scales"]
    assert float(a1) == float(p.a1_gscale) and float(a2) == float(p.a2_gscale)
    torch.testing.assert_close(alpha1, 1.0 / (p.a1_gscale * per_expert(p.w13.global_scale, c.E)))
    torch.testing.assert_close(alpha2, 1.0 / (p.a2_gscale * per_expert(p.w2.global_scale, c.E)))
    assert s13.dtype == torch.int32
    lin13 = unswizzle_scales_128x4(s13.view(torch.float8_e4m3fn), 2 * c.I, c.H // 16)
    w31 = NVFP4Tensor(data=fc1.view(torch.uint8), scale=lin13, global_scale=p.w13.global_scale,
                      shape=p.w13.shape, scale_layout="linear")
    torch.testing.assert_close(up_gate_order(dequantize_nvfp4(w31, torch.float64)),
                               dequantize_nvfp4(p.w13, torch.float64), rtol=0, atol=0)
    lin2 = unswizzle_scales_128x4(s2.view(torch.float8_e4m3fn), c.H, c.I // 16)
    assert torch.equal(lin2.view(torch.uint8), p.w2.scale.view(torch.uint8))


def test_cli_check_exit_status_and_json(tmp_path, capsys, monkeypatch):
    from sm120lab.cli import main
    from sm120lab.moe import backends
    from sm120lab.moe.faults import register_faults

    backends.all_backends()  # discovered now, so the copy below holds every real backend
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))  # the faults leave with the test

    out = tmp_path / "check.json"
    rc = main(["check", "--preset", "tiny", "--tokens", "16", "--backend", "reference", "--backend", "torch-bf16",
               "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert {b["backend"]: b["verdict"] for b in data["backends"]} == {"reference": "correct", "torch-bf16": "correct"}
    assert "env" in data and data["command"].startswith("sm120lab check")
    assert main(["check", "--backend", "no-such-backend"]) == 2
    assert main(["check", "--routing", "gauss"]) == 2
    register_faults()
    assert main(["check", "--tokens", "8", "--backend", "fault-silent-zero", "--no-probes"]) == 1
    assert "GARBAGE: fault-silent-zero" in capsys.readouterr().err
