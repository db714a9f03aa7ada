"""harness/statistics/stats.py: hand-worked cases, scipy as an oracle, plain loops as oracles."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from dataflex_rl.harness.statistics import stats


# ---------------------------------------------------------------- t interval
def test_t_interval_hand_case():
    # [1, 2, 3]: mean 2, s = 1, s/sqrt(3) = 0.57735; t(0.975, 2) = 4.302653 -> half 2.484138
    mean, lo, hi = stats.t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert lo == pytest.approx(2 - 2.484138, abs=1e-6)
    assert hi == pytest.approx(2 + 2.484138, abs=1e-6)


def test_t_interval_matches_scipy():
    x = np.random.default_rng(0).normal(size=7)
    lo, hi = sps.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    _, a, b = stats.t_interval(x, alpha=0.1)
    assert (a, b) == pytest.approx((lo, hi))


def test_t_interval_one_value_has_no_bounds():
    mean, lo, hi = stats.t_interval([0.5])
    assert mean == 0.5 and math.isnan(lo) and math.isnan(hi)


# ---------------------------------------------------------------- sign-flip test
@pytest.mark.parametrize(
    "diffs, expected",
    [
        # sums over the 8 sign patterns of [1, 2, 3]: ±6, ±4, ±2, 0, 0; |sum| >= 6 twice -> 2/8
        ([1.0, 2.0, 3.0], 0.25),
        # [1, -1, 2], observed sum 2: pattern sums 4, 2, 2, 0, 0, -2, -2, -4 -> 6 of 8 have |s| >= 2
        ([1.0, -1.0, 2.0], 0.75),
        ([0.0, 0.0, 0.0], 1.0),
        # 6 positive differences: only the identity and the all-flipped pattern are as extreme
        ([0.1, 0.2, 0.1, 0.3, 0.2, 0.1], 2 / 64),
    ],
)
def test_sign_flip_hand_cases(diffs, expected):
    assert stats.sign_flip_pvalue(diffs) == pytest.approx(expected)


def _sign_flip_loop(d):
    """Oracle: enumerate the sign patterns one by one."""
    obs = abs(sum(d) / len(d))
    hits = sum(
        abs(sum(s * x for s, x in zip(signs, d)) / len(d)) >= obs - 1e-12
        for signs in itertools.product([1, -1], repeat=len(d))
    )
    return hits / 2 ** len(d)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_sign_flip_exact_equals_loop(n):
    d = np.random.default_rng(n).normal(0.1, 1.0, size=n)
    assert stats.sign_flip_pvalue(d) == pytest.approx(_sign_flip_loop(list(d)))


def test_sign_flip_exact_matches_scipy_permutation_test():
    d = np.random.default_rng(3).normal(0.3, 1.0, size=10)
    res = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    assert stats.sign_flip_pvalue(d) == pytest.approx(res.pvalue)


def test_sign_flip_random_mode_agrees_with_exact():
    d = np.random.default_rng(5).normal(0.4, 1.0, size=12)
    exact = stats.sign_flip_pvalue(d)
    approx = stats.sign_flip_pvalue(d, np.random.default_rng(0), n_perm=20_000, exact_max_n=0)
    assert approx == pytest.approx(exact, abs=0.01)  # MC SE <= 0.0036


def test_sign_flip_large_n_needs_rng_and_is_deterministic():
    d = np.random.default_rng(1).normal(size=20)
    with pytest.raises(ValueError, match="needs an rng"):
        stats.sign_flip_pvalue(d)
    p1 = stats.sign_flip_pvalue(d, np.random.default_rng(7))
    p2 = stats.sign_flip_pvalue(d, np.random.default_rng(7))
    assert p1 == p2 and 0 < p1 <= 1


def test_min_pvalue():
    assert stats.min_pvalue(3) == 0.25
    assert stats.min_pvalue(5) == 0.0625  # 5 seeds can never reach p < 0.05
    assert stats.min_pvalue(6) == pytest.approx(0.03125)


def test_pvalue_floor_is_reached_by_the_test():
    # 3 pairs: the exact two-sided floor 2/2^3 = 0.25, reached by three positive deltas
    assert stats.pvalue_floor(3) == 0.25
    assert stats.sign_flip_pvalue([0.1, 0.2, 0.3]) == 0.25
    assert stats.pvalue_floor(1) == 1.0
    # random flips above 16 pairs: p = (1 + hits) / (1 + n_perm) >= 1 / 101
    assert stats.pvalue_floor(20, n_perm=100) == pytest.approx(1 / 101)


def test_holm_floors_hand_cases():
    # equal floors: Holm's first step, m * f (3 methods at 6 seeds: 3 * 2/64 = 0.09375)
    assert stats.holm_floors([2 / 64] * 3) == pytest.approx([0.09375] * 3)
    # 3 seeds beside 10 seeds (m = 2): the 10-seed one ranks first, 2 * 2/1024; the 3-seed
    # one at best ranks second: max(2 * 2/1024, 1 * 0.25) = 0.25
    assert stats.holm_floors([0.25, 2 / 1024]) == pytest.approx([0.25, 4 / 1024])


def test_holm_floors_match_the_best_case_by_enumeration():
    # oracle: every other hypothesis either at its floor or at 1 (behind); the smallest
    # adjusted p of hypothesis i that Holm itself gives over those choices
    rng = np.random.default_rng(3)
    for _ in range(30):
        f = 2.0 / 2.0 ** rng.integers(2, 9, size=rng.integers(1, 5))
        m = f.size
        want = []
        for i in range(m):
            best = math.inf
            for ahead in itertools.product([True, False], repeat=m):
                p = np.where(ahead, f, 1.0)
                p[i] = f[i]
                best = min(best, stats.holm(p)[0][i])
            want.append(best)
        assert stats.holm_floors(f) == pytest.approx(want), f


def test_sign_patterns_are_all_distinct():
    s = stats.sign_patterns(4)
    assert s.shape == (16, 4) and len({tuple(r) for r in s}) == 16


# ---------------------------------------------------------------- Holm
def test_holm_hand_case():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06)
    adj, level = stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(level, [0.05 / 3, 0.05 / 1, 0.05 / 2, 0.05 / 4])


def test_holm_ties_share_the_strictest_level_and_nan_is_not_tested():
    adj, level = stats.holm([0.02, 0.02, 0.5])
    np.testing.assert_allclose(adj, [0.06, 0.06, 0.5])
    np.testing.assert_allclose(level, [0.05 / 3, 0.05 / 3, 0.05])
    adj, level = stats.holm([math.nan, 0.01, 0.04])  # m = 2
    assert math.isnan(adj[0]) and math.isnan(level[0])
    np.testing.assert_allclose(adj[1:], [0.02, 0.04])


def test_holm_is_monotone_and_capped():
    p = np.random.default_rng(0).uniform(size=30)
    adj, _ = stats.holm(p)
    order = np.argsort(p)
    assert np.all(np.diff(adj[order]) >= 0) and np.all(adj <= 1) and np.all(adj >= p)


def test_holm_equals_the_step_down_loop():
    # scipy has no Holm; the oracle is a loop over the step-down definition
    p = np.random.default_rng(2).uniform(0, 0.1, size=8)
    adj, _ = stats.holm(p)
    order = np.argsort(p)
    m = len(p)
    expected = np.empty(m)
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, (m - i) * p[j])
        expected[j] = min(1.0, running)
    np.testing.assert_allclose(adj, expected)


# ---------------------------------------------------------------- bootstrap
def test_bootstrap_two_values_hand_case():
    # [0, 1]: resampled means are 0 (1/4), 0.5 (1/2), 1 (1/4); the 95% interval spans [0, 1]
    lo, hi = stats.bootstrap_interval([0.0, 1.0], np.random.default_rng(0))
    assert (lo, hi) == (0.0, 1.0)


def test_bootstrap_constant_differences_give_a_point():
    lo, hi = stats.bootstrap_interval([0.02] * 5, np.random.default_rng(0))
    assert lo == pytest.approx(0.02) and hi == pytest.approx(0.02)


def test_bootstrap_spread_matches_theory_and_levels_nest():
    d = np.random.default_rng(4).normal(size=12)
    means = stats.bootstrap_means(d, np.random.default_rng(1), n_boot=40_000)
    # bootstrap variance of the mean: population variance (ddof 0) / n
    assert means.std() == pytest.approx(d.std() / math.sqrt(d.size), rel=0.03)
    ci = stats.bootstrap_interval(d, np.random.default_rng(1), alpha=[0.05, 0.01])
    assert ci.shape == (2, 2)
    assert ci[1, 0] <= ci[0, 0] <= d.mean() <= ci[0, 1] <= ci[1, 1]


def test_bootstrap_is_deterministic_for_a_seed():
    d = [0.1, -0.2, 0.3, 0.05]
    a = stats.bootstrap_interval(d, np.random.default_rng(9))
    b = stats.bootstrap_interval(d, np.random.default_rng(9))
    assert tuple(a) == tuple(b)


# ---------------------------------------------------------------- Kendall tau and ranks
def test_kendall_tau_hand_case():
    # pairs (1,2) and (1,3) concordant, (2,3) discordant: (2 - 1) / 3
    assert stats.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert stats.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(stats.kendall_tau([1, 1, 1], [1, 2, 3]))


@pytest.mark.parametrize("seed", range(5))
def test_kendall_tau_matches_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, size=9).astype(float)
    y = rng.integers(0, 4, size=9).astype(float)
    assert stats.kendall_tau(x, y) == pytest.approx(sps.kendalltau(x, y).statistic)


def test_ranks():
    np.testing.assert_array_equal(stats.ranks([0.5, 0.7, 0.5, math.nan]), [2, 1, 2, 4])


def test_rounding_differences_are_ties():
    a, b = (0.5 + 0.1) / 2, (0.4 + 0.2) / 2  # 0.3 and 0.30000000000000004
    assert a != b
    np.testing.assert_array_equal(stats.ranks([a, b]), [1, 1])
    assert stats.kendall_tau([a, b, 0.1], [1, 2, 0]) == pytest.approx(
        sps.kendalltau([0, 0, -1], [1, 2, 0]).statistic
    )


def test_near_ties_and_infinities_keep_the_pairwise_definition():
    # values pinned from the pairwise sign-matrix code scipy replaced (identical on 2,000
    # random cases with near-ties, infinities and NaN): 0.3 and 0.3 + 1e-14 tie; -inf and NaN
    # (ranked last) share the last rank
    e = 1e-14
    assert stats.kendall_tau([0.3, 0.3 + e, 0.1, 0.9, math.inf], [1, 2, 2, 3, 0]) == pytest.approx(
        -2 / 9
    )
    assert stats.kendall_tau([0.6, 0.2, 0.2 + e, 0.5], [0.1, 0.4, 0.3, 0.3]) == pytest.approx(-0.8)
    np.testing.assert_array_equal(
        stats.ranks([0.3, 0.3 + e, math.nan, math.inf, -math.inf, 0.1]), [2, 2, 5, 1, 5, 4]
    )
    assert stats.ranks([]).tolist() == [] and math.isnan(stats.kendall_tau([1.0], [2.0]))
