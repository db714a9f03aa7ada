"""The math of benchmarks/prerollout_bound.py: hand-worked examples and plain-loop oracles."""

import itertools
import math

import numpy as np
import pytest

from tests.benchmarks import load

bound = load("prerollout_bound")


def _loop_group(correct, lengths, G, k=None, stop_right=True, stop_wrong=True):
    """Every ordered G-tuple of distinct samples, equally likely: the group's expectations and,
    with ``k``, the screen's (first k samples) outcome."""
    M = len(correct)
    out = dict.fromkeys(("q", "tokens", "zero_tokens", "stop", "lost", "s_tokens", "s_eff"), 0.0)
    perms = list(itertools.permutations(range(M), G))
    for perm in perms:
        r = [correct[j] for j in perm]
        t = sum(lengths[j] for j in perm)
        zero = all(r) or not any(r)
        out["q"] += zero
        out["tokens"] += t
        out["zero_tokens"] += t * zero
        if k is not None:
            screen = r[:k]
            stop = (stop_right and all(screen)) or (stop_wrong and not any(screen))
            out["stop"] += stop
            out["lost"] += stop and not zero
            out["s_tokens"] += sum(lengths[j] for j in perm[:k]) if stop else t
            out["s_eff"] += (not stop) and not zero
    return {key: v / len(perms) for key, v in out.items()}


def test_group_moments_hand_worked():
    # 4 samples: right with 2 and 4 tokens, wrong with 3 and 5; G = 2: 6 pairs, two of them
    # zero-variance ({2, 4} = 6 tokens, {3, 5} = 8 tokens); a pair holds 7 tokens on average
    m = bound.group_moments(np.array([[1, 1, 0, 0]]), np.array([[2, 4, 3, 5]]), 2)
    assert m["q"][0] == pytest.approx(2 / 6)
    assert m["q_right"][0] == pytest.approx(1 / 6)
    assert m["tokens"][0] == pytest.approx(7.0)
    assert m["zero_tokens"][0] == pytest.approx((6 + 8) / 6)


def test_q_estimator_is_unbiased_for_p_to_the_g_plus_its_complement():
    # E over c ~ Binomial(M, p) of [C(c, G) + C(M - c, G)] / C(M, G) is p^G + (1 - p)^G
    M, G = 12, 5
    c = np.arange(M + 1)
    correct = np.arange(M)[None, :] < c[:, None]
    q_hat = bound.group_moments(correct, np.ones((M + 1, M)), G)["q"]
    for p in (0.0, 0.1, 0.37, 0.5, 0.9):
        pmf = np.array([math.comb(M, int(x)) * p**x * (1 - p) ** (M - x) for x in c])
        assert float(pmf @ q_hat) == pytest.approx(p**G + (1 - p) ** G, abs=1e-12)


def test_group_moments_match_a_loop_over_every_group():
    rng = np.random.default_rng(0)
    correct = rng.random((6, 7)) < np.array([0.0, 0.2, 0.5, 0.8, 1.0, 0.4])[:, None]
    lengths = rng.integers(1, 11, (6, 7))
    for G in (1, 3, 7):
        m = bound.group_moments(correct, lengths, G)
        for i in range(6):
            want = _loop_group(correct[i].tolist(), lengths[i].tolist(), G)
            for key in ("q", "tokens", "zero_tokens"):
                assert m[key][i] == pytest.approx(want[key], abs=1e-12), (G, i, key)


