"""Mixers, each fed its own signal, hand-worked; floor, schedule and prior."""

import math

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.proportions import apply_floor
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.mix.mixers import UCB, RewardGap, SoftmaxMixer, Static, fill_unobserved

DOMAINS = ("a", "b", "c")


def _batch(rewards, domains, advantages=None, step=0):
    """One response per group; ``domains`` gives each response's domain id."""
    return from_lists(
        rewards,
        list(range(len(rewards))),
        advantages=advantages,
        domain_ids=torch.tensor(domains),
        domains=DOMAINS,
        step=step,
    )


def _floored(raw, floor=0.05):
    return [floor + (1 - 3 * floor) * r for r in raw]


def _softmax(xs):
    e = [math.exp(x - max(xs)) for x in xs]
    return [v / sum(e) for v in e]


def test_reward_gap_from_domain_reward():
    # mean rewards a .6, b .5, c .2 -> gaps 0, .1, .4 -> / T=.1 -> 0, 1, 4 -> softmax
    s = Strategy({"mix": {"preset": "reward_gap", "warmup_steps": 1, "every": 1}}, domains=DOMAINS)
    # a's responses .8, 1.0, 0.0 pool to a mean of .6
    d = s.decide(_batch([0.8, 0.5, 0.2, 1.0, 0.0], [0, 1, 2, 0, 0]))
    means = [0.6, 0.5, 0.2]
    gaps = [(max(means) - m) / 0.1 for m in means]
    assert d.proportions.tolist() == pytest.approx(_floored(_softmax(gaps)))
    assert s.signal.tolist() == pytest.approx(means)
    assert type(s.parts["mix"][0]).__name__ == "DomainReward"


def test_dump_ucb_from_advantage_magnitude_and_counts():
    # a: 3 responses with |A| = .5; b: 1 response with |A| = .2; c: none (unobserved ->
    # the mean of the observed signals, (.5 + .2) / 2 = .35)
    # drawn 3, 1, 0 -> N = 4; n_d clamped to >= 1 in the bonus: 3, 1, 1;
    # bonus_d = sqrt(2 ln 4 / n_d)
    s = Strategy({"mix": {"preset": "dump_ucb", "warmup_steps": 1, "every": 1}}, domains=DOMAINS)
    d = s.decide(_batch([1.0, 0.0, 1.0, 0.0], [0, 0, 0, 1], advantages=[0.5, -0.5, 0.5, 0.2]))
    n = [3, 1, 1]
    value = [
        0.5 + math.sqrt(2 * math.log(4) / n[0]),
        0.2 + math.sqrt(2 * math.log(4) / n[1]),
        0.35 + math.sqrt(2 * math.log(4) / n[2]),
    ]
    assert d.proportions.tolist() == pytest.approx(_floored(_softmax([v / 0.1 for v in value])))
    assert s.signal.tolist() == pytest.approx([0.5, 0.2, 0.0])
    assert s.state_dict()["drawn"].tolist() == [3, 1, 0]


def test_tscl_from_learning_progress_known_slope():
    # a: per-step mean reward .1, .2, .3 -> slope .1; b: .5 each step -> 0; c: 0 -> 0
    # softmax(progress / .01) = softmax(10, 0, 0)
    s = Strategy({"mix": {"preset": "tscl", "warmup_steps": 3, "every": 1}}, domains=DOMAINS)
    for step, r in enumerate([0.1, 0.2, 0.3]):
        d = s.decide(_batch([r, r, 0.5, 0.0], [0, 0, 1, 2], step=step))
    assert s.signal.tolist() == pytest.approx([0.1, 0.0, 0.0])
    assert d.proportions.tolist() == pytest.approx(_floored(_softmax([10.0, 0.0, 0.0])))


