"""Anytime-valid comparison: add seeds in rounds, stop when every comparison is decided.

A confidence sequence per comparison from the *safe t-test* (Pérez-Ortiz et al., Ann. Statist.
2024): E_n(μ₀) = (1 + nτ²)^(−1/2) · (1 − r · nτ²/(1 + nτ²))^(−n/2), r = t²/(n − 1 + t²). Inverted,
{μ₀ : E_n(μ₀) < m/α} is x̄ ± s · sqrt((n−1) r*/((1 − r*) n)) with
r* = (1 − ((α/m)² / (1 + nτ²))^(1/n)) · (1 + nτ²)/(nτ²), unbounded while r* ≥ 1; Bonferroni over
the m comparisons, clipped to [−bound, bound], running intersection over n. Derivation, the
choice of rule and simulations: docs/harness.md, "Deciding with as few seeds as needed".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

BETTER, WORSE, EQUIVALENT, UNDECIDED = "better", "worse", "equivalent", "undecided"
#: prior SD τ of the standardized effect μ/σ; chosen by simulation (docs/harness.md)
PRIOR_SCALE = 2.0


@dataclass(frozen=True)
class SequentialResult:
    """One comparison after n paired seeds: ``verdict`` ("better", "worse", "equivalent" or
    "undecided") and the confidence sequence ``low, high`` at level 1 − ``alpha_each``."""

    verdict: str
    n: int
    low: float
    high: float
    mean: float
    alpha_each: float


def e_value(x, mu0: float, prior_scale: float = PRIOR_SCALE) -> float:
    """E_n(μ₀) of the safe t-test for the mean of ``x`` [n] (1 for n < 2: the first
    difference says nothing about a scale-free effect)."""
    y = np.asarray(x, dtype=np.float64) - mu0
    n = y.size
    q = float(np.sum(y**2))
    if n < 2 or q == 0:
        return 1.0
    g = n * prior_scale**2
    r = float(y.sum()) ** 2 / (n * q)
    return float((1 + g) ** -0.5 * (1 - r * g / (1 + g)) ** (-n / 2))


def half_widths(
    n: np.ndarray, sd: np.ndarray, alpha_each: float, prior_scale: float = PRIOR_SCALE
) -> np.ndarray:
    """Half-width of the safe-t interval at sample sizes ``n`` (≥ 2) and SDs ``sd`` (ddof 1),
    broadcast; inf where none is finite."""
    n = np.asarray(n, dtype=np.float64)
    g = n * prior_scale**2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = (1.0 - (alpha_each**2 / (1.0 + g)) ** (1.0 / n)) * (1.0 + g) / g
        hw = np.asarray(sd) * np.sqrt((n - 1.0) * r / ((1.0 - r) * n))
    return np.where((r < 1.0) & (n >= 2), hw, np.inf)


def confidence_sequence(
    x: np.ndarray, alpha_each: float, bound: float = 1.0, prior_scale: float = PRIOR_SCALE
) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``, each [N, ...]: the running-intersection confidence sequence of the
    paired differences ``x`` [N, ...] (in the order seeds were added) after 1, 2, …, N of
    them, at level ``alpha_each`` (the differences, and so the interval, lie in [−bound,
    bound])."""
    x = np.asarray(x, dtype=np.float64)
    n = np.arange(1, x.shape[0] + 1, dtype=np.float64).reshape((-1,) + (1,) * (x.ndim - 1))
    mean = np.cumsum(x, axis=0) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (np.cumsum(x**2, axis=0) - n * mean**2) / (n - 1)
    sd = np.sqrt(np.clip(np.nan_to_num(var, nan=0.0), 0.0, None))
    hw = half_widths(n, sd, alpha_each, prior_scale)
    low = np.maximum.accumulate(np.clip(mean - hw, -bound, bound), axis=0)
    high = np.minimum.accumulate(np.clip(mean + hw, -bound, bound), axis=0)
    return low, high


def verdicts_of(low: np.ndarray, high: np.ndarray, margin: float) -> np.ndarray:
    """Verdict strings, elementwise, of intervals [low, high]."""
    equivalent = (low >= -margin) & (high <= margin)
    return np.select([low > 0, high < 0, equivalent], [BETTER, WORSE, EQUIVALENT], UNDECIDED)


def sequential_verdicts(
    diffs: Mapping[str, np.ndarray],
    *,
    alpha: float = 0.05,
    margin: float,
    bound: float = 1.0,
    prior_scale: float = PRIOR_SCALE,
) -> dict[str, SequentialResult]:
    """Anytime-valid verdicts of a family of comparisons, ``diffs``: label -> [n] paired
    differences in seed-addition order. ``alpha`` bounds any wrong verdict at any stopping
    time; "equivalent" is inside ±``margin``; differences lie in ±``bound``."""
    if margin < 0 or bound <= 0:
        raise ValueError(f"margin must be >= 0 and bound > 0, got {margin}, {bound}")
    a = alpha / max(1, len(diffs))
    out = {}
    for label, d in diffs.items():
        d = np.asarray(d, dtype=np.float64)
        if d.ndim != 1 or not np.all(np.isfinite(d)):
            raise ValueError(f"{label}: paired differences must be a finite 1-d array")
        if d.size == 0:
            out[label] = SequentialResult(UNDECIDED, 0, -bound, bound, math.nan, a)
            continue
        low, high = confidence_sequence(d, a, bound, prior_scale)
        lo, hi = float(low[-1]), float(high[-1])
        if lo > hi:  # empty intersection (probability < α): keep the current interval only
            hw = math.inf
            if d.size > 1:
                hw = float(half_widths(np.array(d.size), np.array(d.std(ddof=1)), a, prior_scale))
            lo, hi = max(-bound, d.mean() - hw), min(bound, d.mean() + hw)
        verdict = str(verdicts_of(np.array(lo), np.array(hi), margin))
        out[label] = SequentialResult(verdict, int(d.size), lo, hi, float(d.mean()), a)
    return out