def test_skip_curve_hand_worked():
    # q = 1, 0.5, 0; tokens 8, 12, 16 (zero-variance tokens 8, 6, 0). Dynamic sampling: 36
    # tokens for 1.5 groups with signal = 24; ceiling 14 / 36. Skip the first: 28 / 1.5 =
    # 18.67, saving 2/9 = 4/7 of the ceiling, false-skip 0. Skip two: 16 / 1 = 16, saving 1/3
    # = 6/7 of the ceiling, false-skip 0.5 / 2. Skip all three: nothing with signal is left.
    q = np.array([1.0, 0.5, 0.0])
    c = bound.skip_curve(q, q, np.array([8.0, 12, 16]), np.array([8.0, 6, 0]))
    assert float(c["ceiling"]) == pytest.approx(14 / 36)
    np.testing.assert_allclose(c["share"], [0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(c["false_skip"], [np.nan, 0.0, 0.25, 0.5])
    np.testing.assert_allclose(c["saving"], [0.0, 2 / 9, 1 / 3, np.nan])
    np.testing.assert_allclose(c["of_ceiling"], [0.0, 4 / 7, 6 / 7, np.nan])
    assert bound.best_within(c, 0.10) == pytest.approx((4 / 7, 1 / 3))
    assert bound.best_within(c, 0.30) == pytest.approx((6 / 7, 2 / 3))
    # ranked the other way round nothing qualifies at 10%: skipping the q = 0 prompt first
    worst = bound.skip_curve(-q, q, np.array([8.0, 12, 16]), np.array([8.0, 6, 0]))
    np.testing.assert_allclose(worst["false_skip"], [np.nan, 1.0, 0.75, 0.5])
    assert bound.best_within(worst, 0.10) == (0.0, 0.0)


def test_skip_curve_matches_a_plain_loop():
    rng = np.random.default_rng(1)
    N = 9
    rank, q = rng.random(N), rng.random(N)
    tokens = rng.uniform(5, 80, N)
    zero = tokens * q
    c = bound.skip_curve(rank, q, tokens, zero)
    order = sorted(range(N), key=lambda i: -rank[i])
    base = sum(tokens) / sum(1 - x for x in q)
    ceiling = sum(zero) / sum(tokens)
    for n in range(N):
        kept = order[n:]
        tpe = sum(tokens[i] for i in kept) / sum(1 - q[i] for i in kept)
        assert c["saving"][n] == pytest.approx(1 - tpe / base)
        assert c["of_ceiling"][n] == pytest.approx((1 - tpe / base) / ceiling)
        if n:
            assert c["false_skip"][n] == pytest.approx(sum(1 - q[i] for i in order[:n]) / n)


def test_screening_hand_worked():
    # M = G = 2, one right (2 tokens), one wrong (4); k = 1, stop on a wrong screen. Right
    # first: continued, 6 tokens, signal. Wrong first: stopped, 4 tokens, signal lost. So 5
    # tokens per 0.5 effective group = 10 against dynamic sampling's 6 / 1: +2/3.
    s = bound.screening(np.array([[1, 0]]), np.array([[2, 4]]), 2, 1, False, True)
    assert s["stop"] == pytest.approx(0.5)
    assert s["false_stop"] == pytest.approx(1.0)
    assert s["tpe_vs_dynamic"] == pytest.approx(10 / 6 - 1)


@pytest.mark.parametrize("sides", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_screening_matches_a_loop_over_every_ordered_group(k, sides):
    rng = np.random.default_rng(k)
    correct = rng.random((5, 6)) < np.array([0.0, 0.15, 0.5, 0.85, 1.0])[:, None]
    lengths = rng.integers(1, 11, (5, 6))
    G = 4
    loops = [_loop_group(correct[i].tolist(), lengths[i].tolist(), G, k, *sides) for i in range(5)]
    base = sum(x["tokens"] for x in loops) / sum(1 - x["q"] for x in loops)
    s = bound.screening(correct, lengths, G, k, *sides)
    assert s["stop"] == pytest.approx(np.mean([x["stop"] for x in loops]))
    assert s["false_stop"] == pytest.approx(
        sum(x["lost"] for x in loops) / sum(x["stop"] for x in loops)
    )
    effective = sum(x["s_eff"] for x in loops)
    if effective == 0:  # k = 1 stopping on either side stops every group
        assert (k, sides, s["tpe_vs_dynamic"]) == (1, (True, True), float("inf"))
        return
    tpe = sum(x["s_tokens"] for x in loops) / effective
    assert s["tpe_vs_dynamic"] == pytest.approx(tpe / base - 1)


def test_expected_auc_matches_a_loop_over_pairs_of_prompts():
    rng = np.random.default_rng(2)
    score = rng.integers(0, 4, 12).astype(float)  # ties
    q = rng.random(12)
    num = den = 0.0
    for i in range(12):
        for j in range(12):
            if i != j:
                w = q[i] * (1 - q[j])
                den += w
                num += w * (1.0 if score[i] > score[j] else 0.5 if score[i] == score[j] else 0.0)
    assert bound.expected_auc(score, q) == pytest.approx(num / den)
    # a constant score is a coin flip
    assert bound.expected_auc(np.zeros(12), q) == pytest.approx(0.5)
