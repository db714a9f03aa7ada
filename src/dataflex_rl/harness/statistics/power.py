"""Power of the harness's own verdict rule (`analysis`), by simulation (docs/harness.md, "MDE").

Paired differences are d = effect + sd · z. One simulation per (n, m, α) gives each simulated
experiment's *critical effect* in sd units, the smallest effect it calls "better": raising the
effect by e raises |Σd| by n·e and any sign-flipped |Σ s·d| by at most n·e, so each pattern has
a threshold (`_pattern_thresholds`), and the bootstrap interval shifts by exactly e. Power is
then ``mean(critical · sd < effect)`` and the MDE its power-quantile, both exact and monotone.
The other m − 1 comparisons are taken as null and the method as ranked first (p · m ≤ α, interval
at 1 − α/m): never more optimistic than Holm. At the report's defaults the MDE is read from
``power_table.csv`` (``scripts/power_table.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from dataflex_rl.harness.statistics import stats

#: default simulated experiments per (n, m, α): power SE ≤ 0.011, MDE quantile SE ≈ 2%
REPS = 2000
#: default bootstrap resamples in the simulation (the analysis's default)
N_BOOT = 10_000
#: entries per chunk of the [experiments, patterns] threshold matrix (memory bound, 8 B each)
_CHUNK = 1 << 22
#: the settings ``power_table.csv`` holds (`simulated_mde` reads it at exactly these)
TABLE_ALPHA, TABLE_POWER = 0.05, 0.8
TABLE_KEY = f"alpha={TABLE_ALPHA} power={TABLE_POWER} reps={REPS} n_boot={N_BOOT} seed=0"
TABLE_MAX_M, TABLE_MAX_N = 4, 64
TABLE_FILE = Path(__file__).with_name("power_table.csv")
#: sides of the test -> its table (the one-sided test of the margin verdicts: ``sides`` 1)
TABLE_FILES = {2: TABLE_FILE, 1: TABLE_FILE.with_name("power_table_one_sided.csv")}


@lru_cache(maxsize=2)
def mde_table(sides: int = 2) -> dict[tuple[int, int], float]:
    """(m, n) -> the MDE in units of sd at `TABLE_KEY` (``power_table.csv``, one-sided
    ``power_table_one_sided.csv``; empty when the file is missing or was simulated at other
    settings)."""
    path = TABLE_FILES[sides]
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    if not lines or lines[0] != f"# {TABLE_KEY}":
        return {}
    return {(int(m), int(n)): float(v) for m, n, v in (x.split(",") for x in lines[2:])}


def no_verdict(
    n: int, m: int = 1, alpha: float = 0.05, n_perm: int = 10_000, sides: int = 2
) -> bool:
    """True where no effect can ever be called "better" at ``n`` paired seeds as the first of
    ``m`` Holm comparisons: fewer than ``sides`` sign patterns (two-sided p = 2/2^n, one-sided
    1/2^n; above 16 seeds one random pattern, p = 1/(1 + n_perm)) fit under α/m.
    `critical_effects` is then all +inf."""
    level = alpha / m
    if n <= stats.EXACT_MAX_N:
        return math.floor(level * 2**n * (1 + 1e-12)) < sides
    return math.floor(level * (1 + n_perm) * (1 + 1e-12)) < 1


def _pattern_thresholds(z: np.ndarray, patterns: np.ndarray, sides: int = 2) -> np.ndarray:
    """[R, P] effect (sd units) below which pattern s [P, n] is "as extreme" on noise z [R, n].

    With A = Σ s, B = s · z and Z = Σ z: a hit iff e ≤ (B − Z)/(n − A) (Σ s·d ≥ Σ d, the
    one-sided test, ``sides`` 1) or, two-sided, also e ≤ −(Z + B)/(n + A); the identity (and,
    two-sided, the all-flipped pattern) always hits (+inf).
    """
    n = z.shape[1]
    a = patterns.sum(axis=1)
    b = z @ patterns.T
    zs = z.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (b - zs) * (1.0 / (n - a))
        if sides == 2:
            t = np.maximum(t, -(zs + b) * (1.0 / (n + a)))
    always = (np.abs(a) if sides == 2 else a) == n
    if always.any():
        t[:, always] = np.inf
    return t


def _quantile_rows(x: np.ndarray, q: float) -> np.ndarray:
    """[R] ``np.quantile(x, q, axis=1)`` (linear interpolation) by partial sorting."""
    pos = q * (x.shape[1] - 1)
    j = min(int(math.floor(pos)), x.shape[1] - 2)
    part = np.partition(x, (j, j + 1), axis=1)
    return part[:, j] + (pos - j) * (part[:, j + 1] - part[:, j])


def _kth_largest(x: np.ndarray, k: int) -> np.ndarray:
    """[R] the (k+1)-th largest entry of each row (k 0-based); -inf when k ≥ columns."""
    if k >= x.shape[1]:
        return np.full(x.shape[0], -np.inf)
    return -np.partition(-x, k, axis=1)[:, k]


@lru_cache(maxsize=256)
def critical_effects(
    n: int,
    m: int = 1,
    alpha: float = 0.05,
    reps: int = REPS,
    n_boot: int = N_BOOT,
    seed: int = 0,
    n_perm: int = 10_000,
    sides: int = 2,
) -> np.ndarray:
    """[reps] sorted (read-only, cached) smallest effects, in paired-sd units, called "better"
    with n seeds as the first of m Holm comparisons; +inf where none can be. ``sides`` 1: the
    smallest effects the one-sided sign-flip test alone (H1: mean > 0) rejects at α/m (the
    margin tests: `analysis`), no interval."""
    if n < 2:
        raise ValueError(f"critical_effects: n={n}, need at least 2 paired seeds")
    level = alpha / m
    rng = np.random.default_rng([seed, n, m])
    z = rng.standard_normal((reps, n))
    if n <= stats.EXACT_MAX_N:
        # p = hits / 2^n ≤ level  <=>  hits ≤ floor(level · 2^n). s and −s share a threshold
        # and the identity and its negation always hit: hits = 2 + 2 · (hits among the
        # patterns with last sign + other than the identity)
        # one-sided: every pattern but the identity, hits = 1 + (hits among them)
        hits = math.floor(level * 2**n * (1 + 1e-12))
        patterns = stats.sign_patterns(n)[1 : 2 ** (n - 1) if sides == 2 else None]
        k = (hits - 2) // 2 if sides == 2 else hits - 1
    else:
        patterns = rng.choice(np.array([-1.0, 1.0]), size=(n_perm, n))
        # p = (1 + hits) / (1 + n_perm) ≤ level  <=>  hits ≤ floor(level (1 + n_perm)) - 1
        k = math.floor(level * (1 + n_perm) * (1 + 1e-12)) - 1
    e_p = np.full(reps, np.inf)
    if k >= 0:
        step = max(1, _CHUNK // patterns.shape[0])
        for i in range(0, reps, step):  # chunks of experiments, bounded memory
            t = _pattern_thresholds(z[i : i + step], patterns, sides)
            e_p[i : i + step] = _kth_largest(t, k)
    if sides == 1:
        out = np.sort(e_p)
        out.flags.writeable = False
        return out
    # the test is two-sided: "better" also needs a positive mean
    e_p = np.maximum(e_p, -z.mean(axis=1))
    # bootstrap: resample counts [n, n_boot] / n, the same resamples for every experiment
    idx = rng.integers(0, n, size=(n_boot, n))
    flat = (idx + n * np.arange(n_boot)[:, None]).ravel()
    weights = np.bincount(flat, minlength=n * n_boot).reshape(n_boot, n).T / n
    e_ci = np.empty(reps)
    step = max(1, _CHUNK // n_boot)
    for i in range(0, reps, step):
        e_ci[i : i + step] = -_quantile_rows(z[i : i + step] @ weights, level / 2)
    out = np.sort(np.maximum(e_p, e_ci))
    out.flags.writeable = False
    return out


def simulate_power(
    effect: float,
    sd: float,
    n: int,
    *,
    m: int = 1,
    alpha: float = 0.05,
    reps: int = REPS,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> float:
    """Probability that the harness calls a method "better" at true mean paired difference
    ``effect`` and paired SD ``sd`` with ``n`` seeds among ``m`` comparisons; 0 when n < 2."""
    if n < 2 or not math.isfinite(sd):
        return 0.0 if n < 2 else math.nan
    crit = critical_effects(n, m, alpha, reps, n_boot, seed)
    if sd == 0:
        return float(effect > 0 and math.isfinite(crit[-1]))
    return float(np.searchsorted(crit * sd, effect, side="left") / crit.size)


def simulated_mde(
    sd: float,
    n: int,
    *,
    m: int = 1,
    alpha: float = 0.05,
    power: float = 0.8,
    reps: int = REPS,
    n_boot: int = N_BOOT,
    seed: int = 0,
    sides: int = 2,
) -> float:
    """Smallest true effect (units of ``sd``) called "better" with probability ``power`` (by
    the one-sided test alone for ``sides`` 1); +inf when n seeds allow no verdict, NaN when
    n < 2 or sd is NaN."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if no_verdict(n, m, alpha, sides=sides):
        return math.inf
    tabled = (alpha, power, reps, n_boot, seed) == _TABLED
    c = mde_table(sides).get((m, n)) if tabled else None
    if c is None:
        crit = critical_effects(n, m, alpha, reps, n_boot, seed, sides=sides)
        c = float(crit[max(0, math.ceil(power * crit.size) - 1)])
    return math.inf if math.isinf(c) else c * sd


