"""The math of benchmarks/rollouts_bound.py: P(mixed) against every subset, and the
sequential rule's budget and stopping on hand-made samples."""

import itertools

import numpy as np
import pytest

from tests.benchmarks import load

rb = load("rollouts_bound")


def test_p_mixed_is_the_share_of_mixed_subsets():
    # M = 4 samples, 2 right: of the 6 pairs, 4 are mixed
    correct = np.array([[True, True, False, False]])
    assert rb.p_mixed(correct, np.array([2]))[0] == pytest.approx(4 / 6)
    rng = np.random.default_rng(0)
    for _ in range(30):
        M = int(rng.integers(2, 7))
        c = rng.random((1, M)) < rng.random()
        n = int(rng.integers(1, M + 1))
        subsets = list(itertools.combinations(range(M), n))
        want = sum(len({bool(c[0, j]) for j in s}) == 2 for s in subsets) / len(subsets)
        assert rb.p_mixed(c, np.array([n]))[0] == pytest.approx(want)
    with pytest.raises(ValueError, match="above the 4 samples"):
        rb.p_mixed(correct, np.array([5]))


def test_sequential_spends_the_budget_on_prompts_without_signal():
    rng = np.random.default_rng(1)
    # prompt 0 never right, prompt 1 always right, prompt 2 half right; lengths 1, 2, 3
    correct = np.array([[False] * 8, [True] * 8, [True, False] * 4])
    lengths = np.array([[1] * 8, [2] * 8, [3] * 8])
    for _ in range(20):
        eff, tokens = rb.sequential(correct, lengths, 12, 2, 2, 6, rng)
        # 0 and 1 can never be mixed; 2 is mixed whenever the rule stops on it
        assert eff in (0.0, 1.0)
        # 6 first; then 2 a round to each uniform prompt, fewest first, while 12 last:
        # prompt 2 uniform after 2: 4 each; mixed after 2: 0 and 1 get 2, then 0 the last 2
        assert tokens in (4 * 1 + 4 * 2 + 4 * 3, 6 * 1 + 4 * 2 + 2 * 3)
        if tokens == 20:
            assert eff == 1.0
    # no rounds: the first responses only
    eff, tokens = rb.sequential(correct, lengths, 12, 2, 2, 0, rng)
    assert tokens == 2 * (1 + 2 + 3)
