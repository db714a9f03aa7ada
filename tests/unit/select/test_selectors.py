"""Selectors, hand-worked: band (difffilter), max_variance (PODS), gfpo, top_fraction."""

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.scorers.outcome import Efficiency, ResponseLength, Reward, SolveRate
from dataflex_rl.scorers.policy import AdvantageMagnitude
from dataflex_rl.select.band import Band
from dataflex_rl.select.group_subset import GroupFilter, MaxVariance, keep_counts
from dataflex_rl.select.top_fraction import TopFraction

NAN = float("nan")


def _groups_of_five(corrects):
    """One G=5 group per entry, with that many 1-rewards first and 0-rewards after."""
    rewards, gids = [], []
    for g, k in enumerate(corrects):
        rewards += [1.0] * k + [0.0] * (5 - k)
        gids += [g] * 5
    return from_lists(rewards, gids)


def _select(selector, scorer, batch):
    scores = scorer.score(batch)
    if scorer.granularity == "group":
        scores = scores[batch.group_ids]
    return selector.select(scores, batch) & batch.active_mask


# ---------------------------------------------------------------- band
def test_difffilter_g5_keeps_exactly_the_2_and_3_correct_groups():
    # solve rates 0, .2, .4, .6, .8, 1; exclusive (0.2, 0.8) keeps .4 and .6 only
    b = _groups_of_five([0, 1, 2, 3, 4, 5])
    keep = _select(Band(low=0.2, high=0.8), SolveRate(), b)
    kept_groups = sorted(set(b.group_ids[keep].tolist()))
    assert kept_groups == [2, 3]
    assert int(keep.sum()) == 10  # whole groups


def test_band_inclusive_keeps_the_bounds_too():
    # [0.2, 0.8] keeps 1..4 correct of 5 (0.2 and 0.8 compare exactly: integer counts)
    b = _groups_of_five([0, 1, 2, 3, 4, 5])
    keep = _select(Band(low=0.2, high=0.8, inclusive=True), SolveRate(), b)
    assert sorted(set(b.group_ids[keep].tolist())) == [1, 2, 3, 4]


def test_band_on_response_scores():
    # exclusive (0.2, 0.9): 0.5 in; 0.9 and 0.2 are the bounds -> out. The float32 reward 0.2
    # is 0.20000000298 in float64, so the bound must be compared in the score's precision
    b = from_lists([0.1, 0.5, 0.9, 0.2], [0, 0, 0, 0])
    assert _select(Band(low=0.2, high=0.9), Reward(), b).tolist() == [False, True, False, False]


def test_band_low_above_high_is_an_error():
    with pytest.raises(ConfigError, match="low: must be <= high"):
        Band(low=0.9, high=0.1)


def test_band_never_keeps_padding_or_nan_rows():
    # group of 5: 2 correct + 1 NaN + 1 padding (counted in neither) -> 2/3 active correct
    b = from_lists(
        [1.0, 1.0, 0.0, NAN, 1.0],
        [0] * 5,
        is_padding=torch.tensor([False, False, False, False, True]),
    )
    keep = _select(Band(), SolveRate(), b)
    assert keep.tolist() == [True, True, True, False, False]


# ---------------------------------------------------------------- keep counts
@pytest.mark.parametrize(
    "size, fraction, expected",
    [
        (5, 0.5, 3),  # 2.5 rounds half up to 3
        (3, 0.5, 2),  # 1.5 -> 2
        (4, 0.25, 2),  # 1 -> at least 2
        (1, 0.5, 1),  # at least 2, but at most the group's size
        (8, 1.0, 8),
        (45, 0.7, 32),  # 31.5 (31.499999999999996 in floating point) -> 32
    ],
)
def test_keep_counts(size, fraction, expected):
    b = from_lists([0.0] * size, [0] * size)
    assert keep_counts(b, fraction).tolist() == [expected]


# ---------------------------------------------------------------- max_variance
def test_max_variance_hand_worked():
    # rewards 0, .2, .5, .9, 1, 1 (shuffled), keep 3: candidates are a lowest + (3 - a) highest:
    #   a=0 {.9, 1, 1}: var .0022; a=1 {0, 1, 1}: mean 2/3, var (4/9 + 1/9 + 1/9) / 3 = .2222
    #   a=2 {0, .2, 1}: mean .4, var (.16 + .04 + .36) / 3 = .1867; a=3 {0, .2, .5}: .0422
    # best a=1: keep the 0 and both 1s
    rewards = [0.9, 1.0, 0.0, 0.5, 1.0, 0.2]
    b = from_lists(rewards, [0] * 6)
    keep = _select(MaxVariance(keep_fraction=0.5), Reward(), b)
    assert keep.tolist() == [False, True, True, False, True, False]


def test_max_variance_binary_group_keeps_a_balanced_subset():
    # 8 responses, 2 correct, keep 4: best is both 1s and two 0s (var .25)
    b = from_lists([0, 1, 0, 0, 0, 1, 0, 0.0], [0] * 8)
    keep = _select(MaxVariance(keep_fraction=0.5), Reward(), b)
    kept = b.rewards[keep].tolist()
    assert sorted(kept) == [0.0, 0.0, 1.0, 1.0]
    # a=0 (the 4 highest: ranks 4-7 = rows 6, 7, 1, 5) and a=2 (rows 0, 2 + rows 1, 5) both
    # reach var .25; ties go to the smallest a, so a=0: the 0s of the highest ranks (rows 6, 7,
    # ranked by index among equal rewards)
    assert keep.tolist() == [False, True, False, False, False, True, True, True]


