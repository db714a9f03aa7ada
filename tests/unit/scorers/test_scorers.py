"""Scorers, hand-worked: outcome, policy and windowed per-domain signals."""

import numpy as np
import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import RolloutBatch, from_lists
from dataflex_rl.scorers.domain import DomainAdvantageMagnitude, DomainReward, LearningProgress
from dataflex_rl.scorers.outcome import Efficiency, ResponseLength, Reward, SolveRate
from dataflex_rl.scorers.policy import AdvantageMagnitude, TokenProb

NAN = float("nan")


def test_reward_is_zero_on_inactive_rows():
    b = from_lists([0.5, NAN, 2.0], [0, 0, 0], is_padding=torch.tensor([False, False, True]))
    assert Reward().score(b).tolist() == [0.5, 0.0, 0.0]


def test_solve_rate_counts_and_exact_fractions():
    # group 0: 2 of 5 above 0.5 -> 2/5, equal to the literal 0.4 (integer counts, float64)
    # group 1: 1.0, NaN, padding -> 1 of 1 active -> 1.0; group 2: only padding -> 0
    b = from_lists(
        [1, 0, 1, 0, 0, 1.0, NAN, 1.0, 1.0],
        [0, 0, 0, 0, 0, 1, 1, 1, 2],
        is_padding=torch.tensor([False] * 7 + [True, True]),
    )
    s = SolveRate().score(b)
    assert s.dtype == torch.float64
    assert s.tolist() == [0.4, 1.0, 0.0]
    assert float(SolveRate(threshold=-1.0).score(b)[0]) == 1.0  # every reward > -1


@pytest.mark.parametrize("k, n", [(1, 5), (2, 5), (3, 5), (4, 5), (3, 10), (7, 10), (1, 3)])
def test_solve_rate_equals_decimal_literal(k, n):
    b = from_lists([1.0] * k + [0.0] * (n - k), [0] * n)
    assert float(SolveRate().score(b)[0]) == k / n


def test_length_and_efficiency():
    # efficiency = reward / max(length, 1): 1/4, 0/2, 1/max(0,1) = 1
    b = from_lists([1.0, 0.0, 1.0], [0, 0, 0], [4, 2, 0])
    assert ResponseLength().score(b).tolist() == [4.0, 2.0, 0.0]
    assert Efficiency().score(b).tolist() == [0.25, 0.0, 1.0]


def test_advantage_magnitude_is_mean_abs_over_valid_tokens():
    # row 0: |1|, |-3| -> 2 (the 50 on a padding token is ignored); row 1: no tokens -> 0
    adv = torch.tensor([[1.0, -3.0, 50.0], [7.0, 7.0, 7.0]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        response_mask=torch.tensor([[1, 1, 0], [0, 0, 0]]),
        advantages=adv,
    )
    assert AdvantageMagnitude().score(b).tolist() == [2.0, 0.0]
    with pytest.raises(ValueError, match="needs 'advantages'"):
        AdvantageMagnitude().score(from_lists([1.0], [0]))


def test_token_prob_is_exp_of_old_log_prob_masked():
    lp = torch.tensor([[0.0, float(np.log(0.5)), NAN], [0.1, -1.0, -1.0]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        response_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
        old_log_probs=lp,
        is_padding=torch.tensor([False, True]),
    )
    # row 0: exp(0) = 1, exp(log .5) = .5, masked -> 0; row 1 is padding -> 0
    assert torch.allclose(TokenProb().score(b), torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0]]))
    # a positive log-prob (numerical noise) is clamped to probability 1
    b = b.replace(is_padding=torch.tensor([False, False]))
    assert float(TokenProb().score(b)[1, 0]) == 1.0
    with pytest.raises(ValueError, match="needs 'old_log_probs'"):
        TokenProb().score(from_lists([1.0], [0]))


# ---------------------------------------------------------------- windowed domain signals
def _step(rewards, domain_ids, step=0, advantages=None, D=2):
    return from_lists(
        rewards,
        list(range(len(rewards))),
        domain_ids=torch.tensor(domain_ids),
        domains=("a", "b", "c")[:D],
        step=step,
        advantages=advantages,
    )


def test_domain_reward_window_counts_steps_not_responses():
    sc = DomainReward(window=2)
    sc.observe(_step([1.0] * 10, [0] * 10))  # step 0: ten responses of a, all 1
    sc.observe(_step([0.0, 1.0], [0, 1], step=1))  # step 1: a -> 0, b -> 1
    v, obs = sc.values(2)
    # window holds steps 0 and 1: a = (10 * 1 + 0) / 11, b = 1
    assert v.tolist() == pytest.approx([10 / 11, 1.0]) and obs.tolist() == [True, True]
    sc.observe(_step([0.0, 0.5, 0.5], [0, 1, 1], step=2))  # step 2 pushes step 0 out
    v, obs = sc.values(2)
    # steps 1 and 2: a = (0 + 0) / 2 = 0, b = (1 + .5 + .5) / 3
    assert v.tolist() == pytest.approx([0.0, 2 / 3])


