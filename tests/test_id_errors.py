"""Expert ids outside [0, E) in the kernels (issue 32): masked, counted on the device, read only on request.

Under Triton's CPU interpreter (tiny shapes, fixed seeds). The layer refuses such ids on the host when they
are CPU tensors (tests/test_hostile_round3.py); ``_host_id_check=False`` skips that check here, so the
kernels' own masking runs as it does on CUDA, where nothing is read on the host. Each path (decode in token
order and sorted, the MMA path on packed and canonical weights, W4A4) gets ids of -1, E and 2**40 at a few
slots: the output (poisoned first) must equal the same path run with those slots sent to expert 0 at
routing weight 0 (their contribution removed), bit for bit, and the counter must hold the number of bad
slots. The fragment kernels (inline PTX) do not run under the interpreter: tests/gpu/ covers them.
"""


import _triton_interp
import pytest
import torch

_FRESH = _triton_interp.enable()
from sm120lab.kernels import moe_layer as fm  # noqa: E402
from sm120lab.kernels.moe_sort import moe_sort  # noqa: E402

needs_interp = _triton_interp.needs_interp(_FRESH, fm.interpreting())
test_in_fresh_process = _triton_interp.rerun_in_fresh_process(_FRESH, __file__)


def _poison_ids(ids: torch.Tensor, e: int, seed: int) -> torch.Tensor:
    """ids with -1, E and 2**40 (E + 3 for narrower dtypes) at three distinct slots, one token left alone."""
    g = torch.Generator().manual_seed(seed)
    flat = ids.clone().reshape(-1)
    pos = torch.randperm(flat.numel() - ids.shape[1], generator=g)[:3] + ids.shape[1]
    big = 2**40 if ids.dtype == torch.int64 else e + 3
    flat[pos] = torch.tensor([-1, e, big], dtype=ids.dtype)
    return flat.reshape(ids.shape)


def _removed(ids, tw, e):
    """The same routing with every bad slot on expert 0 at weight 0: what the masked kernels must compute."""
    bad = (ids < 0) | (ids >= e)
    return torch.where(bad, 0, ids), torch.where(bad, 0.0, tw), int(bad.sum())


# ---- the sort ----------------------------------------------------------------------------------------------

