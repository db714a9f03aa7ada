"""harness/statistics/power.py: the simulated power of the verdict rule, checked against the real
analysis.

Oracles: a plain loop over sign patterns for the thresholds, and `analysis.analyze_summary` run
on simulated score matrices (the harness's actual code path, null comparisons included).
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.harness.statistics import power, stats
from dataflex_rl.harness.statistics.analysis import BETTER, StatsOptions, analyze_summary


def test_pattern_thresholds_equal_the_hit_loop():
    # a pattern is a hit at effect e iff |Σ s (e + z)| ≥ |Σ (e + z)|; the thresholds say the
    # same for every e with a positive mean
    rng = np.random.default_rng(0)
    n = 5
    z = rng.standard_normal((4, n))
    patterns = stats.sign_patterns(n)
    thr = power._pattern_thresholds(z, patterns)
    for r, e in itertools.product(range(4), np.linspace(-0.5, 3.0, 15)):
        d = e + z[r]
        if d.sum() <= 0:
            continue
        for j, s in enumerate(patterns):
            hit = abs(float(s @ d)) >= abs(float(d.sum())) - 1e-12
            assert hit == (thr[r, j] >= e), (r, e, j)


@pytest.mark.parametrize(
    "n, m, effect, sd", [(6, 1, 0.02, 0.015), (8, 1, 0.015, 0.02), (10, 4, 0.03, 0.02)]
)
def test_simulated_power_matches_the_real_analysis(n, m, effect, sd):
    # brute force: 400 experiments through analyze_summary with m - 1 null methods; the method
    # of interest is "better" as often as simulate_power says, within 0.05 (binomial SE <= 0.025)
    reps, n_boot = 400, 2000
    rng = np.random.default_rng(123)
    opts = StatsOptions(n_boot=n_boot)
    methods = ["baseline", "target"] + [f"null{i}" for i in range(m - 1)]
    wins = 0
    for r in range(reps):
        base = 0.5 + 0.03 * rng.standard_normal(n)
        mat = np.vstack(
            [base, base + effect + sd * rng.standard_normal(n)]
            + [base + sd * rng.standard_normal(n) for _ in range(m - 1)]
        )
        s = analyze_summary(f"r{r}", "average", methods, mat, "baseline", opts)
        wins += s.comparisons[0].verdict == BETTER
    brute = wins / reps
    sim = power.simulate_power(effect, sd, n, m=m, n_boot=n_boot)
    assert sim == pytest.approx(brute, abs=0.05)
    assert 0.15 < sim < 0.95  # a setting where the rule is neither hopeless nor certain


def test_no_verdict_below_the_exact_floor():
    # 5 seeds: smallest p 2/32 = 0.0625 > 0.05; 8 seeds among 12: 2/256 = 0.0078 > 0.05/12
    assert math.isinf(power.simulated_mde(1.0, 5))
    assert power.simulate_power(100.0, 1.0, 5) == 0.0
    assert math.isinf(power.simulated_mde(1.0, 8, m=12))
    assert math.isfinite(power.simulated_mde(1.0, 6))
    assert math.isfinite(power.simulated_mde(1.0, 9, m=12))  # 2/512 = 0.0039 <= 0.00417
    assert stats.seeds_for_verdict(1) == 6 and stats.seeds_for_verdict(12) == 9
    assert math.isnan(power.simulated_mde(1.0, 1))


def test_mde_is_the_power_quantile():
    mde = power.simulated_mde(0.02, 10, m=3, power=0.8)
    assert power.simulate_power(mde * (1 + 1e-9), 0.02, 10, m=3) >= 0.8
    assert power.simulate_power(mde * (1 - 1e-9), 0.02, 10, m=3) < 0.8


@settings(max_examples=25, deadline=None)
@given(e1=st.floats(0, 3), e2=st.floats(0, 3), scale=st.floats(0.01, 10))
def test_power_is_monotone_and_scale_free(e1, e2, scale):
    lo, hi = sorted((e1, e2))
    assert power.simulate_power(lo, 1.0, 7) <= power.simulate_power(hi, 1.0, 7)
    assert power.simulate_power(e1 * scale, scale, 7) == power.simulate_power(e1, 1.0, 7)


def test_seeds_needed_is_the_first_n_whose_mde_is_small_enough():
    sd, effect = 0.011, 0.01
    k = power.simulated_seeds_needed(sd, effect)
    assert k is not None
    assert power.simulated_mde(sd, k) <= effect < power.simulated_mde(sd, k - 1)
    assert power.simulated_seeds_needed(sd, effect, max_n=k - 1) is None
    assert power.simulated_seeds_needed(sd, 0.0) is None
    assert power.simulated_seeds_needed(1e-6, 0.01) == 6  # tiny noise: only the floor
