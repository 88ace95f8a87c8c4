"""The null family (issue 32): the legitimate implementations whose spread sets the W4A4 bands and whose
nearest member judges 16-bit-activation backends (sm120lab.moe.envelope, notes/correctness.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sm120lab.moe import make_moe_problem
from sm120lab.moe.envelope import activation_family, member_spread, null_bands, weight_format_family
from sm120lab.moe.harness import check
from sm120lab.moe.variants import (
    ACT_FAMILY_VARIANTS,
    ACT_OUT_OF_FAMILY,
    QUANTIZER_VARIANTS,
    WEIGHT_OUT_OF_FAMILY,
    WEIGHT_QUANTIZER_VARIANTS,
)
from sm120lab.moe.verdict import Verdict


@pytest.fixture(scope="module")
def prob():
    return make_moe_problem("tiny", routing="zipf", seed=20261205)


def _combine(slots, p):
    return (slots.double() * p.topk_weights.double().unsqueeze(-1)).sum(1)


def test_every_family_member_is_a_swept_variant_and_the_out_of_family_ones_are_not(prob):
    act = set(activation_family(prob, torch.float64))
    weight = set(weight_format_family(prob, torch.float64)) - {"unquantized"}
    assert act == {cls().name for cls in ACT_FAMILY_VARIANTS} < {cls().name for cls in QUANTIZER_VARIANTS}
    assert weight == {cls().name for cls in WEIGHT_QUANTIZER_VARIANTS}
    outside = {cls().name for cls in ACT_OUT_OF_FAMILY + WEIGHT_OUT_OF_FAMILY}
    assert not outside & (act | weight) and len(outside) == len(ACT_OUT_OF_FAMILY) + len(WEIGHT_OUT_OF_FAMILY)


def test_each_activation_member_is_the_variant_of_its_name(prob):
    """The family's per-slot outputs, mixed with the routing weights, are what the variant of the same name
    computes in its main run (so leave-one-out leaves out the right member)."""
    fam = activation_family(prob, torch.float64)
    variants = {cls().name: cls() for cls in QUANTIZER_VARIANTS}
    for name, slots in fam.items():
        out = torch.empty(prob.tokens, prob.config.H, dtype=torch.float32)
        variants[name].run(prob, out)
        torch.testing.assert_close(_combine(slots, prob), out.double(), rtol=1e-5, atol=1e-5)


def test_each_weight_member_is_the_variant_of_its_name(prob):
    fam = weight_format_family(prob, torch.float64)
    assert list(fam)[0] == "unquantized"
    variants = {cls().name: cls() for cls in WEIGHT_QUANTIZER_VARIANTS}
    for name, slots in list(fam.items())[1:]:
        out = torch.empty(prob.tokens, prob.config.H, dtype=torch.float32)
        variants[name].run(prob, out)
        torch.testing.assert_close(_combine(slots, prob), out.double(), rtol=1e-5, atol=1e-5)
    # the members are distinct quantizations: no two give the same output
    outs = [_combine(s, prob) for s in fam.values()]
    assert all(not torch.equal(a, b) for i, a in enumerate(outs) for b in outs[i + 1:])


def test_null_bands_are_the_largest_member_spread_and_leave_one_out_drops_exactly_one(prob):
    emu = activation_family(prob, torch.float64)  # any twin will do for the algebra: take the first member
    names = list(emu)
    twin = emu[names[0]]
    spreads = {n: member_spread(s, twin, _combine(twin, prob), prob) for n, s in emu.items()}
    full = null_bands(spreads)
    cells = np.stack([s.cell for s in spreads.values()])
    assert np.array_equal(full["cell_band"], cells.max(0))
    assert full["layer_band"] == max(s.layer for s in spreads.values())
    assert spreads[names[0]].layer == 0.0 and not spreads[names[0]].cell.any()  # the twin against itself
    for n in names:
        loo = null_bands(spreads, exclude=n)
        rest = np.stack([s.cell for m, s in spreads.items() if m != n])
        assert np.array_equal(loo["cell_band"], rest.max(0))
        assert np.all(loo["cell_band"] <= full["cell_band"])
    assert null_bands({}) == {} and null_bands({"a": spreads[names[0]]}, exclude="a") == {}


def test_a_member_is_judged_by_the_others_and_an_outsider_by_all(prob):
    """The harness hands a W4A4 member variant the band of the other members (leave-one-out), and a W4A4
    backend in no member (an out-of-family variant) the band of all of them."""
    member, outsider = QUANTIZER_VARIANTS[0](), ACT_OUT_OF_FAMILY[0]()
    res = check(prob, ["emulated-w4a4", member, outsider], keep_output=False)
    emu, rm, ro = (res.reports[n] for n in ("emulated-w4a4", member.name, outsider.name))
    assert np.array_equal(ro.cell_band, emu.cell_band) and ro.layer_band == emu.layer_band
    assert np.all(rm.cell_band <= emu.cell_band) and not np.array_equal(rm.cell_band, emu.cell_band)
    assert rm.layer_band <= emu.layer_band == res.envelope.act_layer_band
    assert all(r.verdict != Verdict.GARBAGE for r in (emu, rm, ro)), (rm.reasons, ro.reasons)


def test_a_sweep_in_workers_equals_the_sweep_in_process_and_merges():
    """``jobs`` workers give the same record as one process (verdict lines, totals), and two records run apart
    merge into one whose counts are their sums; records of other rules refuse to merge (one line)."""
    from sm120lab.moe.sweep import false_alarm_sweep, merge_sweeps

    one = false_alarm_sweep(("tiny",), ("single", "uniform"), 1, 7)
    two = false_alarm_sweep(("tiny",), ("single", "uniform"), 1, 7, jobs=2)
    assert one["problems"] == two["problems"] and one["totals"] == two["totals"]
    other = false_alarm_sweep(("tiny",), ("mostly-empty",), 1, 8)
    merged = merge_sweeps([one, other], ["a", "b"])
    assert merged["totals"]["problems"] == 3 and len(merged["problems"]) == 3
    v = "variant-act-scale-up"
    assert sum(merged["totals"]["verdicts"][v].values()) == 3
    bad = dict(other, rules={**other["rules"], "W4A4_CELL_Z": 1.0})
    with pytest.raises(ValueError, match="rules differ"):
        merge_sweeps([one, bad], ["a", "b"])
