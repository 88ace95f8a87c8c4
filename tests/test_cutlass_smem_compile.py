"""One real compile: FlashInfer 0.6.5's own SM120 instantiation that overflows, built with the
stage-count patch, must compile (the patch's static_assert included) and report <= 101,376 B.

~1.5 min on 2 cores (one kernel instead of FlashInfer's 40). Needs nvcc (skips without) and
PyPI for the 0.6.5 wheel and the cuBLAS headers (cached under ~/.cache/sm120lab).
"""

from __future__ import annotations

import pytest

from sm120lab.cutlass_smem import analysis, store
from sm120lab.cutlass_smem.build import find_nvcc, measure


def _nvcc_or_skip():
    try:
        return find_nvcc()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _is_overflowing_block(before):
    over = [analysis.derive(r) for r in before["records"] if r["kernel_smem"] > analysis.SM120_SMEM_LIMIT]
    assert over, "the recorded 0.6.5 result should contain an overflowing config"
    d = over[0]

    def keep(block: str) -> bool:
        fields = [x.strip() for x in block.split("INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(")[1].split(")")[0].split(",")]
        # (Arch, T, W, Out, EpiSched, EpiTag, FUSION, M, N, K, cM, cN, cK, MXFPX, DYN, BIAS, SWAP)
        return (fields[6] == d["epilogue"] and tuple(map(int, fields[7:10])) == (d["tile_m"], d["tile_n"], d["tile_k"])
                and fields[16] == ("true" if d["swap_ab"] else "false")
                and analysis.dtype_label(fields[3]) == d["out_type"] and analysis.dtype_label(fields[1]) == d["act_type"])
    return d, keep


@pytest.mark.slow
@pytest.mark.network
def test_patched_overflowing_instantiation_compiles_and_fits(tmp_path):
    nvcc = _nvcc_or_skip()
    before = store.load("0.6.5")
    d, keep = _is_overflowing_block(before)
    res = measure("0.6.5", patched=True, jobs=1, nvcc=nvcc, keep=keep, work_dir=tmp_path / "w", progress=False)
    assert res["patches_applied"] == ["fi-sm120-moe-stage-count"]
    (rec,) = res["records"]
    assert (rec["tile_m"], rec["tile_n"], rec["tile_k"], rec["swap_ab"]) == (d["tile_m"], d["tile_n"], d["tile_k"], d["swap_ab"])
    assert rec["stages"] == d["stages"] - 1
    assert rec["kernel_smem"] <= analysis.SM120_SMEM_LIMIT < d["kernel_smem"]
