"""Paired statistics over seeds: confidence intervals, tests, corrections, rankings.

Pure functions (numpy, scipy); randomness from a ``numpy.random.Generator`` passed in; ``values``
and ``diffs`` are ``[n]``, one per seed. Definitions: docs/harness.md, "Statistics".
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


#: the statistic of each ``alternative`` of `sign_flip_pvalue`, from a mean
_STATISTIC = {"two-sided": np.abs, "greater": np.positive, "less": np.negative}


def sign_flip_pvalue(
    diffs,
    rng: np.random.Generator | None = None,
    n_perm: int = 10_000,
    exact_max_n: int = EXACT_MAX_N,
    alternative: str = "two-sided",
) -> float:
    """Paired permutation (sign-flip) p-value of the mean of ``diffs`` [n]: all 2^n patterns
    up to ``exact_max_n``, above it ``n_perm`` random ones (``rng`` needed only then).
    ``alternative``: "two-sided" (|mean|), "greater" (H1: mean > 0) or "less" (H1: mean < 0).
    NaN when n == 0; all-zero differences give 1."""
    d = _as_1d(diffs, "diffs")
    n = d.size
    if n == 0:
        return math.nan
    stat = _STATISTIC[alternative]
    observed = stat(d.mean())
    # a flipped mean equal to the observed one up to rounding counts as "as extreme"
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= exact_max_n:
        flipped = stat(sign_patterns(n) @ d / n)
        return float(np.mean(flipped >= observed - tol))
    if rng is None:
        raise ValueError(f"sign_flip_pvalue: n={n} > {exact_max_n} needs an rng")
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_perm, n))
    hits = int(np.sum(stat(signs @ d / n) >= observed - tol))
    return (1 + hits) / (1 + n_perm)


def min_pvalue(n: int, sides: int = 2) -> float:
    """Smallest p-value the exact sign-flip test can reach with n pairs: 2 / 2^n two-sided,
    1 / 2^n one-sided (``sides`` 1)."""
    return min(1.0, sides / 2**n) if n > 0 else 1.0


def pvalue_floor(
    n: int, n_perm: int = 10_000, exact_max_n: int = EXACT_MAX_N, sides: int = 2
) -> float:
    """Smallest p-value `sign_flip_pvalue` can return with n pairs, whatever the data:
    `min_pvalue` when it enumerates every pattern, 1 / (1 + n_perm) above ``exact_max_n``
    (random flips); 1 for fewer than 2 pairs (no test)."""
    if n < 2:
        return 1.0
    floor = min_pvalue(n, sides)
    return floor if n <= exact_max_n else max(floor, 1.0 / (1 + n_perm))


def holm_floors(floors) -> np.ndarray:
    """[m] the smallest Holm-adjusted p each hypothesis can get when hypothesis j's raw p can be
    no smaller than ``floors[j]``: its best case has the lower floors ranked ahead at their
    floors (m · f for equal floors). Above α: never rejected, whatever the data."""
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
    m: int, alpha: float = 0.05, n_perm: int = 10_000, max_n: int = 64, sides: int = 2
) -> int | None:
    """Fewest paired seeds at which a family of ``m`` comparisons can reach a verdict at all
    (Holm floor m · 2/2^n ≤ ``alpha``: 6 for one at 0.05, 7 for three; one-sided tests,
    ``sides`` 1, m · 1/2^n: 5 and 6); None above ``max_n``."""
    for n in range(2, max_n + 1):
        if holm_floors([pvalue_floor(n, n_perm, sides=sides)] * max(1, m)).max() <= alpha:
            return n
    return None


def holm(pvalues, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down over ``pvalues`` [m] (NaN: not tested, left out): ``(adjusted, level)``,
    both [m] in input order, level α / (m - i + 1) (i the rank, ties share the smallest)."""
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
    """Kendall's tau-b of two scorings [k] (``scipy.stats.kendalltau`` after `_tie_close`); NaN
    when k < 2, one side is constant or holds NaN."""
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
    """``v`` with values within 1e-12 (relative) of the next smaller one set equal to it."""
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
    """Competition ranks, 1 = largest (ties up to rounding share the best rank; NaN last)."""
    v = _as_1d(values, "values")
    if v.size == 0:
        return np.zeros(0, dtype=np.int64)
    filled = np.where(np.isnan(v), -np.inf, v)
    neg = -_tie_close(filled)
    return (np.searchsorted(np.sort(neg), neg, side="left") + 1).astype(np.int64)
