"""Anytime-valid comparison: add seeds in rounds, stop when every comparison is decided.

The rule is a confidence sequence for the mean paired difference, from the *safe t-test*: the
Bayes factor of a normal mean with unknown variance, with the right-Haar prior 1/σ on σ under
both hypotheses and a normal prior δ = μ/σ ~ N(0, τ²) on the standardized effect. Because it
is invariant to the scale of the data, it is an e-process under the null (a nonnegative
supermartingale on the scale-invariant statistics), so by Ville's inequality
P(it ever exceeds 1/α) ≤ α, at every stopping time, however the stopping depends on the data
(Pérez-Ortiz, Lardy, de Heide & Grünwald, "E-statistics, group invariance and anytime-valid
testing", Ann. Statist. 2024; Lai, Ann. Statist. 1976, for the mixture form).

Closed form (own derivation, docs/harness.md): for the differences x_1..x_n shifted by a
candidate mean μ₀, with Q = Σ(x − μ₀)², S = Σ(x − μ₀), r = S²/(nQ) = t²/(n − 1 + t²),

    E_n(μ₀) = (1 + nτ²)^(−1/2) · (1 − r · nτ²/(1 + nτ²))^(−n/2).

E_n grows with |x̄ − μ₀|, so {μ₀ : E_n(μ₀) < m/α} is the interval x̄ ± s · sqrt((n−1) r*/((1 − r*) n))
with r* = (1 − ((α/m)² / (1 + nτ²))^(1/n)) · (1 + nτ²)/(nτ²); no finite interval while r* ≥ 1
(E_n can reach at most (1 + nτ²)^((n−1)/2): with τ = 1 and α = 0.05 the first bounded interval
comes at n = 5). The m comparisons share α by Bonferroni (each at α/m), the interval is clipped
to [−bound, bound], and the running intersection over n is kept (valid: all intervals cover at
once with probability ≥ 1 − α).

Verdicts: "better" when the interval lies above 0, "worse" below 0, "equivalent" inside
[−margin, margin], else "undecided". Valid under normal paired differences (final accuracies
averaged over hundreds of problems are close to normal); the choice against bounded-data
betting sequences, and the measured seeds-to-decision, are in docs/harness.md.
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
    """One comparison after n paired seeds.

    Args:
        verdict: "better", "worse", "equivalent" (inside ±margin) or "undecided".
        n: paired differences seen.
        low, high: the anytime-valid confidence sequence at n (running intersection), at level
            1 − α/m; ±bound while no finite interval is possible.
        mean: mean paired difference.
        alpha_each: the level α/m each comparison is tested at.
    """

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
    """Half-width of the safe-t confidence interval at each n (inf where none is finite).

    Args:
        n: [...] sample sizes (≥ 2).
        sd: [...] sample SDs (ddof 1) of the differences, broadcast with ``n``.
        alpha_each: level of this comparison (α/m).
        prior_scale: τ, the prior SD of the standardized effect.
    """
    n = np.asarray(n, dtype=np.float64)
    g = n * prior_scale**2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = (1.0 - (alpha_each**2 / (1.0 + g)) ** (1.0 / n)) * (1.0 + g) / g
        hw = np.asarray(sd) * np.sqrt((n - 1.0) * r / ((1.0 - r) * n))
    return np.where((r < 1.0) & (n >= 2), hw, np.inf)


def confidence_sequence(
    x: np.ndarray, alpha_each: float, bound: float = 1.0, prior_scale: float = PRIOR_SCALE
) -> tuple[np.ndarray, np.ndarray]:
    """Running-intersection confidence sequence over the leading axis.

    Args:
        x: [N, ...] paired differences in the order seeds were added.
        alpha_each: level of each comparison.
        bound: differences lie in [−bound, bound]; so does the interval.
        prior_scale: τ.

    Returns:
        ``(low, high)``, each [N, ...]: the interval after 1, 2, …, N differences.
    """
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
    return np.where(
        low > 0,
        BETTER,
        np.where(
            high < 0, WORSE, np.where((low >= -margin) & (high <= margin), EQUIVALENT, UNDECIDED)
        ),
    )


def sequential_verdicts(
    diffs: Mapping[str, np.ndarray],
    *,
    alpha: float = 0.05,
    margin: float,
    bound: float = 1.0,
    prior_scale: float = PRIOR_SCALE,
) -> dict[str, SequentialResult]:
    """Anytime-valid verdicts of m comparisons (one family) after the seeds seen so far.

    Args:
        diffs: label -> [n] paired differences (method − baseline) in the order seeds were
            added; the lengths may differ.
        alpha: probability that any verdict of the family is wrong, at any stopping time.
        margin: "equivalent" means the interval lies inside [−margin, margin].
        bound: the differences lie in [−bound, bound] (1 for accuracies).
        prior_scale: τ.

    Returns:
        label -> `SequentialResult`.
    """
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
            hw = (
                float(half_widths(np.array(d.size), np.array(d.std(ddof=1)), a, prior_scale))
                if d.size > 1
                else math.inf
            )
            lo, hi = max(-bound, d.mean() - hw), min(bound, d.mean() + hw)
        verdict = str(verdicts_of(np.array(lo), np.array(hi), margin))
        out[label] = SequentialResult(verdict, int(d.size), lo, hi, float(d.mean()), a)
    return out


def _simulated_looks(
    effects, sd, m, alpha, margin, round_size, max_seeds, min_seeds, reps, seed, prior_scale
) -> tuple[np.ndarray, np.ndarray]:
    """The rounds loop's looks on simulated experiments: ``looks`` [L] (after ``min_seeds``
    seeds, every ``round_size`` more, and at ``max_seeds``) and the verdicts [L, reps, m] of m
    comparisons with true paired means ``effects`` (a number or [m]) and SD ``sd`` (normal),
    from the confidence sequence at α/m."""
    rng = np.random.default_rng([seed, m, max_seeds])
    x = effects + sd * rng.standard_normal((max_seeds, reps, m))
    low, high = confidence_sequence(x, alpha / m, 1.0, prior_scale)
    looks = np.arange(min_seeds, max_seeds + 1, round_size)
    if looks[-1] != max_seeds:
        looks = np.append(looks, max_seeds)
    return looks, verdicts_of(low[looks - 1], high[looks - 1], margin)


def simulate_sequential(
    effect: float,
    sd: float,
    *,
    m: int = 1,
    alpha: float = 0.05,
    margin: float,
    round_size: int = 2,
    max_seeds: int = 24,
    min_seeds: int = 3,
    reps: int = 2000,
    seed: int = 0,
    power: float = 0.8,
    prior_scale: float = PRIOR_SCALE,
) -> dict:
    """Simulated experiments of the rounds loop: m comparisons, each with true paired mean
    ``effect`` and SD ``sd`` (normal), looked at after ``min_seeds`` seeds and every
    ``round_size`` more, stopped when all are decided or at ``max_seeds``.

    Returns:
        ``error_rate`` (an experiment with any wrong verdict: the wrong sign, better/worse at
        effect 0, or equivalent while |effect| > margin), ``decided_rate`` (all decided when
        stopped), ``better_rate`` (comparisons called better), ``mean_seeds``,
        ``median_seeds``, ``fixed_n`` (`power.simulated_seeds_needed` for ``effect`` at
        ``power``; None for effect 0 or beyond 64 seeds) and the inputs.
    """
    from dataflex_rl.harness.statistics.power import simulated_seeds_needed

    looks, v = _simulated_looks(
        effect, sd, m, alpha, margin, round_size, max_seeds, min_seeds, reps, seed, prior_scale
    )  # [L], [L, reps, m]
    done = np.all(v != UNDECIDED, axis=2)  # [L, reps]
    stop = np.where(done.any(axis=0), done.argmax(axis=0), len(looks) - 1)
    final = v[stop, np.arange(reps)]  # [reps, m]
    if effect > 0:
        wrong = (final == WORSE) | ((final == EQUIVALENT) & (abs(effect) > margin))
    elif effect < 0:
        wrong = (final == BETTER) | ((final == EQUIVALENT) & (abs(effect) > margin))
    else:
        wrong = (final == BETTER) | (final == WORSE)
    seeds = looks[stop]
    return {
        "effect": effect,
        "sd": sd,
        "m": m,
        "alpha": alpha,
        "margin": margin,
        "reps": reps,
        "round_size": round_size,
        "min_seeds": min_seeds,
        "max_seeds": max_seeds,
        "error_rate": float(wrong.any(axis=1).mean()),
        "decided_rate": float(done[stop, np.arange(reps)].mean()),
        "better_rate": float((final == BETTER).mean()),
        "mean_seeds": float(seeds.mean()),
        "median_seeds": float(np.median(seeds)),
        "fixed_n": simulated_seeds_needed(sd, effect, m=m, alpha=alpha, power=power)
        if effect > 0
        else None,
    }


def simulate_adaptive(
    effects,
    sd: float,
    *,
    alpha: float = 0.05,
    margin: float,
    round_size: int = 2,
    max_seeds: int = 24,
    min_seeds: int = 3,
    reps: int = 2000,
    seed: int = 0,
    prior_scale: float = PRIOR_SCALE,
) -> dict:
    """Runs spent by the rounds loop when a decided comparison gets no more seeds (adaptive)
    against every round running every arm (all arms), on the same simulated experiments:
    ``len(effects)`` comparisons against one baseline, comparison j with true paired mean
    ``effects[j]`` and SD ``sd`` (normal), looked at after ``min_seeds`` seeds and every
    ``round_size`` more, stopped when all are decided or at ``max_seeds``.

    Returns:
        ``runs_all_arms`` and ``runs_adaptive`` (mean over experiments; the baseline counts as
        an arm), ``saved_fraction`` (mean of 1 − adaptive/all arms), ``mean_seeds`` (mean
        seeds at the stop), ``arm_seeds`` [m] (mean seeds each comparison ran),
        ``arm_decided`` [m] (fraction decided), ``changed`` (fraction of comparisons whose
        verdict at the stop, had they kept running, differs from the one they stopped with:
        only equivalent turning better or worse, never a reversal) and the inputs.
    """
    effects = np.asarray(effects, dtype=np.float64)
    m = effects.size
    looks, v = _simulated_looks(
        effects, sd, m, alpha, margin, round_size, max_seeds, min_seeds, reps, seed, prior_scale
    )  # [L], [L, reps, m]
    decided = v != UNDECIDED
    first = np.where(decided.any(axis=0), decided.argmax(axis=0), len(looks) - 1)  # [reps, m]
    stop = first.max(axis=1)  # [reps]: the loop stops once every comparison is decided
    rows = np.arange(reps)[:, None]
    frozen, kept_running = v[first, rows, np.arange(m)], v[stop[:, None], rows, np.arange(m)]
    all_arms = (m + 1) * looks[stop]
    adaptive = looks[stop] + looks[first].sum(axis=1)
    return {
        "effects": effects.tolist(),
        "sd": sd,
        "alpha": alpha,
        "margin": margin,
        "reps": reps,
        "round_size": round_size,
        "min_seeds": min_seeds,
        "max_seeds": max_seeds,
        "runs_all_arms": float(all_arms.mean()),
        "runs_adaptive": float(adaptive.mean()),
        "saved_fraction": float((1 - adaptive / all_arms).mean()),
        "mean_seeds": float(looks[stop].mean()),
        "arm_seeds": looks[first].mean(axis=0).tolist(),
        "arm_decided": decided[first, rows, np.arange(m)].mean(axis=0).tolist(),
        "changed": float((frozen != kept_running).mean()),
    }


#: 13-arm studies (a baseline and 12 comparisons) of `_adaptive_section`: name -> effects
STUDIES_13 = {
    "4 better (+3 pts), 2 worse (-3), 6 null": [0.03] * 4 + [-0.03] * 2 + [0.0] * 6,
    "1 better (+5 pts), 11 null": [0.05] + [0.0] * 11,
    "12 null (an A/A study)": [0.0] * 12,
    "12 spread from -6 to +5 pts": list(np.linspace(-0.06, 0.05, 12)),
}


def _adaptive_section(reps: int) -> None:
    sd, margin = 0.011, 0.02
    print(
        f"\n13-arm study (baseline + 12 comparisons), paired SD {sd * 100:g} points (paper13's "
        f"pooled SD), margin {margin * 100:g} points, rounds of 2 from 3 seeds, at most 24, "
        f"alpha 0.05, {reps} experiments"
    )
    print(
        f"{'study':<40} {'seeds':>5} {'runs all arms':>13} {'adaptive':>8} {'saved':>6} "
        f"{'changed':>7}  seeds per comparison"
    )
    for name, effects in STUDIES_13.items():
        r = simulate_adaptive(effects, sd, margin=margin, reps=reps)
        per_arm = " ".join(f"{s:.0f}" for s in r["arm_seeds"])
        print(
            f"{name:<40} {r['mean_seeds']:>5.1f} {r['runs_all_arms']:>13.1f} "
            f"{r['runs_adaptive']:>8.1f} {r['saved_fraction']:>6.0%} {r['changed']:>7.3f}  "
            f"{per_arm}"
        )


# python -m dataflex_rl.harness.statistics.sequential: figures of docs/harness.md
def _main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m dataflex_rl.harness.statistics.sequential",
        description="Simulated figures of the anytime-valid rule (docs/harness.md): error "
        "rates and seeds to a decision; with --adaptive, the runs a 13-arm study saves when "
        "decided comparisons get no more seeds.",
    )
    p.add_argument("--adaptive", action="store_true", help="only the 13-arm runs-saved section")
    p.add_argument("--reps", type=int, default=2000, help="simulated experiments per row")
    args = p.parse_args(argv)
    if not args.adaptive:
        _verdicts_section(args.reps)
    _adaptive_section(args.reps)


def _verdicts_section(reps: int) -> None:
    print(f"rounds of 2 seeds from 3, at most 24, alpha 0.05, margin 0.01, {reps} experiments")
    print(
        f"{'sd':>5} {'effect':>6} {'m':>3} {'error':>6} {'better':>6} {'decided':>7} "
        f"{'mean n':>6} {'median':>6} {'fixed n (power 0.8)':>19}"
    )
    for sd, effect, m in [
        (0.02, 0.0, 1),
        (0.02, 0.0, 3),
        (0.02, 0.0, 12),
        (0.01, 0.02, 1),
        (0.02, 0.02, 1),
        (0.02, 0.05, 3),
        (0.03, 0.05, 3),
        (0.02, 0.05, 12),
        (0.03, 0.10, 12),
        (0.01, 0.02, 12),
    ]:
        r = simulate_sequential(effect, sd, m=m, margin=0.01, reps=reps)
        print(
            f"{sd:>5} {effect:>6} {m:>3} {r['error_rate']:>6.3f} {r['better_rate']:>6.2f} "
            f"{r['decided_rate']:>7.2f} {r['mean_seeds']:>6.1f} {r['median_seeds']:>6.0f} "
            f"{str(r['fixed_n']):>19}"
        )


if __name__ == "__main__":
    _main()
