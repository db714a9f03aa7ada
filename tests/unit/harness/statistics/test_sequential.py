"""harness/statistics/sequential.py: the safe-t confidence sequence, its verdicts and its error
rate."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from dataflex_rl.harness.statistics import sequential as sq


def _bayes_factor_by_integration(x, tau):
    """Oracle: the Bayes factor with 1/σ on σ and δ ~ N(0, τ²), by numerical integration."""

    def lik(delta, sigma):
        return np.prod(sps.norm.pdf(x, delta * sigma, sigma)) / sigma

    alt = integrate.dblquad(
        lambda d, s: lik(d, s) * sps.norm.pdf(d, 0, tau), 1e-3, 20, -30, 30, epsabs=1e-14
    )[0]
    null = integrate.quad(lambda s: lik(0.0, s), 1e-3, 20, epsabs=1e-14)[0]
    return alt / null


@pytest.mark.parametrize("x, tau", [([0.3, 1.1, 0.8, 0.5], 1.0), ([0.2, -0.4, 0.1], 2.0)])
def test_e_value_closed_form_equals_the_integral(x, tau):
    assert sq.e_value(x, 0.0, tau) == pytest.approx(
        _bayes_factor_by_integration(np.array(x), tau), rel=1e-3
    )


def test_interval_ends_are_where_the_e_value_reaches_one_over_alpha():
    x = np.random.default_rng(0).normal(0.05, 0.02, size=9)
    low, high = sq.confidence_sequence(x, 0.05, bound=1.0)
    # running intersection at n = 9 is at most the n = 9 interval; find the latter directly
    hw = sq.half_widths(np.array(9), np.array(x.std(ddof=1)), 0.05)
    for end in (x.mean() - hw, x.mean() + hw):
        assert sq.e_value(x, end) == pytest.approx(20.0, rel=1e-9)
    assert sq.e_value(x, x.mean()) < 20 and low[-1] >= x.mean() - hw - 1e-15


def test_no_finite_interval_before_the_e_value_can_reach_one_over_alpha():
    # max E_n = (1 + n tau^2)^((n - 1)/2); tau = 2, alpha = 0.05: n = 3 gives 13 < 20, n = 4
    # gives 17^1.5 = 70 >= 20
    hw = sq.half_widths(np.arange(1, 6), np.ones(5), 0.05, prior_scale=2.0)
    assert np.all(np.isinf(hw[:3])) and np.all(np.isfinite(hw[3:]))


def test_vectorized_sequence_equals_the_loop_over_prefixes():
    x = np.random.default_rng(1).normal(0.02, 0.03, size=(12, 3))
    low, high = sq.confidence_sequence(x, 0.05 / 3, bound=1.0)
    for j, label in enumerate("abc"):
        for n in range(1, 13):
            r = sq.sequential_verdicts({"a": x[:n, 0], "b": x[:n, 1], "c": x[:n, 2]}, margin=0.01)[
                label
            ]
            assert (r.low, r.high) == pytest.approx((low[n - 1, j], high[n - 1, j]))
            assert r.n == n and r.alpha_each == pytest.approx(0.05 / 3)


def test_verdicts_and_bounds():
    rng = np.random.default_rng(2)
    res = sq.sequential_verdicts(
        {
            "up": 0.06 + 0.01 * rng.standard_normal(10),
            "down": -0.06 + 0.01 * rng.standard_normal(10),
            "same": 0.002 * rng.standard_normal(10),
            "few": np.array([0.1, 0.2]),
            "none": np.array([]),
        },
        alpha=0.05,
        margin=0.01,
    )
    assert res["up"].verdict == "better" and res["down"].verdict == "worse"
    assert res["same"].verdict == "equivalent"
    assert -0.01 <= res["same"].low <= res["same"].high <= 0.01
    assert res["few"].verdict == "undecided" and (res["few"].low, res["few"].high) == (-1, 1)
    assert res["none"].n == 0 and math.isnan(res["none"].mean)
    with pytest.raises(ValueError, match="finite 1-d"):
        sq.sequential_verdicts({"x": np.array([np.nan, 1.0])}, margin=0.01)


@pytest.mark.parametrize("m, round_size, min_seeds", [(1, 1, 2), (3, 2, 3), (12, 2, 3)])
def test_a_over_a_false_positives_at_most_alpha(m, round_size, min_seeds):
    # 2,000 simulated A/A experiments, looked at after every round up to 24 seeds: the share
    # with any "better"/"worse" stays below alpha = 0.05 (measured ~0.02; binomial SE 0.005)
    r = sq.simulate_sequential(
        0.0,
        0.02,
        m=m,
        alpha=0.05,
        margin=0.01,
        round_size=round_size,
        min_seeds=min_seeds,
        max_seeds=24,
        reps=2000,
    )
    assert r["reps"] >= 1000 and r["error_rate"] <= 0.05


def test_a_real_effect_is_found_early():
    # 5 points at paired SD 2 among 3 comparisons: found in ~8 seeds (measured 8.2) with
    # power ~1; the fixed design needs 7 seeds for power 0.8 (docs/harness.md compares them)
    r = sq.simulate_sequential(0.05, 0.02, m=3, margin=0.01, max_seeds=24, reps=1000)
    assert r["better_rate"] > 0.95 and r["error_rate"] <= 0.05
    assert r["mean_seeds"] < 10 and r["fixed_n"] == 7


def _loop_runs(x: np.ndarray, looks: list[int], alpha: float, margin: float) -> tuple[int, int]:
    """Plain-loop oracle of one simulated experiment x [N, m]: the rounds loop with
    `sequential_verdicts`, a comparison frozen once decided; (runs adaptive, runs all arms)."""
    m = x.shape[1]
    decided_at: dict[int, int] = {}
    for n in looks:
        res = sq.sequential_verdicts({j: x[:n, j] for j in range(m)}, alpha=alpha, margin=margin)
        for j in range(m):
            if j not in decided_at and res[j].verdict != sq.UNDECIDED:
                decided_at[j] = n
        if len(decided_at) == m:
            break
    return n + sum(decided_at.get(j, n) for j in range(m)), (m + 1) * n


def test_adaptive_runs_equal_the_plain_loop():
    effects, sd, reps = [0.04, -0.03, 0.0], 0.02, 40
    r = sq.simulate_adaptive(effects, sd, margin=0.01, reps=reps, max_seeds=12, min_seeds=3)
    rng = np.random.default_rng([0, 3, 12])  # the simulation's own stream
    x = np.asarray(effects) + sd * rng.standard_normal((12, reps, 3))
    runs = [_loop_runs(x[:, i], [3, 5, 7, 9, 11, 12], 0.05, 0.01) for i in range(reps)]
    assert r["runs_adaptive"] == pytest.approx(np.mean([a for a, _ in runs]))
    assert r["runs_all_arms"] == pytest.approx(np.mean([b for _, b in runs]))
    assert r["runs_adaptive"] < r["runs_all_arms"]


def test_adaptive_saves_the_seeds_after_each_decision():
    # +50 points at SD 0.1 point is decided at the first look with a finite interval (n = 5,
    # rounds of 2 from 3: looks at 3, 5, 7, 9); 0 with margin 1e-9 is not decided in these 20
    # experiments (a false better/worse has probability <= alpha/2 each), so the loop runs to
    # 9 seeds: all arms 3 x 9 = 27 runs, adaptive 9 (baseline) + 5 + 9 = 23
    r = sq.simulate_adaptive([0.5, 0.0], 0.001, margin=1e-9, reps=20, max_seeds=9)
    assert r["arm_seeds"] == [5.0, 9.0] and r["arm_decided"] == [1.0, 0.0]
    assert (r["runs_all_arms"], r["runs_adaptive"]) == (27.0, 23.0)
    assert r["saved_fraction"] == pytest.approx(4 / 27) and r["changed"] == 0.0
