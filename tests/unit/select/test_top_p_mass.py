"""top_p_mass (preset ragen_snr), hand-worked: the fewest groups holding p of the reward
variance mass; ties, zero mass, inactive groups, validation, refill, state."""

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.scorers.outcome import RewardVariance
from dataflex_rl.select.top_p_mass import TopPMass

NAN = float("nan")


def _kept_groups(batch, p=0.9):
    scores = RewardVariance().score(batch)[batch.group_ids]
    keep = TopPMass(p=p).select(scores, batch) & batch.active_mask
    return sorted(set(batch.group_ids[keep].tolist())), keep


def _pairs(*halves):
    """One 2-response group per entry: rewards -h, +h (unbiased variance 2 h**2)."""
    rewards, gids = [], []
    for g, h in enumerate(halves):
        rewards += [-h, h]
        gids += [g, g]
    return from_lists(rewards, gids)


def test_reward_variance_is_the_unbiased_variance_per_group():
    b = from_lists([1, 0, 0, 0, 1, 1, 0.5], [0, 0, 0, 0, 1, 1, 2])
    torch.testing.assert_close(
        RewardVariance().score(b), torch.tensor([0.25, 0.0, 0.0], dtype=torch.float64)
    )


def test_keeps_the_shortest_prefix_reaching_p_of_the_mass():
    # masses 18, 8, 2 (total 28): at p .8 the target is 22.4; 18 < 22.4, 18 + 8 = 26 >= it,
    # so the first two groups (the paper authors' reference case: 26 / 28 of the mass)
    b = _pairs(3.0, 2.0, 1.0)
    assert _kept_groups(b, 0.8)[0] == [0, 1]
    # at p .6 (target 16.8) the first group alone reaches it; at 1 every group of mass > 0
    assert _kept_groups(b, 0.6)[0] == [0]
    assert _kept_groups(b, 1.0)[0] == [0, 1, 2]
    # exactly on the target: masses 8, 2, 2, 2, 2 (total 16) at p .5: the first group's 8
    # reaches 8, so the next one (8 before it, not < 8) is not kept
    assert _kept_groups(_pairs(2.0, 1.0, 1.0, 1.0, 1.0), 0.5)[0] == [0]


def test_order_is_by_mass_not_by_group_id():
    b = _pairs(1.0, 3.0, 2.0)  # masses 2, 18, 8
    assert _kept_groups(b, 0.8)[0] == [1, 2]


def test_ties_go_to_the_lower_group_id():
    b = _pairs(1.0, 1.0, 1.0, 1.0)  # four equal masses: p .5 needs two of them
    assert _kept_groups(b, 0.5)[0] == [0, 1]
    assert _kept_groups(b, 0.51)[0] == [0, 1, 2]


def test_zero_mass_groups_are_never_kept_and_an_all_zero_batch_keeps_nothing():
    b = from_lists([1, 1, 0, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2, 3])  # masses 0, 0, .5, 0
    assert _kept_groups(b, 1.0)[0] == [2]
    flat = from_lists([1, 1, 0, 0, 0.5], [0, 0, 1, 1, 2])
    kept, keep = _kept_groups(flat, 1.0)
    assert kept == [] and not bool(keep.any())


def test_a_group_without_active_responses_has_no_mass():
    # group 1's rewards are NaN (invalid) or padding: no active response, never kept
    b = from_lists(
        [0, 1, NAN, 5.0, 0, 1],
        [0, 0, 1, 1, 2, 2],
        is_padding=torch.tensor([False, False, False, True, False, False]),
    )
    kept, keep = _kept_groups(b, 1.0)
    assert kept == [0, 2]
    assert not bool(keep[2:4].any())


def test_a_negative_mass_is_an_error_naming_the_group():
    b = _pairs(1.0, 2.0)
    with pytest.raises(ValueError, match="top_p_mass.*group 1"):
        TopPMass().select(torch.tensor([1.0, 1.0, -1.0, -1.0]), b)


def test_the_preset_drops_whole_groups_keeps_advantages_and_renormalizes():
    b = from_lists(
        [1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0],
        [0] * 4 + [1] * 4 + [2] * 4,
        advantages=[1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, 0.87, -0.87, 0.87, -0.87],
    )
    d = Strategy("ragen_snr").decide(b)  # masses .25, 0, 1/3: total 7/12, target .525
    assert d.keep_mask.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    assert d.advantages is None  # kept whole: the host's advantages stand
    assert d.renormalizes  # the dropped group leaves the loss's denominator


@pytest.mark.parametrize("p", [0, -0.1, 1.5, "x"])
def test_bad_p_is_refused_naming_the_key(p):
    with pytest.raises(ConfigError, match=r"select\.actuator\.p"):
        Strategy({"select": {"preset": "ragen_snr", "actuator": {"p": p}}})


def test_a_response_level_scorer_is_refused():
    with pytest.raises(ConfigError, match="top_p_mass' accepts group-level"):
        Strategy({"select": {"scorer": "reward", "actuator": "top_p_mass"}})


def test_refill_is_refused_naming_the_key():
    # batch-relative, like top_fraction: a group kept in one batch may be dropped in another,
    # so refilling cannot count the groups the step will keep
    with pytest.raises(ConfigError, match=r"refill: needs a selector.*'top_p_mass'"):
        Strategy({"select": {"preset": "ragen_snr"}, "refill": {"max_rounds": 2}})


def test_stateless_state_dict_round_trips():
    a = Strategy("ragen_snr")
    b = Strategy("ragen_snr")
    b.load_state_dict(a.state_dict())
    batch = _pairs(3.0, 2.0, 1.0)
    assert torch.equal(a.decide(batch).keep_mask, b.decide(batch).keep_mask)
    assert a.state_dict()["components"]["select"] == {"scorer": {}, "actuator": {}}
