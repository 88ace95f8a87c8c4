"""Expected distinct experts per decode step: closed form, exact enumeration, Monte Carlo."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sm120lab.roofline.routing import (
    expected_distinct,
    expected_distinct_from_inclusion,
    expected_distinct_uniform,
    simulate_distinct_experts,
    zipf_inclusion_probabilities,
    zipf_weights,
)


def _enumerate_uniform(E, k, B):
    """Exact mean of |union| over all (C(E,k))^B equally likely token choices."""
    subsets = [frozenset(c) for c in itertools.combinations(range(E), k)]
    total = count = 0
    for choice in itertools.product(subsets, repeat=B):
        total += len(frozenset().union(*choice))
        count += 1
    return total / count


@pytest.mark.parametrize("E,k,B", [(4, 2, 2), (5, 2, 3), (6, 3, 2), (5, 1, 4), (4, 4, 2), (6, 2, 1)])
def test_closed_form_equals_exhaustive_enumeration(E, k, B):
    assert expected_distinct_uniform(E, k, B) == pytest.approx(_enumerate_uniform(E, k, B), rel=1e-12)


def test_hand_computed_case():
    # E=4, k=2, B=2: each expert missed by a token w.p. 1/2, by both w.p. 1/4 -> 4 * 3/4 = 3
    assert expected_distinct_uniform(4, 2, 2) == pytest.approx(3.0, rel=1e-15)


@given(E=st.integers(2, 1024), data=st.data())
def test_limits_and_monotonicity(E, data):
    k = data.draw(st.integers(1, E))
    assert expected_distinct_uniform(E, k, 0) == 0
    assert expected_distinct_uniform(E, k, 1) == pytest.approx(k, rel=1e-12)
    B = np.arange(0, 400)
    d = expected_distinct_uniform(E, k, B)
    assert np.all(np.diff(d) >= -1e-9)            # more tokens never touch fewer experts
    assert np.all(np.diff(d, 2) <= 1e-9)          # diminishing returns (concave in B)
    assert np.all(d <= np.minimum(B * k, E) + 1e-9)
    assert expected_distinct_uniform(E, k, 10**7) == pytest.approx(E, rel=1e-9)


def test_closed_form_matches_monte_carlo_on_random_shapes(seed):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        E = int(rng.integers(8, 600))
        k = int(rng.integers(1, min(E, 12) + 1))
        B = int(rng.integers(1, 64))
        trials = 1000
        mean, _ = simulate_distinct_experts(E, k, B, trials=trials, seed=int(rng.integers(1 << 31)))
        # exact variance of the number of missed experts (a sample s.e. is 0 when misses are rare)
        q = (1 - k / E) ** B                                   # one expert missed by all B tokens
        r = ((E - k) * (E - k - 1) / (E * (E - 1))) ** B       # two given experts both missed
        var = E * q * (1 - q) + E * (E - 1) * (r - q * q)
        assert abs(mean - expected_distinct_uniform(E, k, B)) < 5 * np.sqrt(max(var, 0) / trials) + 1e-9, (E, k, B)


def test_inclusion_sum_is_exact_for_uniform_inclusion(seed):
    rng = np.random.default_rng(seed)
    E, k = int(rng.integers(10, 500)), int(rng.integers(1, 10))
    B = rng.integers(0, 200, size=20)
    np.testing.assert_allclose(expected_distinct_from_inclusion(np.full(E, k / E), B),
                               expected_distinct_uniform(E, k, B), rtol=1e-12, atol=1e-12)


def test_zipf_inclusion_properties(seed):
    E, k = 128, 8
    pi = zipf_inclusion_probabilities(E, k, 1.0, samples=20000, seed=seed)
    assert pi.sum() == pytest.approx(k, rel=1e-12)       # every token contributes exactly k
    assert np.all((pi >= 0) & (pi <= 1))
    assert pi[0] > pi[E // 2] > pi[-1]                   # popular experts are picked more often
    np.testing.assert_allclose(zipf_inclusion_probabilities(E, k, 0.0), np.full(E, k / E))
    w = zipf_weights(E, 1.0)
    assert w.sum() == pytest.approx(1.0) and np.all(np.diff(w) < 0)


def test_skew_touches_fewer_experts_and_matches_simulation(seed):
    E, k, s = 128, 8, 1.2
    pi = zipf_inclusion_probabilities(E, k, s, samples=40000, seed=seed)
    for B in (1, 4, 16, 64):
        zipf = expected_distinct_from_inclusion(pi, B)
        assert zipf <= expected_distinct_uniform(E, k, B) + 1e-9
        mean, se = simulate_distinct_experts(E, k, B, weights=zipf_weights(E, s), trials=1500,
                                             seed=seed + B)
        # pi is itself an estimate: allow its error on top of the simulation's
        assert abs(mean - zipf) < 5 * se + 0.01 * zipf + 1e-9, (B, mean, zipf)
    assert expected_distinct_from_inclusion(pi, 1) == pytest.approx(k, rel=1e-12)


def test_dispatch_and_bad_input():
    assert expected_distinct(512, 10, 1, routing="uniform") == pytest.approx(10)
    with pytest.raises(ValueError, match="routing"):
        expected_distinct(512, 10, 4, routing="hot")
    with pytest.raises(ValueError, match="k"):
        expected_distinct_uniform(8, 9, 1)
    with pytest.raises(ValueError, match="B"):
        expected_distinct_uniform(8, 2, -1)
    with pytest.raises(ValueError, match="E"):
        expected_distinct_uniform(0, 1, 1)
