"""The curriculum's draw equals a plain loop: estimated pass rates, the target, the weights,
and which prompts each domain draws (the same uniforms, picked one by one), on random
histories, settings and mixes; the domain counts are the plain draw's."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.intake import Intake
from tests.hand_worked import check_component

#: per domain, its pool's size
POOLS = st.lists(st.integers(1, 9), min_size=1, max_size=3)
#: one step's groups: (domain, item, rewards), items taken modulo the pool size
GROUPS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 8),
        st.lists(st.sampled_from([0.0, 0.2, 0.7, 1.0]), min_size=1, max_size=4),
    ),
    max_size=10,
)
UNIT = st.floats(0.0, 1.0, allow_nan=False)
PARAMS = st.fixed_dictionaries(
    {
        "schedule": st.sampled_from(["constant", "linear"]),
        "target": UNIT,
        "start": UNIT,
        "end": UNIT,
        "steps": st.integers(1, 12),
        "width": st.floats(0.02, 2.0),
        "floor": st.sampled_from([0.0, 0.0, 0.05, 0.5]),
        "prior": UNIT,
        "prior_weight": st.sampled_from([0.0, 0.0, 1.0, 3.5]),
    }
)


def _key(d: int, i: int) -> str:
    return f"d{d}-{i}"


def _oracle_log_weight(outcomes: list[list[float]], p: dict, step: int) -> tuple[float, float]:
    """(log-weight, estimated pass rate) of one prompt from its remembered groups' rewards,
    by hand."""
    succ = sum(sum(r > 0.5 for r in rs) for rs in outcomes)
    n = sum(len(rs) for rs in outcomes)
    m = p["prior_weight"]
    rate = (p["prior"] * m + succ) / (m + n) if m + n > 0 else p["prior"]
    if p["schedule"] == "constant":
        mu = p["target"]
    else:
        mu = p["start"] + (p["end"] - p["start"]) * min(step / p["steps"], 1.0)
    half_z2 = (rate - mu) ** 2 / (2 * p["width"] ** 2)
    if p["floor"] == 0:  # log of the Gaussian itself (its exp underflows far from mu)
        return -half_z2, rate
    return math.log(p["floor"] + (1 - p["floor"]) * math.exp(-half_z2)), rate


def _oracle_pick(log_weights: list[float], uniforms: list[float], k: int) -> list[int]:
    """``k`` items picked one by one: the largest log-weight + Gumbel noise not yet taken
    (ties: the lower index), whole passes again when ``k`` exceeds the pool."""
    keys = [
        lw - math.log(-math.log(u)) if u > 0 else -math.inf for lw, u in zip(log_weights, uniforms)
    ]
    order: list[int] = []
    left = list(range(len(keys)))
    while left:
        best = left[0]
        for i in left:
            if keys[i] > keys[best]:
                best = i
        order.append(best)
        left.remove(best)
    return [order[j % len(order)] for j in range(k)]


@settings(max_examples=300, deadline=None)
@given(
    POOLS,
    st.lists(GROUPS, max_size=3),
    PARAMS,
    st.integers(0, 15),
    st.integers(1, 12),
    st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_the_draw_equals_a_plain_loop(sizes, steps, params, step, n, props, size, seed):
    check_component("curriculum", "target_difficulty")  # a uniform draw fails there
    D = len(sizes)
    pools = [[_key(d, i) for i in range(s)] for d, s in enumerate(sizes)]
    strategy = Strategy(
        {
            "name": "c",
            "curriculum": {
                "actuator": {"name": "target_difficulty", **params},
                "history_size": size,
            },
        }
    )
    remembered: dict[str, list[list[float]]] = {}
    for t, groups in enumerate(steps):
        groups = [(d, i % sizes[d], rs) for d, i, rs in groups if d < D]
        if not groups:
            continue
        rewards, gids, keys = [], [], []
        for g, (d, i, rs) in enumerate(groups):
            rewards += rs
            gids += [g] * len(rs)
            keys += [_key(d, i)] * len(rs)
            remembered.setdefault(_key(d, i), []).append(rs)
            remembered[_key(d, i)] = remembered[_key(d, i)][-size:]
        strategy.decide(
            from_lists(rewards, gids, [1] * len(rewards), prompt_keys=tuple(keys), step=t)
        )
    # the weights and pass rates of every pool prompt, seen or not, against the loop
    keys = [k for pool in pools for k in pool]
    lw, rate = strategy.prompt_log_weights(strategy.history.outcomes(keys), step)
    oracle = [_oracle_log_weight(remembered.get(k, []), params, step) for k in keys]
    assert lw.tolist() == pytest.approx([o[0] for o in oracle], rel=1e-9, abs=1e-12)
    assert rate.tolist() == pytest.approx([o[1] for o in oracle], rel=1e-12, abs=1e-15)
    p = torch.tensor(props[:D], dtype=torch.float64) + 1e-3
    intake = Intake(pools, tuple(f"dom{d}" for d in range(D)), p, seeds=(seed, seed))
    plain = Intake(pools, tuple(f"dom{d}" for d in range(D)), p, seeds=(seed, seed))
    gen = torch.Generator()
    gen.set_state(intake.generator.get_state())
    items, doms, metrics = intake.draw(n, strategy, step)
    _, plain_doms, _ = plain.draw(n, Strategy("baseline"), step)
    assert doms == plain_doms  # the mix's counts are untouched
    # the oracle, domain by domain in id order, from the same generator's uniforms
    want: list[str] = []
    rates: list[float] = []
    for d in range(D):
        c = doms.count(d)
        lw, rate = zip(*(_oracle_log_weight(remembered.get(k, []), params, step) for k in pools[d]))
        rates += rate
        if c:
            u = torch.rand(len(pools[d]), dtype=torch.float64, generator=gen).tolist()
            want += [pools[d][j] for j in _oracle_pick(list(lw), u, c)]
    assert items == want
    assert metrics["dataflex/curriculum/pool_pass_rate"] == pytest.approx(
        sum(rates) / len(rates), rel=1e-9, abs=1e-12
    )
    assert metrics["dataflex/curriculum/target"] == pytest.approx(
        params["target"]
        if params["schedule"] == "constant"
        else params["start"] + (params["end"] - params["start"]) * min(step / params["steps"], 1.0),
        abs=1e-12,
    )
