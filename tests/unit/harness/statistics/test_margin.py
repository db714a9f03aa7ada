"""Non-inferiority and equivalence at a margin: the one-sided sign-flip test, its power
simulation, and the margin verdicts of `analysis` on hand-worked differences."""

import itertools
import math

import numpy as np
import pytest

from dataflex_rl.harness.statistics import power, stats
from dataflex_rl.harness.statistics.analysis import (
    INFERIOR,
    NO_DIFF,
    NONINFERIOR,
    TOO_FEW,
    StatsOptions,
    analyze_summary,
)
from dataflex_rl.harness.statistics.sequential import EQUIVALENT, UNDECIDED


def _loop_pvalue(d, alternative):
    """Oracle: every sign pattern in a plain loop."""
    observed = {"greater": d.mean(), "less": -d.mean(), "two-sided": abs(d.mean())}[alternative]
    hits = 0
    for signs in itertools.product((1.0, -1.0), repeat=d.size):
        m = float(np.dot(signs, d)) / d.size
        stat = {"greater": m, "less": -m, "two-sided": abs(m)}[alternative]
        hits += stat >= observed - 1e-12
    return hits / 2**d.size


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_one_sided_sign_flip_matches_the_loop(alternative):
    rng = np.random.default_rng(3)
    for n in (2, 5, 8):
        d = rng.normal(0.3, 1.0, n)
        got = stats.sign_flip_pvalue(d, alternative=alternative)
        assert got == pytest.approx(_loop_pvalue(d, alternative))


def test_one_sided_floors_and_seeds():
    # one-sided: 1/2^n; a family of m needs m / 2^n <= 0.05: 5 seeds for one (1/32), 6 for
    # three (3/64 = 0.047), where the two-sided verdict needs 6 and 7
    assert stats.pvalue_floor(5, sides=1) == 1 / 32
    assert stats.seeds_for_verdict(1, sides=1) == 5
    assert stats.seeds_for_verdict(3, sides=1) == 6
    assert (stats.seeds_for_verdict(1), stats.seeds_for_verdict(3)) == (6, 7)


@pytest.mark.parametrize("n", [6, 9])
def test_one_sided_critical_effects_are_the_test_on_the_same_noise(n):
    # the simulation's z: default_rng([seed, n, m]).standard_normal((reps, n))
    reps = 300
    crit = power.critical_effects(n, 1, 0.05, reps=reps, sides=1)
    z = np.random.default_rng([0, n, 1]).standard_normal((reps, n))
    for e in (0.2, 0.7, 1.4):
        rejected = [stats.sign_flip_pvalue(e + row, alternative="greater") <= 0.05 for row in z]
        assert np.mean(rejected) == np.mean(crit < e)


def _one(deltas, margin, methods=1):
    """The comparisons of methods whose paired differences against a baseline at 0.5 are
    ``deltas`` (each method the same)."""
    d = np.asarray(deltas)
    x = np.vstack([np.full(d.size, 0.5), *([0.5 + d] * methods)])
    labels = ["base", *(f"m{k}" for k in range(methods))]
    options = StatsOptions(margin=margin, n_boot=200)
    return analyze_summary("average", "average", labels, x, "base", options).comparisons


def test_non_inferior_where_better_is_out_of_reach():
    # d + 0.01 > 0 on every seed: only the identity's mean is as large, p = 1/32; d - 0.01 > 0
    # too, so "below +M" has p = 1 and equivalence fails; two-sided p = 2/32 > 0.05
    (c,) = _one([0.02, 0.03, 0.04, 0.05, 0.06], 0.01)
    assert (c.p_noninferior, c.p_inferior, c.p_equivalent) == (1 / 32, 1.0, 1.0)
    assert c.p_noninferior_holm == 1 / 32
    assert (c.margin_verdict, c.verdict) == (NONINFERIOR, NO_DIFF)


def test_equivalent_and_inferior():
    # |d| < 0.05 on every seed: both one-sided tests at p = 1/32
    (c,) = _one([0.02, -0.01, 0.03, 0.0, 0.01], 0.05)
    assert (c.p_noninferior, c.p_equivalent, c.margin_verdict) == (1 / 32, 1 / 32, EQUIVALENT)
    # d + 0.01 < 0 on every seed: worse by more than the margin
    (c,) = _one([-0.02, -0.03, -0.04, -0.05, -0.06], 0.01)
    assert (c.p_inferior, c.p_noninferior, c.margin_verdict) == (1 / 32, 1.0, INFERIOR)


def test_holm_over_the_family_and_the_seeds_needed():
    # two methods each at p = 1/32: Holm gives 2/32 = 0.0625 > 0.05, undecided; a family of
    # two one-sided tests needs 2/2^n <= 0.05, 6 seeds at the least
    comps = _one([0.02, 0.03, 0.04, 0.05, 0.06], 0.01, methods=2)
    assert [c.p_noninferior_holm for c in comps] == [2 / 32, 2 / 32]
    assert {c.margin_verdict for c in comps} == {UNDECIDED}
    assert all(c.seeds_for_margin >= 6 for c in comps)
    # the planned seeds: the simulated one-sided power at Δ = 0 reaches 0.8 there, not before
    c = comps[0]
    k = c.seeds_for_margin
    mde = [power.simulated_mde(c.sd_diff, n, m=2, sides=1) for n in (k - 1, k)]
    assert mde[1] <= 0.01 < mde[0]


def test_no_margin_no_margin_tests():
    (c,) = _one([0.02, 0.03, 0.04, 0.05, 0.06], 0.0)
    assert math.isnan(c.p_noninferior) and c.margin_verdict == "" and c.seeds_for_margin is None
    (c,) = _one([0.02], 0.01)
    assert c.margin_verdict == TOO_FEW
