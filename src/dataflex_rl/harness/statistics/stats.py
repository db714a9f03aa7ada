"""Paired statistics over seeds: confidence intervals, tests, corrections, rankings.

Every function is pure (numpy and scipy only); randomness comes from a ``numpy.random.Generator``
passed in. Shapes: ``values`` and ``diffs`` are ``[n]`` (one entry per seed); nothing loops over
bootstrap resamples or sign flips in Python.

Definitions used by the harness (docs/harness.md repeats them):

- **mean CI** (`t_interval`): mean ± t_{1-α/2, n-1} · s / √n, s the sample SD (ddof 1).
- **paired bootstrap** (`bootstrap_interval`): resample the n paired differences with
  replacement, percentile interval of the resampled means.
- **permutation p-value** (`sign_flip_pvalue`): under H0 (no difference) each paired
  difference is symmetric around 0, so its sign is exchangeable. Statistic |mean(d)|; two-sided.
  For n ≤ 16 all 2^n sign patterns are enumerated (exact, deterministic); the smallest
  attainable p is then 2 / 2^n. Above 16, random sign flips with p = (1 + hits) / (1 + draws).
- **Holm** (`holm`): Holm (1979) step-down over m methods. Adjusted
  p_(i) = min(1, max_{j ≤ i} (m - j + 1) p_(j)) (monotone). The per-method corrected level is
  α_(i) = α / (m - i + 1) with i the method's rank by raw p (ties take the smallest rank, the
  strictest level); the harness reports the bootstrap interval at level 1 - α_(i).
- **Kendall's tau** (`kendall_tau`): tau-b, ties corrected: ``scipy.stats.kendalltau`` after
  tying values within rounding error.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import stdtrit

#: n at or below which the sign-flip test enumerates all 2^n patterns
EXACT_MAX_N = 16


def _as_1d(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array, got shape {a.shape}")
    return a


def t_interval(values, alpha: float = 0.05) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` [n] (one per seed; NaNs are an error: drop
    missing seeds first) and its t-based (1 - alpha) confidence interval (NaN when n < 2)."""
    x = _as_1d(values, "values")
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stdtrit(n - 1, 1 - alpha / 2) * x.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def bootstrap_means(diffs, rng: np.random.Generator, n_boot: int = 10_000) -> np.ndarray:
    """[n_boot] means of resamples (with replacement) of the paired differences."""
    d = _as_1d(diffs, "diffs")
    if d.size == 0:
        raise ValueError("diffs: empty")
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    return d[idx].mean(axis=1)


def percentile_interval(samples, alpha: float) -> tuple[float, float]:
    """The ``alpha / 2`` and ``1 - alpha / 2`` quantiles of ``samples`` (a percentile interval)."""
    lo, hi = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bootstrap_interval(
    diffs, rng: np.random.Generator, alpha=0.05, n_boot: int = 10_000
) -> np.ndarray:
    """Paired-bootstrap percentile interval of the mean of ``diffs`` [n] (method - baseline,
    one per seed): ``[2]`` (low, high) for a scalar ``alpha``, ``[K, 2]`` for K levels (the same
    resamples serve all of them)."""
    a = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    means = bootstrap_means(diffs, rng, n_boot)
    q = np.quantile(means, np.concatenate([a / 2, 1 - a / 2]))
    out = np.stack([q[: a.size], q[a.size :]], axis=1)
    return out[0] if np.ndim(alpha) == 0 else out


def sign_patterns(n: int) -> np.ndarray:
    """[2^n, n] every ±1 sign pattern (row k holds the bits of k)."""
    bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n)) & 1
    return (1 - 2 * bits).astype(np.float64)