_TABLED = (TABLE_ALPHA, TABLE_POWER, REPS, N_BOOT, 0)


def simulated_seeds_needed(
    sd: float,
    effect: float,
    *,
    m: int = 1,
    alpha: float = 0.05,
    power: float = 0.8,
    max_n: int = 64,
    reps: int = REPS,
    n_boot: int = N_BOOT,
    seed: int = 0,
    sides: int = 2,
) -> int | None:
    """Fewest paired seeds at which `simulated_mde` (``sides``) is at most ``effect`` (doubling
    up from `stats.seeds_for_verdict`, then bisecting); None above ``max_n`` or for non-finite
    inputs."""
    if not (math.isfinite(sd) and math.isfinite(effect)) or effect <= 0:
        return None

    def ok(k: int) -> bool:
        return (
            simulated_mde(
                sd,
                k,
                m=m,
                alpha=alpha,
                power=power,
                reps=reps,
                n_boot=n_boot,
                seed=seed,
                sides=sides,
            )
            <= effect
        )

    lo = stats.seeds_for_verdict(m, alpha, sides=sides)
    if lo is None or lo > max_n:
        return None
    if ok(lo):
        return lo
    hi = lo
    while not ok(hi):  # invariant: ok(lo) is False
        lo, hi = hi, min(max_n, hi * 2)
        if lo == max_n:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class SeedAdvice:
    """What ``n`` paired seeds among ``m`` comparisons allow (``p_floor`` 2/2^n; ``min_seeds``
    for one comparison, ``min_seeds_family`` for the best of m) and the seeds ``effect`` needs
    (``seeds_needed``, simulated; None when more than 64 or not asked)."""

    n: int
    m: int
    p_floor: float
    min_seeds: int | None
    min_seeds_family: int | None
    effect: float | None = None
    seeds_needed: int | None = None


def seed_advice(
    n: int,
    m: int,
    sd: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    effect: float | None = None,
) -> SeedAdvice:
    """`SeedAdvice` at ``n`` paired seeds among ``m`` comparisons; with ``effect`` and an SD
    of paired differences above 0, also `simulated_seeds_needed` (a search of seconds)."""
    asked = effect is not None and math.isfinite(sd) and sd > 0
    return SeedAdvice(
        n,
        m,
        stats.min_pvalue(n),
        stats.seeds_for_verdict(1, alpha),
        stats.seeds_for_verdict(m, alpha),
        effect if asked else None,
        simulated_seeds_needed(sd, effect, m=m, alpha=alpha, power=power) if asked else None,
    )