def test_signals_are_not_mixed_up():
    # same rewards, different advantages: reward_gap does not move, dump_ucb does
    def run(preset, adv):
        s = Strategy({"mix": {"preset": preset, "warmup_steps": 1, "every": 1}}, domains=DOMAINS)
        return s.decide(_batch([1.0, 0.0, 0.5], [0, 1, 2], advantages=adv)).proportions

    assert torch.equal(run("reward_gap", [0.1, 0.1, 0.1]), run("reward_gap", [2.0, 0.1, 0.1]))
    assert not torch.allclose(run("dump_ucb", [0.1, 0.1, 0.1]), run("dump_ucb", [2.0, 0.1, 0.1]))


def test_window_counts_steps_through_the_strategy():
    # window 1: only the last step counts, however many responses the earlier step had
    spec = {"mix": {"preset": "reward_gap", "scorer": {"window": 1}, "warmup_steps": 1, "every": 1}}
    s = Strategy(spec, domains=DOMAINS)
    s.decide(_batch([0.0] * 50 + [1.0, 1.0], [0] * 50 + [1, 2]))
    s.decide(_batch([1.0, 0.0, 1.0], [0, 1, 2], step=1))
    assert s.signal.tolist() == [1.0, 0.0, 1.0]


def test_floor_holds_after_renormalization():
    # a huge gap puts all raw mass on one domain; every domain still gets >= floor .1
    s = Strategy(
        {
            "mix": {
                "preset": "reward_gap",
                "warmup_steps": 1,
                "every": 1,
                "actuator": {"floor": 0.1, "temperature": 1e-3},
            }
        },
        domains=DOMAINS,
    )
    p = s.decide(_batch([1.0, 1.0, 0.0], [0, 1, 2])).proportions
    assert p.tolist() == pytest.approx([0.1, 0.1, 0.8])
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12) and float(p.min()) >= 0.1 - 1e-12


def test_apply_floor():
    # p = floor + (1 - D floor) raw, raw renormalized first: raw [2, 0, 2] -> [.5, 0, .5]
    assert apply_floor(torch.tensor([2.0, 0.0, 2.0]), 0.1).tolist() == pytest.approx(
        [0.1 + 0.7 * 0.5, 0.1, 0.1 + 0.7 * 0.5]
    )
    # all zero (or NaN) raw -> uniform, never NaN
    assert apply_floor(torch.zeros(4), 0.1).tolist() == pytest.approx([0.25] * 4)
    assert apply_floor(torch.tensor([float("nan"), 1.0]), 0.0).tolist() == [0.5, 0.5]


def test_floor_times_domains_above_one_is_rejected_at_build():
    spec = {"mix": {"preset": "reward_gap", "actuator": {"floor": 0.4}}}
    with pytest.raises(ConfigError, match=r"mix\.actuator\.floor: 0\.4 \* 3 domains > 1"):
        Strategy(spec, domains=DOMAINS)
    Strategy(spec, domains=("a", "b"))  # 0.8 <= 1 is fine


def test_schedule_prior_before_warmup_then_every_n_steps():
    # dump_ucb preset: warm-up 5, update every 5 (counted in observed steps)
    s = Strategy("dump_ucb", domains=DOMAINS)
    uniform = [1 / 3] * 3
    updated = []
    for step in range(12):
        d = s.decide(_batch([1.0, 0.0, 1.0], [0, 0, 1], advantages=[1.0, -1.0, 0.1], step=step))
        updated.append(d.metrics["dataflex/mix/updated"])
        if step < 4:
            assert d.proportions is None and s.proportions.tolist() == pytest.approx(uniform)
    assert [i for i, u in enumerate(updated) if u] == [4, 9]  # after 5 and 10 observed steps
    assert s.proportions.tolist() != pytest.approx(uniform)


def test_prior_is_used_before_warmup():
    s = Strategy(
        {"mix": {"preset": "reward_gap", "prior": {"a": 2, "b": 1, "c": 1}}}, domains=DOMAINS
    )
    # floor .05: p = .05 + .85 * [.5, .25, .25]
    assert s.proportions.tolist() == pytest.approx(_floored([0.5, 0.25, 0.25]))
    with pytest.raises(ConfigError, match=r"mix\.prior: unknown domain"):
        Strategy({"mix": {"preset": "reward_gap", "prior": {"z": 1}}}, domains=DOMAINS)
    with pytest.raises(ConfigError, match=r"mix\.prior: needs 3 values"):
        Strategy({"mix": {"preset": "reward_gap", "prior": [1, 1]}}, domains=DOMAINS)
    with pytest.raises(ConfigError, match=r"mix\.prior: .*positive sum"):
        Strategy({"mix": {"preset": "reward_gap", "prior": [0, 0, 0]}}, domains=DOMAINS)