def sign_flip_pvalue(
    diffs,
    rng: np.random.Generator | None = None,
    n_perm: int = 10_000,
    exact_max_n: int = EXACT_MAX_N,
) -> float:
    """Two-sided paired permutation (sign-flip) p-value of the mean of ``diffs`` [n]: all 2^n
    patterns up to ``exact_max_n``, above it ``n_perm`` random ones (``rng`` needed only
    then). NaN when n == 0; all-zero differences give 1."""
    d = _as_1d(diffs, "diffs")
    n = d.size
    if n == 0:
        return math.nan
    observed = abs(d.mean())
    # a flipped mean equal to the observed one up to rounding counts as "as extreme"
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= exact_max_n:
        flipped = np.abs(sign_patterns(n) @ d) / n
        return float(np.mean(flipped >= observed - tol))
    if rng is None:
        raise ValueError(f"sign_flip_pvalue: n={n} > {exact_max_n} needs an rng")
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_perm, n))
    hits = int(np.sum(np.abs(signs @ d) / n >= observed - tol))
    return (1 + hits) / (1 + n_perm)


def min_pvalue(n: int) -> float:
    """Smallest two-sided p-value the exact sign-flip test can reach with n pairs (2 / 2^n)."""
    return min(1.0, 2.0 / 2**n) if n > 0 else 1.0


def pvalue_floor(n: int, n_perm: int = 10_000, exact_max_n: int = EXACT_MAX_N) -> float:
    """Smallest p-value `sign_flip_pvalue` can return with n pairs, whatever the data: 2 / 2^n
    when it enumerates every pattern, 1 / (1 + n_perm) above ``exact_max_n`` (random flips);
    1 for fewer than 2 pairs (no test)."""
    if n < 2:
        return 1.0
    return min_pvalue(n) if n <= exact_max_n else max(min_pvalue(n), 1.0 / (1 + n_perm))


def holm_floors(floors) -> np.ndarray:
    """[m] per hypothesis, the smallest Holm-adjusted p-value it can get when hypothesis j's raw
    p-value can be as small as ``floors[j]`` and no smaller (e.g. `pvalue_floor` of its pairs).

    The best case for hypothesis i: its p at its floor f_i, every hypothesis whose floor is
    below f_i at its own floor (ranked ahead), the others above f_i (ranked behind, no effect).
    Holm's adjusted p is then max over the ranks r ahead and i of (m - r + 1) · p_(r). With equal
    floors f this is m · f: Holm's first step must pass, 2 / 2^n ≤ α / m. A hypothesis whose
    value exceeds α can never be rejected, whatever the data.
    """
    f = _as_1d(floors, "floors")
    m = f.size
    if m == 0:
        return f.copy()
    ranked = np.sort(f)
    steps = np.maximum.accumulate((m - np.arange(m)) * ranked)  # Holm's running max
    ahead = np.searchsorted(ranked, f, side="left")  # hypotheses with a smaller floor
    before = np.where(ahead > 0, steps[np.maximum(ahead - 1, 0)], -np.inf)
    return np.maximum(before, (m - ahead) * f)


def seeds_for_verdict(
    m: int, alpha: float = 0.05, n_perm: int = 10_000, max_n: int = 64
) -> int | None:
    """Fewest paired seeds at which a family of ``m`` comparisons, each with that many, can
    reach a verdict at all: the smallest n whose Holm floor (`holm_floors` of ``m`` copies of
    `pvalue_floor` of n) is at most ``alpha``; None when no n up to ``max_n`` can.

    With the exact test and equal counts the floor is m · 2/2^n: one comparison needs 6 seeds
    at α = 0.05 (2/2^6 = 0.031; 2/2^5 = 0.0625), three need 7 (3 · 2/2^7 = 0.047).
    """
    for n in range(2, max_n + 1):
        if holm_floors([pvalue_floor(n, n_perm)] * max(1, m)).max() <= alpha:
            return n
    return None


