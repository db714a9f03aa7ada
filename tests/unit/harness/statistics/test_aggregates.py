"""harness/statistics/aggregates.py: IQM, probability of improvement, profiles, stratified
bootstrap."""

import itertools

import numpy as np
import pytest

from dataflex_rl.harness.statistics import aggregates as ag


def test_iqm_hand_case():
    # 8 scores; the middle 50% after sorting 0,1,...,6,100 are 2,3,4,5 -> 3.5 (the mean is 15.75)
    x = np.array([[0, 1, 2, 3], [4, 5, 6, 100]], dtype=float)
    assert ag.iqm(x) == pytest.approx(3.5)
    # per leading index over the last two axes
    stacked = np.stack([x, x + 1])
    np.testing.assert_allclose(ag.iqm(stacked, axis=(1, 2)), [3.5, 4.5])


def test_probability_of_improvement_equals_the_pair_loop():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(5, 3)).astype(float)  # integers: ties happen
    y = rng.integers(0, 4, size=(4, 3)).astype(float)
    per_task = []
    for t in range(3):
        wins = sum(
            1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(x[:, t], y[:, t])
        )
        per_task.append(wins / (5 * 4))
    assert ag.probability_of_improvement(x, y) == pytest.approx(np.mean(per_task))
    # hand: one task, x = [1, 3], y = [2]: 3 > 2 wins, 1 < 2 loses -> 0.5
    assert ag.probability_of_improvement(np.array([[1.0], [3.0]]), np.array([[2.0]])) == 0.5


def test_performance_profile_hand_case():
    x = np.array([[0.1, 0.5], [0.3, 0.9]])
    # above 0.2: 0.5, 0.3, 0.9 -> 3/4; above 0.6: 0.9 -> 1/4; above 1: none
    np.testing.assert_allclose(
        ag.performance_profile(x, np.array([0.2, 0.6, 1.0])), [0.75, 0.25, 0.0]
    )


def test_stratified_resamples_stay_within_their_task():
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    b = ag.stratified_resamples(x, np.random.default_rng(0), 500)
    assert b.shape == (500, 3, 2)
    assert set(np.unique(b[:, :, 0])) <= {1.0, 2.0, 3.0}
    assert set(np.unique(b[:, :, 1])) <= {10.0, 20.0, 30.0}
    # columns are drawn independently: the task-0 and task-1 draws are not the same rows
    assert np.mean(b[:, :, 1] == 10 * b[:, :, 0]) < 0.6


def test_aggregate_intervals_cover_the_point_estimates():
    rng = np.random.default_rng(1)
    scores = {
        "base": 0.5 + 0.02 * rng.standard_normal((6, 3)),
        "up": 0.55 + 0.02 * rng.standard_normal((6, 3)),
    }
    out = {
        a.method: a
        for a in ag.aggregate(
            scores, "base", np.linspace(0.4, 0.7, 7), np.random.default_rng(2), n_boot=500
        )
    }
    up, base = out["up"], out["base"]
    assert up.iqm_ci[0] <= up.iqm <= up.iqm_ci[1]
    assert up.poi > 0.9 and up.poi_ci[0] <= up.poi <= up.poi_ci[1]
    assert np.isnan(base.poi) and up.profile.shape == (7,) and up.profile_ci.shape == (2, 7)
    assert np.all(up.profile_ci[0] <= up.profile + 1e-12)
    assert np.all(up.profile <= up.profile_ci[1] + 1e-12)
