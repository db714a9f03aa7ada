"""Largest-remainder allocation and the proportional domain sampler."""

import pytest
import torch

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.sampler import DomainSampler, draw_metrics, largest_remainder
from tests.states import assert_moved

P = torch.tensor


def test_largest_remainder_hand_worked():
    # quotas 3.5, 2.1, 1.4 -> floors 3, 2, 1 (6); 1 left -> largest fraction .5 -> domain 0
    assert largest_remainder(P([0.5, 0.3, 0.2]), 7).tolist() == [4, 2, 1]
    # quotas 1.2, 4.8 (unnormalized input is fine) -> 1, 4; 1 left -> .8 -> [1, 5]
    assert largest_remainder(P([1.0, 4.0]), 6).tolist() == [1, 5]


def test_largest_remainder_ties_go_to_the_lower_index():
    # 4 over 3 equal domains: 1.33 each -> 1, 1, 1, the extra unit to domain 0
    assert largest_remainder(P([1.0, 1.0, 1.0]), 4).tolist() == [2, 1, 1]
    assert largest_remainder(P([1.0, 1.0, 1.0]), 5).tolist() == [2, 2, 1]


def test_largest_remainder_zero_n_and_zero_proportion():
    assert largest_remainder(P([0.5, 0.5]), 0).tolist() == [0, 0]
    assert largest_remainder(P([0.0, 1.0, 0.0]), 5).tolist() == [0, 5, 0]
    assert largest_remainder(P([0.5, 0.5]), 1).dtype == torch.int64


def test_largest_remainder_capacity_reallocates_in_proportion():
    # domain 0 can give only 2 of its 5; the 3 left go to 1 and 2 in proportion 1 : 1
    # (1.5, 1.5 -> 1, 1, then the extra to the lower index)
    out = largest_remainder(P([0.5, 0.25, 0.25]), 10, capacity=P([2, 100, 100]))
    assert out.tolist() == [2, 5, 3]
    # total capacity below n: everything available, sum = capacity.sum()
    out = largest_remainder(P([0.2, 0.8]), 10, capacity=P([3, 4]))
    assert out.tolist() == [3, 4]
    # the only domain with proportion > 0 is full: the rest is spread evenly over open ones
    out = largest_remainder(P([1.0, 0.0, 0.0]), 5, capacity=P([1, 10, 10]))
    assert out.tolist() == [1, 2, 2]


@pytest.mark.parametrize(
    "p, n",
    [
        ([-0.1, 1.1], 3),
        ([float("nan"), 1.0], 3),
        ([0.5, 0.5], -1),
        ([0.0, 0.0], 3),
    ],
)
def test_largest_remainder_rejects_bad_input(p, n):
    with pytest.raises(ValueError):
        largest_remainder(P(p), n)


# ---------------------------------------------------------------- DomainSampler
def test_sampler_follows_proportions_and_reports_them():
    s = DomainSampler([100, 100, 100], ("a", "b", "c"), seed=1)
    drawn, m = s.sample(P([0.5, 0.3, 0.2]), 7)
    counts = [sum(1 for d, _ in drawn if d == k) for k in range(3)]
    assert counts == [4, 2, 1]
    assert [d for d, _ in drawn] == sorted(d for d, _ in drawn)  # grouped by domain
    assert m["dataflex/mix/domain/a/target"] == pytest.approx(0.5)
    assert m["dataflex/mix/domain/a/actual"] == pytest.approx(4 / 7)
    assert m["dataflex/mix/domain/c/prompts_available"] == 100.0
    assert m["dataflex/sampler/shortfall"] == 0.0


def test_sampler_is_deterministic_and_without_replacement_within_an_epoch():
    a = DomainSampler([5, 5], ("a", "b"), seed=3)
    b = DomainSampler([5, 5], ("a", "b"), seed=3)
    da = [a.sample(P([0.5, 0.5]), 4)[0] for _ in range(3)]
    db = [b.sample(P([0.5, 0.5]), 4)[0] for _ in range(3)]
    assert da == db
    first_epoch_a = [i for batch in da for d, i in batch if d == 0][:5]
    assert sorted(first_epoch_a) == [0, 1, 2, 3, 4]  # each item once before any repeats
    other = DomainSampler([5, 5], ("a", "b"), seed=4)
    assert [other.sample(P([0.5, 0.5]), 4)[0] for _ in range(3)] != da


