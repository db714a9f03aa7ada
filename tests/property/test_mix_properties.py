"""Proportions stay on the simplex with the floor; learning progress equals numpy's polyfit;
the carried apportionment equals a plain-loop oracle; the sampler follows it."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.proportions import apply_floor
from dataflex_rl.hosts.common.sampler import DomainSampler, apportion
from dataflex_rl.mix.mixers import UCB, RewardGap, SoftmaxMixer
from dataflex_rl.scorers.domain import LearningProgress
from tests.hand_worked import check_component, check_hand_worked
from tests.property import oracles
from tests.strategies import DOMAINS, rollout_batches

signal = st.floats(-5.0, 5.0, allow_nan=False)


@given(
    st.integers(1, 6).flatmap(
        lambda D: st.tuples(
            st.lists(signal, min_size=D, max_size=D),
            st.lists(st.booleans(), min_size=D, max_size=D),
            st.lists(st.integers(0, 1000), min_size=D, max_size=D),
            # the floor is declared < 1: with one domain, 1.0 itself is out of range
            st.floats(0.0, 1.0 / D, exclude_max=D == 1),
            st.sampled_from([1e-3, 0.01, 0.1, 1.0, 10.0]),
        )
    ),
    st.sampled_from(["reward_gap", "ucb", "softmax"]),
)
def test_proportions_on_the_simplex_with_the_floor(args, mixer):
    check_component("mixer", mixer)  # uniform proportions stay on the simplex too
    values, observed, drawn, floor, T = args
    D = len(values)
    m = {"reward_gap": RewardGap, "ucb": UCB, "softmax": SoftmaxMixer}[mixer](
        temperature=T, floor=floor
    )
    prior = torch.full((D,), 1.0 / D, dtype=torch.float64)
    raw = m.raw_proportions(
        torch.tensor(values, dtype=torch.float64),
        torch.tensor(observed),
        torch.tensor(drawn),
        prior,
    )
    assert torch.isfinite(raw).all() and (raw >= 0).all()
    assert float(raw.sum()) == pytest.approx(1.0)
    p = apply_floor(raw, floor)
    assert torch.isfinite(p).all()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(p.min()) >= floor - 1e-12


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.floats(0.0, 0.3))
def test_apply_floor_on_any_raw_input(raw, floor):
    # hand-worked: .1 + (1 - 3 x .1) x (1, 0, 0) = (.8, .1, .1); all-zero raw gives uniform
    assert apply_floor(torch.tensor([2.0, 0.0, 0.0]), 0.1).tolist() == pytest.approx(
        [0.8, 0.1, 0.1]
    )
    assert apply_floor(torch.zeros(2), 0.2).tolist() == [0.5, 0.5]
    D = len(raw)
    floor = min(floor, 1.0 / D)
    p = apply_floor(torch.tensor(raw, dtype=torch.float64), floor)
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12) and float(p.min()) >= floor - 1e-12


@given(
    st.lists(
        st.lists(
            st.one_of(st.none(), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4)),
            min_size=2,
            max_size=2,
        ),
        min_size=1,
        max_size=9,
    ),
    st.integers(1, 5),
    st.booleans(),
)
def test_learning_progress_equals_polyfit(steps, window, signed):
    """``steps``: per step, per domain, the rewards of its responses (None: not drawn)."""
    sc = LearningProgress(window=window, signed=signed)
    for step, per_domain in enumerate(steps):
        rewards, domains = [], []
        for d, rs in enumerate(per_domain):
            for r in rs or []:
                rewards.append(r)
                domains.append(d)
        sc.observe(
            from_lists(
                rewards,
                list(range(len(rewards))) if rewards else [],
                domain_ids=torch.tensor(domains, dtype=torch.int64),
                domains=("a", "b"),
                step=step,
            )
        )
    values, observed = sc.values(2)
    recent = list(enumerate(steps))[-window:]
    for d in range(2):
        # rewards are float32 in a batch
        pts = [
            (x, float(np.mean(np.float32(per[d]).astype(np.float64))))
            for x, per in recent
            if per[d]
        ]
        if len(pts) < 2:
            assert float(values[d]) == 0.0 and not bool(observed[d])
            continue
        slope = np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)[0]
        expected = max(slope, 0.0) if signed else abs(slope)
        assert bool(observed[d])
        assert float(values[d]) == pytest.approx(expected, rel=1e-7, abs=1e-9)


@given(
    st.lists(st.floats(0.0, 10.0), min_size=1, max_size=6).filter(lambda p: sum(p) > 0),
    st.integers(0, 200),
    st.booleans(),
    st.data(),
)
def test_apportion_equals_the_loop_oracle(p, n, capped, data):
    D = len(p)
    cap = data.draw(st.lists(st.integers(0, 60), min_size=D, max_size=D)) if capped else [n] * D
    deficit = data.draw(st.lists(st.floats(-0.99, 0.99), min_size=D, max_size=D))
    out, left = apportion(
        torch.tensor(p, dtype=torch.float64),
        n,
        torch.tensor(cap),
        torch.tensor(deficit, dtype=torch.float64),
    )
    counts, owed_left = oracles.apportion(p, n, cap, deficit)
    assert out.tolist() == counts
    assert left.tolist() == pytest.approx(owed_left, abs=1e-12)
    assert int(out.sum()) == min(n, sum(cap)) and (out >= 0).all()
    assert all(c <= k for c, k in zip(out.tolist(), cap))
    if not capped and not any(deficit):
        # a first draw: never more than one prompt away from the exact share
        share = [x / sum(p) * n for x in p]
        assert all(abs(c - q) < 1 for c, q in zip(out.tolist(), share))


@given(
    st.lists(st.integers(0, 12), min_size=1, max_size=4).filter(any),
    st.lists(
        st.tuples(st.lists(st.floats(0.01, 1.0), min_size=4, max_size=4), st.integers(0, 15)),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
    st.integers(0, 10),
)
def test_sampler_follows_the_carried_apportionment_and_never_repeats_within_an_epoch(
    pools, draws, cycle, seed
):
    D = len(pools)
    s = DomainSampler(pools, DOMAINS[:D] + tuple(f"d{i}" for i in range(D - 3)), seed, cycle)
    seen = [[] for _ in range(D)]
    deficit = [0.0] * D
    for p, n in draws:
        p = p[:D]
        cap = [n if k > 0 else 0 for k in pools] if cycle else s.available().tolist()
        expected, after = oracles.apportion(p, n, cap, deficit)
        if n > 0 and sum(expected) == 0:
            with pytest.raises(RuntimeError):
                s.sample(torch.tensor(p, dtype=torch.float64), n)
            continue
        deficit = after
        drawn, m = s.sample(torch.tensor(p, dtype=torch.float64), n)
        assert [sum(1 for d, _ in drawn if d == k) for k in range(D)] == expected
        assert s.state_dict()["deficit"].tolist() == pytest.approx(deficit, abs=1e-12)
        for d, i in drawn:
            assert 0 <= i < pools[d]
            seen[d].append(i)
        assert m["dataflex/sampler/shortfall"] == n - sum(expected)
    for d in range(D):
        for start in range(0, len(seen[d]), max(pools[d], 1)):  # each epoch: no repeats
            epoch = seen[d][start : start + pools[d]]
            assert len(set(epoch)) == len(epoch)


@given(rollout_batches(num_domains=3, max_groups=4), st.integers(0, 3))
def test_strategy_proportions_always_on_the_simplex(b, extra_steps):
    for preset in ("reward_gap", "dump_ucb", "tscl", "static"):
        check_hand_worked(preset)
        s = Strategy({"mix": {"preset": preset, "warmup_steps": 1, "every": 1}}, domains=DOMAINS)
        for step in range(1 + extra_steps):
            s.decide(b.replace(step=step))
        p = s.proportions
        floor = s.parts["mix"][1].floor
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
        assert float(p.min()) >= floor - 1e-12 and torch.isfinite(p).all()