def test_domain_reward_ignores_inactive_rows_and_marks_unobserved():
    sc = DomainReward(window=3)
    assert sc.values(2)[1].tolist() == [False, False]  # nothing seen yet
    b = from_lists(
        [1.0, NAN, 0.0],
        [0, 0, 1],
        domain_ids=torch.tensor([0, 0, 1]),
        domains=("a", "b", "c"),
        is_padding=torch.tensor([False, False, True]),
    )
    sc.observe(b)
    v, obs = sc.values(3)
    assert v.tolist() == [1.0, 0.0, 0.0] and obs.tolist() == [True, False, False]


def test_domain_advantage_magnitude():
    sc = DomainAdvantageMagnitude(window=5)
    sc.observe(_step([1.0, 0.0, 1.0], [0, 0, 1], advantages=[0.5, -1.5, 0.2]))
    # a: (|.5| + |-1.5|) / 2 = 1.0; b: .2
    assert sc.values(2)[0].tolist() == pytest.approx([1.0, 0.2])


def test_learning_progress_known_slope():
    sc = LearningProgress(window=4)
    # domain a: per-step mean reward 0.1, 0.3, 0.5 -> slope 0.2; b: 1, 0.5, 0 -> slope -0.5
    for step, (a, b) in enumerate([(0.1, 1.0), (0.3, 0.5), (0.5, 0.0)]):
        sc.observe(_step([a, a, b], [0, 0, 1], step=step))
    v, obs = sc.values(2)
    assert v.tolist() == pytest.approx([0.2, 0.5]) and obs.tolist() == [True, True]
    signed = LearningProgress(window=4, signed=True)
    signed.load_state_dict(sc.state_dict())
    assert signed.values(2)[0].tolist() == pytest.approx([0.2, 0.0])


def test_learning_progress_matches_polyfit_over_the_window_and_skips_missing_steps():
    sc = LearningProgress(window=3)
    means = [0.9, 0.2, 0.4, None, 0.7]  # domain a absent at step 3
    for step, m in enumerate(means):
        if m is None:
            sc.observe(_step([0.0], [1], step=step))
        else:
            sc.observe(_step([m, m], [0, 0], step=step))
    # window = steps 2, 3, 4; a has points (2, .4), (4, .7)
    expected = np.polyfit([2.0, 4.0], [0.4, 0.7], 1)[0]
    assert float(sc.values(2)[0][0]) == pytest.approx(abs(expected))


def test_learning_progress_needs_two_points():
    sc = LearningProgress(window=5)
    sc.observe(_step([1.0, 0.0], [0, 1]))
    sc.observe(_step([0.0], [0], step=1))
    v, obs = sc.values(2)
    # a has 2 points (slope -1 -> |.| = 1); b has 1 point -> 0, not observed
    assert v.tolist() == pytest.approx([1.0, 0.0]) and obs.tolist() == [True, False]


@pytest.mark.parametrize("cls", [DomainReward, DomainAdvantageMagnitude, LearningProgress])
def test_windowed_state_round_trip_and_snapshot(cls):
    def batch(i):
        return _step([0.1 * i, 1.0 - i % 2], [0, 1], step=i, advantages=[0.1 * i, -0.2])

    a = cls(window=3)
    for i in range(4):
        a.observe(batch(i))
    state = a.state_dict()
    saved_values = a.values(2)
    assert saved_values[1].all()  # both domains observed: the state moved from a fresh one
    for i in range(4, 6):  # keep going after saving
        a.observe(batch(i))
    b = cls(window=3)
    b.load_state_dict(state)
    # the state is a snapshot: what a did after saving does not leak into it
    assert all(torch.equal(x, y) for x, y in zip(b.values(2), saved_values))
    for i in range(4, 6):
        b.observe(batch(i))
    va, oa = a.values(2)
    vb, ob = b.values(2)
    assert torch.equal(va, vb) and torch.equal(oa, ob)


# ---------------------------------------------------------------- one meaning of |A|
def _signed_tokens():
    # row 0: tokens (+1, -3) -> mean |A_t| = 2 while |mean A_t| = 1; row 1: (0.5, 0.5) -> 0.5
    # row 2: no tokens (|A| undefined: 0, and not counted by the domain signal)
    adv = torch.tensor([[1.0, -3.0], [0.5, 0.5], [0.0, 0.0]])
    mask = torch.tensor([[True, True], [True, True], [False, False]])
    return RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 0.0]),
        response_mask=mask,
        group_ids=torch.tensor([0, 0, 1]),
        advantages=adv,
        domain_ids=torch.tensor([0, 0, 1]),
        domains=("a", "b"),
    )


def test_abs_advantage_means_mean_of_token_magnitudes_everywhere():
    from dataflex_rl.scorers.policy import advantage_magnitude

    b = _signed_tokens()
    assert advantage_magnitude(b).tolist() == [2.0, 0.5, 0.0]
    assert AdvantageMagnitude().score(b).tolist() == [2.0, 0.5, 0.0]
    assert b.advantage_per_response.abs().tolist() == [1.0, 0.5, 0.0]  # not this one
    sc = DomainAdvantageMagnitude(window=2)
    sc.observe(b)
    values, observed = sc.values(2)
    # domain a: (2 + 0.5) / 2; domain b: its only response has no tokens -> not observed
    assert values.tolist() == [1.25, 0.0] and observed.tolist() == [True, False]