def test_sampler_cycles_into_a_new_epoch():
    s = DomainSampler([3], ("a",), seed=0)
    drawn, _ = s.sample(P([1.0]), 5)
    items = [i for _, i in drawn]
    assert sorted(items[:3]) == [0, 1, 2] and len(items) == 5
    assert s.state_dict()["epoch"] == [1] and s.state_dict()["cursor"] == [2]


def test_exhausted_domains_without_cycling():
    s = DomainSampler([2, 10], ("a", "b"), seed=0, cycle=False)
    d1, m1 = s.sample(P([0.5, 0.5]), 4)
    assert [d for d, _ in d1] == [0, 0, 1, 1]
    assert m1["dataflex/mix/domain/a/prompts_available"] == 0.0
    d2, _ = s.sample(P([0.5, 0.5]), 4)  # a is exhausted: its share goes to b
    assert [d for d, _ in d2] == [1, 1, 1, 1]
    d3, m3 = s.sample(P([0.5, 0.5]), 6)  # b has 4 left: shortfall 2
    assert [d for d, _ in d3] == [1] * 4 and m3["dataflex/sampler/shortfall"] == 2.0
    all_b = [i for batch in (d1, d2, d3) for d, i in batch if d == 1]
    assert sorted(all_b) == list(range(10))  # every prompt of b exactly once
    with pytest.raises(RuntimeError, match="exhausted"):
        s.sample(P([0.5, 0.5]), 1)


def test_empty_pool_gets_nothing():
    s = DomainSampler([0, 4], ("a", "b"), seed=0)
    drawn, m = s.sample(P([0.9, 0.1]), 3)
    assert [d for d, _ in drawn] == [1, 1, 1]
    assert m["dataflex/mix/domain/a/prompts_available"] == 0.0


def test_sampler_state_round_trip():
    a = DomainSampler([7, 3], ("a", "b"), seed=5)
    for _ in range(3):
        a.sample(P([0.6, 0.4]), 4)
    state = a.state_dict()
    assert_moved(state, DomainSampler([7, 3], ("a", "b"), seed=5).state_dict())
    b = DomainSampler([7, 3], ("a", "b"), seed=99)
    b.load_state_dict(state)
    for _ in range(4):
        assert a.sample(P([0.3, 0.7]), 5) == b.sample(P([0.3, 0.7]), 5)
    with pytest.raises(ValueError, match="pools"):
        DomainSampler([7, 4], ("a", "b")).load_state_dict(state)


def test_sampler_checks_its_arguments():
    with pytest.raises(ValueError, match="2 pool sizes for 3 domains"):
        DomainSampler([1, 2], ("a", "b", "c"))


def test_draw_metrics_hand_worked_with_a_slash_in_a_domain():
    # target [2, 1, 1] normalizes to .5, .25, .25; drawn 3, 0, 1 of 4 -> .75, 0, .25
    m = draw_metrics(
        ("openai/gsm8k", "b c", "d"),
        P([2.0, 1.0, 1.0]),
        torch.tensor([3, 0, 1]),
        torch.tensor([10, 0, 5]),
    )
    assert m == {
        "dataflex/mix/domain/openai_gsm8k/target": 0.5,
        "dataflex/mix/domain/openai_gsm8k/actual": 0.75,
        "dataflex/mix/domain/openai_gsm8k/prompts_available": 10.0,
        "dataflex/mix/domain/b_c/target": 0.25,
        "dataflex/mix/domain/b_c/actual": 0.0,
        "dataflex/mix/domain/b_c/prompts_available": 0.0,
        "dataflex/mix/domain/d/target": 0.25,
        "dataflex/mix/domain/d/actual": 0.25,
        "dataflex/mix/domain/d/prompts_available": 5.0,
    }
    # nothing drawn: actual 0, not NaN
    m = draw_metrics(("a",), P([1.0]), torch.tensor([0]), torch.tensor([0]))
    assert m["dataflex/mix/domain/a/actual"] == 0.0


def test_sampler_refuses_domains_that_share_a_metric_name():
    with pytest.raises(ConfigError, match="'a b' and 'a_b'"):
        DomainSampler([1, 1], ("a b", "a_b"))
