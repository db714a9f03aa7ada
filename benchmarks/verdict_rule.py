"""The simulated figures of docs/harness.md about the verdict rules (none is run by a command).

- ``power``: the minimum detectable effect of the fixed-seeds verdict rule
  (`dataflex_rl.harness.statistics.power`, simulated) next to the paired t-test's formula
  (`mde_paired`, the t approximation), and the power the t formula's MDE really has;
- ``sequential``: error rates and seeds to a decision of the anytime-valid rounds loop
  (`dataflex_rl.harness.statistics.sequential`) on simulated experiments (`simulate_sequential`);
- ``sequential --adaptive``: only the runs a 13-arm study saves when a decided comparison gets
  no more seeds (`simulate_adaptive`).

    .venv/bin/python benchmarks/verdict_rule.py power
    .venv/bin/python benchmarks/verdict_rule.py sequential [--adaptive] [--reps 2000]

The t approximation: the smallest true mean difference a paired t-test at level α detects with
probability ``power`` is (t_{1-α/2, n-1} + t_{power, n-1}) · s_d / √n, s_d the SD of the paired
differences; it tends to (1.96 + 0.84) · s_d / √n for many seeds. Reports never use it: they
simulate the rule itself.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as sps

from dataflex_rl.harness.statistics.power import (
    simulate_power,
    simulated_mde,
    simulated_seeds_needed,
)
from dataflex_rl.harness.statistics.sequential import (
    BETTER,
    EQUIVALENT,
    PRIOR_SCALE,
    UNDECIDED,
    WORSE,
    confidence_sequence,
    verdicts_of,
)


def mde_paired(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable mean difference of a paired two-sided *t-test* (the t approximation;
    the harness's own rule is coarser and Holm-corrected: see `simulated_mde`).

    (t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n; NaN when n < 2 or sd is NaN.
    """
    if n < 2 or not math.isfinite(sd):
        return math.nan
    df = n - 1
    return float((sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df)) * sd / math.sqrt(n))


def seeds_needed(
    sd: float, effect: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 10_000
) -> int | None:
    """t approximation (see `simulated_seeds_needed` for the verdict rule's own figure):
    fewest seeds whose t MDE is at most ``effect`` and whose exact sign-flip test can reach
    ``alpha`` (2 / 2^n ≤ alpha); None beyond ``max_n`` or for a NaN ``sd``."""
    if not math.isfinite(sd) or effect <= 0:
        return None
    n = max(2, math.ceil(math.log2(2 / alpha)))
    while n <= max_n:
        if mde_paired(sd, n, alpha, power) <= effect:
            return n
        n += 1 if n < 64 else n // 8
    return None


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
        ``median_seeds``, ``fixed_n`` (`simulated_seeds_needed` for ``effect`` at
        ``power``; None for effect 0 or beyond 64 seeds) and the inputs.
    """
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


#: 13-arm studies (a baseline and 12 comparisons) of `adaptive_table`: name -> effects
STUDIES_13 = {
    "4 better (+3 pts), 2 worse (-3), 6 null": [0.03] * 4 + [-0.03] * 2 + [0.0] * 6,
    "1 better (+5 pts), 11 null": [0.05] + [0.0] * 11,
    "12 null (an A/A study)": [0.0] * 12,
    "12 spread from -6 to +5 pts": list(np.linspace(-0.06, 0.05, 12)),
}


def adaptive_table(reps: int) -> None:
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


def sequential_table(reps: int) -> None:
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


def power_table() -> None:
    print(
        "MDE in units of the paired SD (simulated verdict rule, alpha 0.05, power 0.8) and "
        "the power the t formula's MDE really has"
    )
    print(f"{'n':>3} {'m':>3} {'t-MDE':>7} {'power@t-MDE':>12} {'sim MDE':>8}")
    for m in (1, 3, 12):
        for n in (6, 8, 9, 12, 16, 20, 24):
            t_mde = mde_paired(1.0, n)
            print(
                f"{n:>3} {m:>3} {t_mde:>7.3f} {simulate_power(t_mde, 1.0, n, m=m):>12.2f} "
                f"{simulated_mde(1.0, n, m=m):>8.3f}"
            )
    sd = 0.011  # paper13's pooled SD of paired differences on the average (3 seeds)
    for m in (1, 12):
        print(
            f"sd {sd}, effect 0.01, m {m}: power at 12 seeds "
            f"{simulate_power(0.01, sd, 12, m=m):.2f}, at 20 "
            f"{simulate_power(0.01, sd, 20, m=m):.2f}; seeds needed "
            f"{simulated_seeds_needed(sd, 0.01, m=m)}"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description="Simulated figures of the verdict rules (docs/harness.md)."
    )
    sub = p.add_subparsers(dest="table", required=True)
    sub.add_parser("power", help="MDE of the fixed-seeds rule against the t formula")
    s = sub.add_parser(
        "sequential",
        help="error rates and seeds to a decision of the rounds loop; with --adaptive, the "
        "runs a 13-arm study saves when decided comparisons get no more seeds",
    )
    s.add_argument("--adaptive", action="store_true", help="only the 13-arm runs-saved table")
    s.add_argument("--reps", type=int, default=2000, help="simulated experiments per row")
    args = p.parse_args(argv)
    if args.table == "power":
        power_table()
        return
    if not args.adaptive:
        sequential_table(args.reps)
    adaptive_table(args.reps)


if __name__ == "__main__":
    main()
