"""Aggregates over runs × tasks with stratified-bootstrap intervals (the conventions of
Agarwal et al., "Deep RL at the edge of the statistical precipice", NeurIPS 2021).

IQM, probability of improvement (ties half, averaged over tasks, unpaired) and performance
profiles, with runs resampled within each task (docs/harness.md, "Statistics"). ``scores`` is
[R, T], runs × tasks, no NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataflex_rl.harness.statistics.stats import percentile_interval


def _trim_mean(x: np.ndarray) -> np.ndarray:
    """Mean of the middle half over the last axis (``scipy.stats.trim_mean(x, 0.25, -1)``:
    the same partition, the same entries averaged)."""
    n = x.shape[-1]
    low = int(0.25 * n)
    return np.partition(x, (low, n - low - 1), axis=-1)[..., low : n - low].mean(axis=-1)


def iqm(scores: np.ndarray, axis: tuple[int, ...] | None = None) -> np.ndarray:
    """Interquartile mean over ``axis`` (all entries by default)."""
    x = np.asarray(scores, dtype=np.float64)
    if axis is None:
        return _trim_mean(x.ravel())
    lead = [i for i in range(x.ndim) if i not in axis]
    x = np.moveaxis(x, lead, range(len(lead))).reshape(*[x.shape[i] for i in lead], -1)
    return _trim_mean(x)


def stratified_resamples(scores: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """[n_boot, R, T] resamples of the runs, drawn independently within each task column."""
    x = np.asarray(scores, dtype=np.float64)
    r, t = x.shape
    idx = rng.integers(0, r, size=(n_boot, r, t))
    return x[idx, np.arange(t)]


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[...] P(X > Y) + ½ P(X = Y), averaged over tasks, of runs ``x`` [..., Rx, T] of method X
    and ``y`` [..., Ry, T] of method Y (leading axes: e.g. bootstrap resamples)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    diff = x[..., :, None, :] - y[..., None, :, :]  # [..., Rx, Ry, T]
    per_task = np.mean((diff > 0) + 0.5 * (diff == 0), axis=(-3, -2))
    return per_task.mean(axis=-1)


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """[..., K] fraction of run × task ``scores`` [..., R, T] above each of the K ``taus``."""
    x = np.asarray(scores, dtype=np.float64)
    above = np.count_nonzero(x[..., None] > np.asarray(taus), axis=(-3, -2))
    return above / (x.shape[-2] * x.shape[-1])  # the mean of the booleans, exactly


@dataclass
class MethodAggregate:
    """One method's aggregates with 95% stratified-bootstrap intervals.

    ``poi`` is P(method > baseline); NaN for the baseline itself.
    """

    method: str
    runs: int
    tasks: int
    iqm: float
    iqm_ci: tuple[float, float]
    poi: float
    poi_ci: tuple[float, float]
    profile: np.ndarray
    profile_ci: np.ndarray  # [2, K]


def aggregate(
    scores: dict[str, np.ndarray],
    baseline: str,
    taus: np.ndarray,
    rng: np.random.Generator,
    n_boot: int = 2000,
    alpha: float = 0.05,
) -> list[MethodAggregate]:
    """IQM, probability of improvement over ``baseline`` and performance profile at ``taus``
    [K] per method of ``scores`` (method -> [R, T], the same T tasks for every method)."""
    boots = {m: stratified_resamples(x, rng, n_boot) for m, x in scores.items()}
    base, base_boot = scores[baseline], boots[baseline]
    out = []
    for m, x in scores.items():
        b = boots[m]
        poi, poi_ci = np.nan, (np.nan, np.nan)
        if m != baseline:
            poi = float(probability_of_improvement(x, base))
            poi_ci = percentile_interval(probability_of_improvement(b, base_boot), alpha)
        iqm_ci = percentile_interval(iqm(b, axis=(1, 2)), alpha)
        prof_ci = np.quantile(performance_profile(b, taus), [alpha / 2, 1 - alpha / 2], axis=0)
        profile = performance_profile(x, taus)
        out.append(
            MethodAggregate(m, *x.shape, float(iqm(x)), iqm_ci, poi, poi_ci, profile, prof_ci)
        )
    return out


@dataclass(frozen=True)
class Profiles:
    """Performance profiles on [K] thresholds ``taus`` (from the lowest score to the highest):
    method -> ``(profile, low, high)``, each [K], the band a 95% stratified bootstrap."""

    taus: np.ndarray
    curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


def profiles(scores: dict[str, np.ndarray], n_boot: int = 1000, seed: int = 0) -> Profiles:
    """Performance profiles of ``scores`` (method -> [R, T]) on 41 thresholds spanning every
    score, each with its stratified-bootstrap band (``n_boot`` resamples, one generator seeded
    with ``seed`` drawn method after method)."""
    allv = np.concatenate([x.ravel() for x in scores.values()])
    taus = np.linspace(allv.min(), allv.max(), 41)
    rng = np.random.default_rng(seed)
    curves = {}
    for m, x in scores.items():
        band = performance_profile(stratified_resamples(x, rng, n_boot), taus)
        lo, hi = np.quantile(band, [0.025, 0.975], axis=0)
        curves[m] = (performance_profile(x, taus), lo, hi)
    return Profiles(taus, curves)


def method_aggregates(
    scores: dict[str, np.ndarray], baseline: str, fractions: bool, seed: int
) -> list[MethodAggregate]:
    """The report's `aggregate`: 2,000 resamples from a generator seeded with ``seed``, 95%
    intervals, profiles on 21 thresholds ([0, 1] when the scores are fractions, else their
    quantiles). Empty with fewer than two methods or without the baseline."""
    if len(scores) < 2 or baseline not in scores:
        return []
    taus = np.linspace(0, 1, 21)
    if not fractions:
        taus = np.quantile(np.concatenate([x.ravel() for x in scores.values()]), taus)
    return aggregate(scores, baseline, taus, np.random.default_rng(seed), n_boot=2000, alpha=0.05)