@needs_interp
@pytest.mark.parametrize("single_max", [0, 1024], ids=["multi", "single"])
@pytest.mark.parametrize("t,k,e,block_m", [(20, 3, 7, 4), (50, 4, 16, 16), (40, 2, 5, 1)])
def test_sort_drops_counts_and_zeroes_out_of_range_slots(t, k, e, block_m, single_max, seed):
    import sm120lab.kernels.moe_sort as ms

    g = torch.Generator().manual_seed(seed)
    ids = _poison_ids(torch.randint(0, e, (t, k), generator=g), e, seed)
    flat = ids.reshape(-1)
    bad = (flat < 0) | (flat >= e)
    s = flat.numel()
    err = torch.tensor([5], dtype=torch.int32)  # the count is added to what the counter holds
    rows = torch.full((s, 5), float("nan"))
    old = ms.SINGLE_MAX_SLOTS
    ms.SINGLE_MAX_SLOTS = single_max
    try:
        sorted_ids, block_expert = moe_sort(ids, e, block_m, id_errors=err, zero_rows=rows)
    finally:
        ms.SINGLE_MAX_SLOTS = old
    assert int(err) == 5 + int(bad.sum())
    placed = sorted_ids[sorted_ids < s].long()
    assert sorted(placed.tolist()) == torch.nonzero(~bad).reshape(-1).tolist()  # every good slot once, no bad one
    rows_of = torch.nonzero(sorted_ids < s).reshape(-1)
    assert torch.equal(block_expert[rows_of // block_m].long(), flat[placed])
    assert bool((rows[bad] == 0).all()) and bool(rows[~bad].isnan().all())  # only the dropped rows are written


@needs_interp
def test_sort_with_valid_ids_counts_nothing_and_writes_no_row(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 9, (30, 4), generator=g)
    err = torch.zeros(1, dtype=torch.int32)
    rows = torch.full((120, 3), float("nan"))
    a = moe_sort(ids, 9, 16, id_errors=err, zero_rows=rows)
    b = moe_sort(ids, 9, 16)
    assert int(err) == 0 and bool(rows.isnan().all())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ---- the layer, every path the interpreter runs ------------------------------------------------------------

def _paths(p, packed):
    from sm120lab.kernels.moe_configs import DECODE_CONFIGS

    unsorted, sorted_ = DECODE_CONFIGS["d8x64w2s1"], DECODE_CONFIGS["d16x64w4s1o"]
    assert not unsorted.SORTED and sorted_.SORTED
    return {
        "decode-unsorted": lambda ids, tw, **kw: fm.fused_moe_packed(p.hidden, ids, tw, packed, decode=True, frag=False,
                                                                     decode_configs=(unsorted, unsorted), **kw),
        "decode-sorted": lambda ids, tw, **kw: fm.fused_moe_packed(p.hidden, ids, tw, packed, decode=True, frag=False,
                                                                   decode_configs=(sorted_, sorted_), **kw),
        "mma-packed": lambda ids, tw, **kw: fm.fused_moe_packed(p.hidden, ids, tw, packed, decode=False, **kw),
        "mma-canonical": lambda ids, tw, **kw: fm.fused_moe_nvfp4(p.hidden, ids, tw, p.w13, p.w2, **kw),
        "w4a4": lambda ids, tw, **kw: fm.fused_moe_nvfp4(p.hidden, ids, tw, p.w13, p.w2, mode="w4a4",
                                                         a1_gscale=p.a1_gscale, a2_gscale=p.a2_gscale, **kw),
    }


@pytest.fixture(scope="module")
def problem():
    from sm120lab.kernels.prepack import prepare_moe_weights
    from sm120lab.moe import make_moe_problem

    p = make_moe_problem("tiny", tokens=6, seed=20261205)
    return p, prepare_moe_weights(p.w13, p.w2)


@needs_interp
@pytest.mark.parametrize("path", ["decode-unsorted", "decode-sorted", "mma-packed", "mma-canonical", "w4a4"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_out_of_range_ids_add_nothing_and_are_counted(problem, path, dtype, seed):
    from sm120lab.constants import SENTINEL
    from sm120lab.moe.reference import moe_reference

    p, packed = problem
    e = p.config.E
    run = _paths(p, packed)[path]
    ids = _poison_ids(p.topk_ids.to(dtype), e, seed)
    ids0, tw0, n_bad = _removed(ids, p.topk_weights, e)
    assert n_bad == 3
    err = torch.tensor([2], dtype=torch.int32)
    out = torch.full((ids.shape[0], p.config.H), SENTINEL, dtype=torch.bfloat16)
    run(ids, p.topk_weights, out=out, id_errors=err, _poison=True, _host_id_check=False)
    want = run(ids0, tw0, _poison=True)
    assert int(err) == 2 + n_bad
    assert bool(torch.isfinite(out).all()) and not bool((out == SENTINEL).any())
    assert torch.equal(out, want), (out - want).abs().max()
    if path != "w4a4":  # W4A16: also near the exact reference with those slots removed
        ref = moe_reference(p.hidden, ids0.long(), tw0, p.w13, p.w2, dtype=torch.float64)
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
    # check mode reads the count after the kernels and raises the host check's one-line error
    err2 = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=rf"^topk_ids: expected expert ids in \[0, E={e}\), got 3 outside it "
                                         r"\(min -1, max \d+; first at \[\d+, \d\]: -?\d+\)$"):
        run(ids, p.topk_weights, id_errors=err2, check_ids=True, _host_id_check=False)
    assert int(err2) == n_bad  # the caller's counter still gets the count


@needs_interp
@pytest.mark.parametrize("path", ["decode-unsorted", "decode-sorted", "mma-packed"])
def test_valid_ids_count_nothing_and_change_nothing(problem, path):
    """Valid ids: counter 0, and the output with a counter, with check mode or without the host check is the
    plain call's, bit for bit (the plain call's output equals the code before issue 32's change on these
    seeds: checked when the change was made)."""
    p, packed = problem
    run = _paths(p, packed)[path]
    plain = run(p.topk_ids, p.topk_weights)
    err = torch.zeros(1, dtype=torch.int32)
    assert torch.equal(run(p.topk_ids, p.topk_weights, id_errors=err, check_ids=True, _host_id_check=False), plain)
    assert int(err) == 0


@needs_interp
def test_cpu_ids_are_still_refused_on_the_host_before_any_kernel(problem):
    p, packed = problem
    ids = _poison_ids(p.topk_ids, p.config.E, 1)
    err = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^topk_ids: expected expert ids in \[0, E=8\), got 3 outside it"):
        fm.fused_moe_packed(p.hidden, ids, p.topk_weights, packed, id_errors=err)
    assert int(err) == 0  # refused before the kernels ran


@needs_interp
def test_check_mode_from_the_environment_and_the_per_device_counter(problem, monkeypatch):
    from sm120lab.kernels import moe_op
    from sm120lab.kernels.id_errors import CHECK_IDS_ENV, check_ids_enabled

    p, packed = problem
    ids = _poison_ids(p.topk_ids, p.config.E, 2)
    moe_op.reset_id_errors("cpu")
    before = moe_op.id_error_count("cpu")
    fm.fused_moe_packed(p.hidden, ids, p.topk_weights, packed, decode=False, _host_id_check=False)
    assert moe_op.id_error_count("cpu") == before + 3  # no id_errors: the per-device counter
    monkeypatch.setenv(CHECK_IDS_ENV, "1")
    assert check_ids_enabled() and not check_ids_enabled(False)
    with pytest.raises(ValueError, match=r"^topk_ids: expected expert ids in \[0, E=8\)"):
        fm.fused_moe_packed(p.hidden, ids, p.topk_weights, packed, decode=False, _host_id_check=False)
    assert moe_op.id_error_count("cpu") == before + 6
    fm.fused_moe_packed(p.hidden, ids, p.topk_weights, packed, decode=False, check_ids=False, _host_id_check=False)
    monkeypatch.setenv(CHECK_IDS_ENV, "0")
    assert not check_ids_enabled()
    moe_op.reset_id_errors("cpu")
    assert moe_op.id_error_count("cpu") == 0


@needs_interp
@pytest.mark.parametrize("bad", [torch.zeros(1, dtype=torch.int64), torch.zeros(2, dtype=torch.int32), 3])
def test_id_errors_must_be_one_int32_on_the_device(problem, bad):
    p, packed = problem
    with pytest.raises(ValueError, match=r"^id_errors must be an int32 tensor of one element on cpu"):
        fm.fused_moe_packed(p.hidden, p.topk_ids, p.topk_weights, packed, id_errors=bad)
