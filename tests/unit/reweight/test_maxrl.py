"""maxrl, hand-worked: absolute weights that turn the host's advantages into MaxRL's
(r - mean) / mean; zero-mean groups, other estimators, validation, state."""

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from tests.numerics import grpo_advantages

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")


def _batch(rewards, gids, norm_by_std=True, eps=1e-6):
    b = from_lists(rewards, gids)
    adv = grpo_advantages(b, b.active_mask, norm_by_std, eps)
    return b.replace(advantages=adv)


def _effective(decision, batch):
    """The advantage each response trains with: weight x the host's advantage."""
    return (decision.weights_per_response.double() * batch.advantage_per_response.double()).tolist()


def test_binary_groups_get_the_paper_formula():
    # p = 1/4: mean .25, success (1 - .25) / .25 = 3, failures -1 (about 1/p on the success);
    # p = 3/4: mean .75, success 1/3, failure -1
    b = _batch([1, 0, 0, 0, 1, 1, 1, 0], [0] * 4 + [1] * 4)
    d = Strategy("maxrl").decide(b)
    assert _effective(d, b) == pytest.approx([3, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1], rel=1e-6)
    # the weights themselves: target / GRPO's A = std / mean (up to eps): .5 / .25 and .5 / .75
    assert d.weights_per_response.tolist() == pytest.approx([2] * 4 + [2 / 3] * 4, rel=1e-5)
    assert d.advantages is None  # the host's advantages, reweighted


def test_a_group_without_success_has_advantage_zero():
    # all rewards 0: mean 0, the paper's no-success convention (and GRPO's A is 0 there too)
    b = _batch([0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 1])
    d = Strategy("maxrl").decide(b)
    assert _effective(d, b) == pytest.approx([0, 0, 0, 2, -1, -1], rel=1e-6)


def test_a_non_positive_mean_with_signal_gets_weight_zero():
    # rewards -1, 1: mean 0 but GRPO's A is +-.707: (r - mean) / mean is undefined, 0 here;
    # mean -.5: (r - mean) / mean would reverse the order, 0 too
    b = _batch([-1, 1, -1, 0], [0, 0, 1, 1])
    d = Strategy("maxrl").decide(b)
    assert d.weights_per_response.tolist() == [0.0] * 4
    assert d.keep_mask.all()


def test_exact_whatever_the_host_estimator_scales():
    # without the std (Dr. GRPO) or a larger eps the weights change, the product does not
    rewards, gids = [1, 0, 0, 0, 1, 1, 1, 0, 0.5, 0.25], [0] * 4 + [1] * 4 + [2] * 2
    expected = [3, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1, 1 / 3, -1 / 3]
    for norm_by_std, eps in ((True, 1e-6), (False, 0.0), (True, 0.1)):
        b = _batch(rewards, gids, norm_by_std, eps)
        assert _effective(Strategy("maxrl").decide(b), b) == pytest.approx(expected, rel=1e-6)


def test_weights_are_absolute_not_mean_one():
    b = _batch([1, 0, 0, 0], [0] * 4)
    w = Strategy({"reweight": {"preset": "maxrl", "normalize": "active"}}).decide(b)
    assert w.weights_per_response.tolist() == pytest.approx([2.0] * 4, rel=1e-5)


def test_zero_host_advantage_rows_keep_weight_one_and_a_sign_mismatch_gets_zero():
    b = from_lists([1, 0, 1, 1], [0, 0, 1, 1], advantages=[0.0, -1.0, 0.0, 0.0])
    d = Strategy("maxrl").decide(b)
    # row 0: host A 0 -> weight 1; row 1: target -1 over A -1 -> 1; group 1: A 0 -> 1
    assert d.weights_per_response.tolist() == [1.0, 1.0, 1.0, 1.0]
    flipped = from_lists([1, 0], [0, 0], advantages=[-1.0, 1.0])
    assert Strategy("maxrl").decide(flipped).weights_per_response.tolist() == [0.0, 0.0]


def test_with_select_kept_groups_only():
    b = _batch([1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0], [0] * 4 + [1] * 4 + [2] * 4)
    d = Strategy({"select": {"preset": "dapo"}, "reweight": {"preset": "maxrl"}}).decide(b)
    eff = _effective(d, b)
    assert eff[:4] == pytest.approx([3, -1, -1, -1], rel=1e-6)
    assert d.weights_per_response[4:8].tolist() == [0.0] * 4  # dropped
    assert eff[8:] == pytest.approx([1, -1, 1, -1], rel=1e-6)  # mean .5


def test_refused_after_a_select_that_recomputes_advantages():
    with pytest.raises(ConfigError, match=r"reweight\.actuator: 'maxrl'.*recompute_advantages"):
        Strategy({"select": {"preset": "maxvar"}, "reweight": {"preset": "maxrl"}})
    # without the recompute it is allowed
    Strategy({"select": {"preset": "maxvar", "recompute_advantages": False}, "reweight": "maxrl"})


def test_refused_without_groups_or_advantages():
    with pytest.raises(ConfigError, match="needs prompt groups"):
        Strategy("maxrl", advantage_estimator="gae")
    with pytest.raises(ConfigError, match=r"reweight\.actuator: MaxRL needs advantages"):
        Strategy("maxrl", available_fields=("rewards",))
    with pytest.raises(ConfigError, match=r"reweight\.actuator\.nope"):
        Strategy({"reweight": {"preset": "maxrl", "actuator": {"nope": 1}}})


def test_stateless_state_dict_round_trips():
    a, b = Strategy("maxrl"), Strategy("maxrl")
    b.load_state_dict(a.state_dict())
    batch = _batch([1, 0, 0, 0], [0] * 4)
    assert torch.equal(a.decide(batch).weights_per_response, b.decide(batch).weights_per_response)
    assert a.state_dict()["components"]["reweight"] == {"scorer": {}, "actuator": {}}
