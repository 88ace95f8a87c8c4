"""How many distinct experts a decode step touches when B tokens each pick k of E experts.

Every distinct expert's weights are read once per step, so this count, not B*k, sets the
routed-expert bytes of a batched decode step.

Uniform routing (each token's k experts a uniformly random k-subset, tokens independent):
an expert is missed by one token with probability 1 - k/E, so exactly

    E[distinct] = E * (1 - (1 - k/E)^B)                                   (closed form)

General routing with per-expert inclusion probabilities pi_e (the chance that expert e is in
one token's top-k; sum_e pi_e = k), tokens independent:

    E[distinct] = sum_e (1 - (1 - pi_e)^B)                                (exact sum)

Skewed routing: expert popularity follows Zipf, weight_e ∝ 1 / rank^s, and a token draws its
k experts without replacement in proportion to weight (successive sampling, i.e. the Gumbel
top-k trick). pi_e has no closed form for k > 1; :func:`zipf_inclusion_probabilities` estimates
it by Monte Carlo, and :func:`simulate_distinct_experts` simulates the whole batch to check
the formulas (tests do).
"""

from __future__ import annotations

import numpy as np


def _check(E: int, k: int, B) -> None:
    if not isinstance(E, (int, np.integer)) or E < 1:
        raise ValueError(f"E (number of experts) must be a positive int, got {E!r}")
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= E:
        raise ValueError(f"k (experts per token) must be an int in [1, E={E}], got {k!r}")
    b = np.asarray(B)
    if np.any(b < 0):
        raise ValueError(f"B (tokens in the step) must be >= 0, got {B!r}")


def expected_distinct_uniform(E: int, k: int, B):
    """E * (1 - (1 - k/E)^B); B may be an array. B=1 gives k, B->inf gives E."""
    _check(E, k, B)
    b = np.asarray(B, dtype=np.float64)
    out = E * -np.expm1(b * np.log1p(-k / E)) if k < E else np.where(b > 0, float(E), 0.0)
    return float(out) if np.ndim(out) == 0 else out


def expected_distinct_from_inclusion(inclusion, B):
    """sum_e 1 - (1 - pi_e)^B for per-expert inclusion probabilities ``inclusion`` (sum = k)."""
    pi = np.asarray(inclusion, dtype=np.float64)
    if pi.ndim != 1 or np.any(pi < 0) or np.any(pi > 1 + 1e-12):
        raise ValueError("inclusion must be a 1-D array of probabilities in [0, 1]")
    b = np.atleast_1d(np.asarray(B, dtype=np.float64))
    if np.any(b < 0):
        raise ValueError(f"B must be >= 0, got {B!r}")
    miss = np.clip(1.0 - pi, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        logmiss = np.log(miss)  # -inf where pi == 1
    vals = np.array([float(np.sum(-np.expm1(bb * logmiss))) if bb > 0 else 0.0 for bb in b])
    return float(vals[0]) if np.ndim(B) == 0 else vals


def zipf_weights(E: int, s: float) -> np.ndarray:
    """Popularity weights ∝ 1/rank^s over E experts, normalised to sum 1 (s=0: uniform)."""
    if s < 0:
        raise ValueError(f"zipf exponent s must be >= 0, got {s!r}")
    w = 1.0 / np.arange(1, E + 1, dtype=np.float64) ** s
    return w / w.sum()


def _draw_topk(weights: np.ndarray, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n independent k-subsets drawn without replacement ∝ weights (Gumbel top-k): [n, k]."""
    g = rng.gumbel(size=(n, weights.size)) + np.log(weights)
    return np.argpartition(-g, k - 1, axis=1)[:, :k]


def zipf_inclusion_probabilities(E: int, k: int, s: float, *, samples: int = 20000,
                                 seed: int = 0) -> np.ndarray:
    """Monte Carlo estimate of pi_e under Zipf(s) successive sampling (sums to k exactly).

    Deterministic for a given seed; results are cached per (E, k, s, samples, seed)."""
    _check(E, k, 1)
    key = (int(E), int(k), float(s), int(samples), int(seed))
    if key not in _INCLUSION_CACHE:
        _INCLUSION_CACHE[key] = _zipf_inclusion(E, k, s, samples, seed)
    return _INCLUSION_CACHE[key].copy()


_INCLUSION_CACHE: dict[tuple, np.ndarray] = {}


def _zipf_inclusion(E: int, k: int, s: float, samples: int, seed: int) -> np.ndarray:
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    w = zipf_weights(E, s)
    if s == 0:
        return np.full(E, k / E)
    rng = np.random.default_rng(seed)
    counts = np.zeros(E, dtype=np.int64)
    chunk = max(1, min(samples, 4_000_000 // E))
    done = 0
    while done < samples:
        n = min(chunk, samples - done)
        idx = _draw_topk(w, k, n, rng)
        counts += np.bincount(idx.ravel(), minlength=E)
        done += n
    return counts / samples


def simulate_distinct_experts(E: int, k: int, B: int, *, weights=None, trials: int = 2000,
                              seed: int = 0) -> tuple[float, float]:
    """Monte Carlo (mean, standard error) of distinct experts over ``trials`` steps of B tokens."""
    _check(E, k, B)
    w = np.full(E, 1.0 / E) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (E,) or np.any(w <= 0):
        raise ValueError("weights must be a positive array of length E")
    w = w / w.sum()
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if B == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    counts = np.empty(trials)
    per_chunk = max(1, 2_000_000 // (B * E))
    for start in range(0, trials, per_chunk):
        n = min(per_chunk, trials - start)
        idx = np.sort(_draw_topk(w, k, n * B, rng).reshape(n, B * k), axis=1)
        counts[start:start + n] = 1 + np.count_nonzero(np.diff(idx, axis=1), axis=1)
    se = float(counts.std(ddof=1) / np.sqrt(trials)) if trials > 1 else 0.0
    return float(counts.mean()), se


def expected_distinct(E: int, k: int, B, *, routing: str = "uniform", zipf_s: float = 1.0,
                      samples: int = 20000, seed: int = 0):
    """Expected distinct experts for ``routing`` in {'uniform', 'zipf'}."""
    if routing == "uniform":
        return expected_distinct_uniform(E, k, B)
    if routing == "zipf":
        pi = zipf_inclusion_probabilities(E, k, zipf_s, samples=samples, seed=seed)
        return expected_distinct_from_inclusion(pi, B)
    raise ValueError(f"routing must be 'uniform' or 'zipf', got {routing!r}")