def test_static_proportions():
    s = Strategy(
        {"mix": {"actuator": {"name": "static", "proportions": [2, 1, 1]}}}, domains=DOMAINS
    )
    assert s.proportions.tolist() == pytest.approx([0.5, 0.25, 0.25])
    for step in range(3):
        s.decide(_batch([1.0, 0.0], [0, 1], step=step))
    assert s.proportions.tolist() == pytest.approx([0.5, 0.25, 0.25])
    prior = torch.tensor([0.3, 0.7], dtype=torch.float64)
    assert Static().raw_proportions(None, None, torch.zeros(2), prior).tolist() == [0.3, 0.7]


# ---------------------------------------------------------------- raw_proportions directly
def test_fill_unobserved():
    v = torch.tensor([1.0, 5.0, 3.0])
    assert fill_unobserved(v, torch.tensor([True, False, True])).tolist() == [1.0, 2.0, 3.0]
    assert fill_unobserved(v, torch.tensor([False] * 3)).tolist() == [1.0, 5.0, 3.0]


def test_mixers_fall_back_to_the_prior_with_no_observation():
    prior = torch.tensor([0.2, 0.8], dtype=torch.float64)
    none = torch.tensor([False, False])
    zeros = torch.zeros(2, dtype=torch.float64)
    assert RewardGap().raw_proportions(zeros, none, torch.zeros(2), prior).tolist() == [0.2, 0.8]
    assert SoftmaxMixer().raw_proportions(zeros, none, torch.zeros(2), prior).tolist() == [0.2, 0.8]
    # UCB with nothing drawn: equal bonuses -> uniform
    p = UCB().raw_proportions(zeros, none, torch.zeros(2, dtype=torch.int64), prior)
    assert p.tolist() == pytest.approx([0.5, 0.5])


def test_ucb_bonus_favours_rarely_drawn_domains():
    # equal values; n = 100 vs 1: bonus sqrt(2 ln 101 / 1) >> sqrt(2 ln 101 / 100)
    v = torch.tensor([0.5, 0.5], dtype=torch.float64)
    p = UCB(c=1.0, temperature=1.0).raw_proportions(
        v, torch.tensor([True, True]), torch.tensor([100, 1]), None
    )
    b0, b1 = math.sqrt(2 * math.log(101) / 100), math.sqrt(2 * math.log(101) / 1)
    assert p.tolist() == pytest.approx(_softmax([0.5 + b0, 0.5 + b1]))
    # c = 0: no bonus -> equal values -> uniform
    p = UCB(c=0.0).raw_proportions(v, torch.tensor([True, True]), torch.tensor([100, 1]), None)
    assert p.tolist() == pytest.approx([0.5, 0.5])


def test_batch_domains_must_match_the_strategy():
    s = Strategy("reward_gap", domains=("a", "b"))
    with pytest.raises(ValueError, match="differ from the strategy"):
        s.decide(_batch([1.0], [0]))


def test_mix_needs_domain_names():
    with pytest.raises(ConfigError, match="must give the domain names"):
        Strategy("reward_gap")


def test_static_proportions_that_do_not_fit_the_domains_name_the_key():
    with pytest.raises(ConfigError, match=r"^s\.mix\.actuator: static\.proportions: needs 3"):
        Strategy(
            {"name": "s", "mix": {"actuator": {"name": "static", "proportions": [1, 2]}}},
            domains=DOMAINS,
        )
    with pytest.raises(ConfigError, match=r"^s\.mix\.actuator: .*unknown domain"):
        Strategy(
            {"name": "s", "mix": {"actuator": {"name": "static", "proportions": {"z": 1.0}}}},
            domains=DOMAINS,
        )