def test_max_variance_groups_are_independent_and_inactive_never_kept():
    b = from_lists(
        [5.0, 0.0, NAN, 9.0, 1.0, 2.0, 3.0],
        [0, 0, 0, 0, 1, 1, 1],
        is_padding=torch.tensor([False, False, False, True, False, False, False]),
    )
    keep = _select(MaxVariance(keep_fraction=0.5), Reward(), b)
    # group 0: 2 active (5, 0) -> keep both; group 1: 1, 2, 3 keep 2 -> {1, 3} (ties: a=1)
    assert keep.tolist() == [True, True, False, False, True, False, True]


def test_max_variance_single_response_group():
    b = from_lists([0.7], [0])
    assert _select(MaxVariance(), Reward(), b).tolist() == [True]


# ---------------------------------------------------------------- gfpo
def test_gfpo_keeps_the_most_efficient():
    # efficiency = reward / length: .25, .5, 0, 1/3 -> keep 2: rows 1 (.5) and 3 (.333)
    b = from_lists([1.0, 1.0, 0.0, 1.0], [0] * 4, [4, 2, 3, 3])
    assert _select(GroupFilter(), Efficiency(), b).tolist() == [False, True, False, True]


def test_gfpo_tie_break_higher_reward_then_shorter_then_index():
    # short mode (response_length, largest=False): lengths tie at 3 for rows 0-2;
    # higher reward first -> rows 1 and 2 (reward 1) beat row 0 (reward 0)
    b = from_lists([0.0, 1.0, 1.0, 1.0], [0] * 4, [3, 3, 3, 5])
    sel = GroupFilter(keep_fraction=0.5, largest=False)
    assert _select(sel, ResponseLength(), b).tolist() == [False, True, True, False]
    # all rewards 0 -> efficiency 0 for all: shorter first -> rows 1 (3) and 2 (4)
    b = from_lists([0.0] * 4, [0] * 4, [5, 3, 4, 6])
    assert _select(GroupFilter(), Efficiency(), b).tolist() == [False, True, True, False]
    # same score, reward and length -> lower index
    b = from_lists([1.0] * 4, [0] * 4, [2, 2, 2, 2])
    assert _select(GroupFilter(), Efficiency(), b).tolist() == [True, True, False, False]


def test_gfpo_per_group_counts_and_inactive_rows():
    # group 0: 5 active -> keep 3 (2.5 half up); group 1: NaN row inactive, 2 active -> keep 2
    b = from_lists([1, 1, 1, 1, 1, NAN, 0.0, 1.0], [0] * 5 + [1] * 3, [1, 2, 3, 4, 5, 1, 2, 2])
    keep = _select(GroupFilter(), Efficiency(), b)
    assert keep.tolist() == [True, True, True, False, False, False, True, True]


# ---------------------------------------------------------------- top_fraction
def test_top_fraction_responses_with_ties_by_index():
    # |A| = .1, .5, .5, .2, .9; fraction .5 of 5 = 2.5 -> 3: rows 4, 1, 2
    b = from_lists([0.0] * 5, [0] * 5, advantages=[0.1, -0.5, 0.5, 0.2, -0.9])
    keep = _select(TopFraction(fraction=0.5), AdvantageMagnitude(), b)
    assert keep.tolist() == [False, True, True, False, True]
    # fraction .4 -> 2: row 4, then the tie .5/.5 goes to the lower index, row 1
    keep = _select(TopFraction(fraction=0.4), AdvantageMagnitude(), b)
    assert keep.tolist() == [False, True, False, False, True]


def test_top_fraction_by_group_ranks_group_means():
    # group means of |A|: g0 (.1 + .3) / 2 = .2, g1 .8, g2 (.5 + .5 + .5) / 3 = .5
    # fraction .5 of 3 groups = 1.5 -> 2 groups: g1 and g2
    b = from_lists([0.0] * 6, [0, 0, 1, 2, 2, 2], advantages=[0.1, 0.3, 0.8, 0.5, -0.5, 0.5])
    keep = _select(TopFraction(fraction=0.5, by_group=True), AdvantageMagnitude(), b)
    assert keep.tolist() == [False, False, True, True, True, True]
    assert TopFraction(by_group=True).group_based and not TopFraction().group_based


def test_top_fraction_counts_active_rows_only():
    # 4 active of 6 (one NaN reward, one padding); fraction .5 -> 2 kept
    b = from_lists(
        [0.0, NAN, 0.0, 0.0, 0.0, 0.0],
        [0] * 6,
        advantages=[0.1, 9.0, 0.2, 0.3, 0.4, 8.0],
        is_padding=torch.tensor([False] * 5 + [True]),
    )
    keep = _select(TopFraction(fraction=0.5), AdvantageMagnitude(), b)
    assert keep.tolist() == [False, False, False, True, True, False]


@pytest.mark.parametrize(
    "selector", [Band(), MaxVariance(), GroupFilter(), TopFraction(), TopFraction(by_group=True)]
)
def test_empty_batch(selector):
    b = from_lists([], [], advantages=[])
    assert selector.select(torch.zeros(0), b).shape == (0,)
