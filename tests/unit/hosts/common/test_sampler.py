"""Carried apportionment (`apportion`) and the proportional domain sampler."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.sampler import (
    DomainSampler,
    apportion,
    draw_mass,
    draw_metrics,
    interleave,
)
from tests.states import assert_moved

P = torch.tensor
ZERO3 = torch.zeros(3, dtype=torch.float64)
OPEN3 = P([1000, 1000, 1000])


def first_draw(p, n, capacity=None):
    p = P(p, dtype=torch.float64)
    cap = P([n] * p.shape[0]) if capacity is None else P(capacity)
    return apportion(p, n, cap, torch.zeros(p.shape[0], dtype=torch.float64))


def test_first_draw_hand_worked():
    # mass 3.5, 2.1, 1.4 -> floors 3, 2, 1; the 7th prompt falls due soonest for domain 0:
    # (1 - .5) / .5 = 1 of the draw, against (1 - .1) / .3 = 3 and (1 - .4) / .2 = 3
    counts, deficit = first_draw([0.5, 0.3, 0.2], 7)
    assert counts.tolist() == [4, 2, 1]
    assert deficit.tolist() == pytest.approx([-0.5, 0.1, 0.4])
    # mass 1.2, 4.8 (unnormalized input is fine): due (1 - .2) / .2 = 4 vs .2 / .8 -> [1, 5]
    assert first_draw([1.0, 4.0], 6)[0].tolist() == [1, 5]
    # an integral mass is drawn exactly, with nothing carried
    counts, deficit = first_draw([0.25, 0.5, 0.25], 16)
    assert counts.tolist() == [4, 8, 4] and deficit.tolist() == [0.0, 0.0, 0.0]


def test_the_deficit_makes_up_the_rounding_of_earlier_draws():
    # 4 over 3 equal domains: 1.33 each, the extra one to domain 0 (tie: lower index) ...
    counts, deficit = first_draw([1.0, 1.0, 1.0], 4)
    assert counts.tolist() == [2, 1, 1]
    assert deficit.tolist() == pytest.approx([-2 / 3, 1 / 3, 1 / 3])
    # ... and the next draw of 2 owes 0, 1, 1 (0.67 more each): domains 1 and 2, not 0 and 1
    counts, deficit = apportion(P([1.0, 1.0, 1.0]), 2, OPEN3, deficit)
    assert counts.tolist() == [0, 1, 1]
    assert deficit.tolist() == pytest.approx([0.0, 0.0, 0.0])


def test_one_prompt_draws_go_round_the_domains():
    deficit, seen = ZERO3, []
    for _ in range(6):
        counts, deficit = apportion(P([1.0, 1.0, 1.0]), 1, OPEN3, deficit)
        seen.append(int(counts.argmax()))
    assert seen == [0, 1, 2, 0, 1, 2]  # a plain rounding draws domain 0 every time


def test_zero_n_and_zero_proportion():
    counts, deficit = first_draw([0.5, 0.5], 0)
    assert counts.tolist() == [0, 0] and deficit.tolist() == [0.0, 0.0]
    assert first_draw([0.0, 1.0, 0.0], 5)[0].tolist() == [0, 5, 0]
    assert first_draw([0.5, 0.5], 1)[0].dtype == torch.int64


def test_capacity_reallocates_in_proportion():
    # domain 0 can give only 2 of its 5; the 3 left go to 1 and 2 in proportion 1 : 1
    assert draw_mass(P([0.5, 0.25, 0.25]), 10, P([2, 100, 100])).tolist() == [2.0, 4.0, 4.0]
    counts, deficit = first_draw([0.5, 0.25, 0.25], 10, [2, 100, 100])
    assert counts.tolist() == [2, 4, 4] and deficit.tolist() == [0.0, 0.0, 0.0]
    # total capacity below n: everything available, sum = capacity.sum()
    assert first_draw([0.2, 0.8], 10, [3, 4])[0].tolist() == [3, 4]
    # the only domain with proportion > 0 is full: the rest is spread evenly over open ones
    assert first_draw([1.0, 0.0, 0.0], 5, [1, 10, 10])[0].tolist() == [1, 2, 2]
    # a domain with no capacity carries no deficit, and what it was owed goes to the others
    counts, deficit = apportion(P([1.0, 1.0, 1.0]), 3, P([0, 3, 3]), P([0.5, -0.25, -0.25]))
    assert counts.tolist() == [0, 2, 1]
    assert deficit.tolist() == pytest.approx([0.0, -0.75, 0.25])


@pytest.mark.parametrize(
    "p, n",
    [
        ([-0.1, 1.1], 3),
        ([float("nan"), 1.0], 3),
        ([0.5, 0.5], -1),
        ([0.0, 0.0], 3),
    ],
)
def test_apportion_rejects_bad_input(p, n):
    with pytest.raises(ValueError, match="proportions"):
        first_draw(p, n)


def cumulative_error(p: list[float], sizes: list[int]) -> float:
    """The largest |drawn - owed| of any domain after any draw of ``sizes`` through one
    sampler (plain-loop oracle of what each domain is owed: its share of every draw)."""
    s = DomainSampler([1000] * len(p), [f"d{i}" for i in range(len(p))], seed=0)
    total = sum(p)
    drawn = [0] * len(p)
    owed = [0.0] * len(p)
    worst = 0.0
    for n in sizes:
        counts = s.quota(P(p, dtype=torch.float64), n).tolist()
        assert sum(counts) == n
        for d in range(len(p)):
            drawn[d] += counts[d]
            owed[d] += p[d] / total * n
            worst = max(worst, abs(drawn[d] - owed[d]))
    return worst


def test_300_one_prompt_draws_over_3_equal_domains_stay_within_one():
    assert cumulative_error([1.0, 1.0, 1.0], [1] * 300) < 1.0


@pytest.mark.parametrize("p", [[1.0, 1.0, 1.0], [0.25, 0.5, 0.25], [0.7, 0.2, 0.1]])
def test_cycling_draw_sizes_stay_within_one(p):
    assert cumulative_error(p, [1, 2, 3, 5] * 75) < 1.0


def test_random_draw_sizes_and_skewed_mixes_stay_within_one():
    rng = random.Random(0)
    for _ in range(40):
        p = [rng.random() ** 3 + 1e-3 for _ in range(rng.randint(2, 6))]
        assert cumulative_error(p, [rng.randint(1, 40) for _ in range(60)]) < 1.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.01, 1.0), min_size=2, max_size=5),
    st.lists(st.integers(1, 12), min_size=1, max_size=80),
)
def test_any_mix_and_draw_sizes_stay_within_one(p, sizes):
    assert cumulative_error(p, sizes) < 1.0 + 1e-9


def test_a_changed_mix_keeps_the_carried_deficit():
    # (.5, .5): a (tie), b owed .5; (1, 0): a again, b still owed .5 (it owes nothing new);
    # (.5, .5): b is owed 1, a 0 -> b (a plain rounding would give a all three)
    s = DomainSampler([10, 10], ("a", "b"), seed=0)
    assert s.quota(P([0.5, 0.5]), 1).tolist() == [1, 0]
    assert s.quota(P([1.0, 0.0]), 1).tolist() == [1, 0]
    assert s.state_dict()["deficit"].tolist() == pytest.approx([-0.5, 0.5])
    assert s.quota(P([0.5, 0.5]), 1).tolist() == [0, 1]


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
    # 3 x 4 at (.6, .4): 7.2, 4.8 owed, 7, 5 drawn -> .2 carried (not a multiple of 4 x .6)
    assert state["deficit"].tolist() == pytest.approx([0.2, -0.2], abs=1e-6)
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


def test_interleave_spreads_each_domain_over_the_draw():
    # 4, 2, 1 of 7; 7 x (owed - given) after each position, the soonest due (7 - e) / c:
    # (4, 2, 1) -> a (.75); (1, 4, 2) -> a (1.5, tie with b); (-2, 6, 3) -> b (.5);
    # (2, 1, 4) -> a (1.25); (-1, 3, 5) -> b (2, tie with c); (3, -2, 6) -> a (1, tie); c
    doms = P([0, 0, 0, 0, 1, 1, 2])
    order = interleave(doms)
    assert doms[order].tolist() == [0, 0, 1, 0, 1, 0, 2]
    assert order.tolist() == [0, 1, 4, 2, 5, 3, 6]  # each domain's prompts keep their order
    assert sorted(order.tolist()) == list(range(7))
    assert interleave(P([2, 0, 2, 0])).tolist() == [1, 0, 3, 2]
    # ordering each domain's k-th of c prompts at (k + 1/2) / c gives 3, 3, 0, 1, 2, 3, 3, 3:
    # its first 5 hold 2 of domain 3, owed 5 x 5/8 = 3.1 (1.1 short)
    doms = P([0, 1, 2, 3, 3, 3, 3, 3])
    assert doms[interleave(doms)].tolist() == [3, 3, 0, 3, 3, 1, 2, 3]
    assert interleave(torch.zeros(0, dtype=torch.int64)).tolist() == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60))
def test_every_prefix_of_an_interleaved_draw_holds_each_domain_within_one_of_its_share(doms):
    d = P(doms)
    seq = d[interleave(d)].tolist()
    n = len(doms)
    for m in range(1, n + 1):
        for k in set(doms):
            assert abs(seq[:m].count(k) - m * doms.count(k) / n) < 1.0 + 1e-9
