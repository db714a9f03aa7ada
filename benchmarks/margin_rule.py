"""The margin verdicts of a finished table, simulated against their stated error rates
(docs/analysis.md, "A margin: non-inferiority and equivalence").

Each simulated experiment compares m methods with a baseline over n paired seeds; every method's
paired differences are Δ + sd · z (z standard normal) and the analysis itself
(`analysis.analyze_summary` with `StatsOptions.margin` M) gives the verdicts:

- at Δ = −M, the boundary of "worse by more than M" and the least favourable null of
  non-inferiority: how often *any* method is called non-inferior (or equivalent) — the
  family-wise false acceptance, at most α under Holm;
- at Δ = +M, the boundary of equivalence: how often any method is called equivalent (≤ α);
- at Δ = 0 with the seeds `Comparison.seeds_for_margin` names for sd and M: how often a method
  is called non-inferior (about the stated power, 0.8).

    .venv/bin/python benchmarks/margin_rule.py [--reps 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

from dataflex_rl.harness.statistics.analysis import (
    NONINFERIOR,
    StatsOptions,
    analyze_summary,
)
from dataflex_rl.harness.statistics.power import simulated_seeds_needed
from dataflex_rl.harness.statistics.sequential import EQUIVALENT

#: (seeds, methods compared) of the table
DESIGNS = ((6, 1), (8, 1), (8, 3), (12, 3))


def margin_verdicts(
    n: int,
    m: int,
    delta: float,
    *,
    margin: float = 1.0,
    sd: float = 1.0,
    reps: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> np.ndarray:
    """[reps, m] margin verdicts of simulated experiments (true difference ``delta`` for every
    method, paired SD ``sd``); the bootstrap's resamples (100) do not enter these verdicts."""
    rng = np.random.default_rng([seed, n, m])
    options = StatsOptions(alpha=alpha, margin=margin, n_boot=100)
    methods = ["baseline", *(f"m{k}" for k in range(m))]
    out = np.empty((reps, m), dtype=object)
    for r in range(reps):
        x = np.vstack([np.zeros(n), delta + sd * rng.standard_normal((m, n))])
        s = analyze_summary("average", "average", methods, x, "baseline", options)
        out[r] = [c.margin_verdict for c in s.comparisons]
    return out


def false_acceptance(n: int, m: int, reps: int, seed: int = 0) -> tuple[float, float]:
    """(P(any method non-inferior or equivalent | Δ = −M), P(any equivalent | Δ = +M))."""
    low = margin_verdicts(n, m, -1.0, reps=reps, seed=seed)
    high = margin_verdicts(n, m, 1.0, reps=reps, seed=seed + 1)
    accepted = np.isin(low, [NONINFERIOR, EQUIVALENT]).any(axis=1).mean()
    return float(accepted), float((high == EQUIVALENT).any(axis=1).mean())


def power_at_planned_seeds(m: int, sd: float, reps: int, seed: int = 0) -> tuple[int, float]:
    """(the seeds the analysis plans for margin 1 at paired SD ``sd`` among m, the fraction
    of methods called non-inferior or equivalent at Δ = 0 with that many seeds)."""
    n = simulated_seeds_needed(sd, 1.0, m=m, sides=1)
    v = margin_verdicts(n, m, 0.0, sd=sd, reps=reps, seed=seed)
    return n, float(np.isin(v, [NONINFERIOR, EQUIVALENT]).mean())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=2000, help="simulated experiments per row")
    args = p.parse_args(argv)
    se = (0.05 * 0.95 / args.reps) ** 0.5
    print(f"alpha 0.05, margin M = 1 paired SD, {args.reps} experiments per row (SE {se:.3f})")
    print(f"{'n':>3} {'m':>3} {'P(non-inferior | Δ=-M)':>24} {'P(equivalent | Δ=+M)':>22}")
    for n, m in DESIGNS:
        ni, eq = false_acceptance(n, m, args.reps)
        print(f"{n:>3} {m:>3} {ni:>24.3f} {eq:>22.3f}")
    print("power at the planned seeds (Δ = 0, margin 1, power 0.8 asked):")
    for m, sd in ((1, 1.0), (3, 1.0), (1, 2.0)):
        n, rate = power_at_planned_seeds(m, sd, args.reps)
        print(f"  m {m}, paired SD {sd:g} x M: {n} seeds -> {rate:.3f} called non-inferior")


if __name__ == "__main__":
    main()
