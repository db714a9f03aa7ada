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