def holm(pvalues, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down correction over m hypotheses.

    Args:
        pvalues: [m] raw p-values; NaN entries (not tested) are left out of m and stay NaN.
        alpha: family-wise error rate.

    Returns:
        ``(adjusted, level)``, both [m] in input order: the monotone Holm-adjusted p-values and
        each hypothesis's step-down level α / (m - i + 1) (i its rank; ties share the smallest
        rank). A hypothesis is rejected by Holm iff ``adjusted <= alpha``.
    """
    p = _as_1d(pvalues, "pvalues")
    adjusted = np.full_like(p, np.nan)
    level = np.full_like(p, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m == 0:
        return adjusted, level
    order = ok[np.argsort(p[ok], kind="stable")]
    ps = p[order]
    factors = m - np.arange(m)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(factors * ps))
    first_rank = np.searchsorted(ps, ps, side="left")  # ties -> smallest rank
    level[order] = alpha / (m - first_rank)
    return adjusted, level


def kendall_tau(x, y) -> float:
    """Kendall's tau-b between two scorings of the same items (what ``scipy.stats.kendalltau``
    gives; values within rounding error are tied first, see `_tie_close`; infinities are
    values: inf and inf tie).

    Args:
        x, y: [k] two summaries of k items (e.g. mean accuracy of k methods on two benchmarks).

    Returns:
        tau-b in [-1, 1]; NaN when k < 2, one side is constant or holds NaN.
    """
    a, b = _as_1d(x, "x"), _as_1d(y, "y")
    if a.size != b.size:
        raise ValueError(f"kendall_tau: sizes differ ({a.size} vs {b.size})")
    if a.size < 2 or np.isnan(a).any() or np.isnan(b).any():
        return math.nan
    return float(_tau(np.stack([a, b]), np.ones((2, a.size), dtype=bool))[0, 1])


def kendall_tau_matrix(scores) -> np.ndarray:
    """[S, S] `kendall_tau` between every two rows of ``scores`` [S, k], each pair over the
    items finite in both (NaN where fewer than two remain or one side is constant)."""
    x = np.asarray(scores, dtype=np.float64)
    return _tau(x, np.isfinite(x))


def _tau(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[S, S] tau-b between the rows of ``x`` [S, k], each pair over the items ``valid`` [S, k]
    in both: all pairs at once from the [S, k, k] pair signs."""
    x = np.stack([_tie_close(np.where(f, row, np.nan)) for row, f in zip(x, valid)])
    sign = (x[:, :, None] > x[:, None, :]).astype(float) - (x[:, :, None] < x[:, None, :])
    both = (valid[:, :, None] & valid[:, None, :]).astype(float)  # [S, k, k]
    sign *= both
    # over the pairs valid in both rows, every pair counted twice: (concordant - discordant)
    # and the untied pairs, halved
    con_minus_dis = np.einsum("apq,bpq->ab", sign, sign) / 2
    untied_a = np.einsum("apq,bpq->ab", np.abs(sign), both) / 2
    untied_b = untied_a.T
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = con_minus_dis / np.sqrt(untied_a) / np.sqrt(untied_b)
    tau = np.clip(tau, -1.0, 1.0)
    tau[(untied_a == 0) | (untied_b == 0)] = np.nan
    return tau


def _tie_close(v: np.ndarray) -> np.ndarray:
    """``v`` with values within rounding error (1e-12 relative) of the next smaller one set
    equal to it, so they tie: a mean of 0.5 and 0.1 and a mean of 0.4 and 0.2 are the same
    score. NaN stays NaN; infinities stay as they are."""
    finite = v[np.isfinite(v)]
    tol = 1e-12 * max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
    order = np.argsort(v, kind="stable")
    s = v[order]
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, a new value
        starts = np.concatenate([[True], ~(np.diff(s) <= tol)])
    first = np.maximum.accumulate(np.where(starts, np.arange(s.size), 0))
    out = np.empty_like(v)
    out[order] = s[first]
    return out


def ranks(values) -> np.ndarray:
    """Competition ranks, 1 = largest value (``scipy.stats.rankdata``'s method ``min`` on the
    negated values: 1 + how many are larger; ties, up to rounding, share the best rank; NaN
    ranks last)."""
    v = _as_1d(values, "values")
    if v.size == 0:
        return np.zeros(0, dtype=np.int64)
    filled = np.where(np.isnan(v), -np.inf, v)
    neg = -_tie_close(filled)
    return (np.searchsorted(np.sort(neg), neg, side="left") + 1).astype(np.int64)
