"""``random_groups``: the hashed random drop of informative groups (the drop_half control)."""

import hashlib
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl import Strategy
from dataflex_rl.core.batch import clean_rewards, from_lists
from dataflex_rl.core.strategy import StrategyWarning
from dataflex_rl.select.random_groups import RandomGroups, group_uniforms, key_hash, mix32
from tests.property import oracles
from tests.strategies import rollout_batches

# groups a, b, c, d of two responses; a and d have two different rewards (informative),
# b is all-correct and c all-wrong (no signal)
REWARDS = [1, 0, 1, 1, 0, 0, 1, 0]
GROUPS = [0, 0, 1, 1, 2, 2, 3, 3]
KEYS = ("a", "a", "b", "b", "c", "c", "d", "d")


def batch(step=3, rewards=REWARDS, groups=GROUPS, keys=KEYS, **kw):
    return from_lists(rewards, groups, prompt_keys=keys, step=step, **kw)


def keep(b, **params):
    return RandomGroups(**params).select(b.rewards, b).tolist()


def test_hand_worked_draws_and_decisions():
    # u_g = mix32(k_g ^ mix32(3 ^ mix32(0))) / 2**32 at step 3, salt 0:
    #   a 0.3776, b 0.7044, c 0.6616, d 0.5722
    u = group_uniforms(batch(), 0)
    assert u.tolist() == pytest.approx([0.3776, 0.7044, 0.6616, 0.5722], abs=1e-4)
    # fraction 0.5: only a is informative with u < 0.5
    assert keep(batch()) == [False, False, True, True, True, True, True, True]
    # fraction 0.6: d (0.5722) goes too; b and c stay whatever their draw (no signal)
    assert keep(batch(), fraction=0.6) == [False, False, True, True, True, True, False, False]
    # fraction 0.8: b (0.7044) and c (0.6616) would be drawn, but they are not informative
    assert keep(batch(), fraction=0.8) == [False, False, True, True, True, True, False, False]
    # step 4 draws again: a 0.0334, b 0.4989, c 0.9323, d 0.7229 -> only a dropped at 0.5
    assert group_uniforms(batch(step=4), 0).tolist() == pytest.approx(
        [0.0334, 0.4989, 0.9323, 0.7229], abs=1e-4
    )
    assert keep(batch(step=4)) == [False, False, True, True, True, True, True, True]


def test_hash_is_the_documented_formula():
    # mix32(1) by hand: 1 * 0x21f0aaad = 0x21f0aaad; ^ (>> 15 = 0x43e1) = 0x21f0e94c;
    # * 0x735a2d97 mod 2**32, ^ (>> 15) = 0x86d2fa73
    assert mix32(0) == 0 and mix32(1) == 0x86D2FA73
    x = torch.tensor([0, 1, 2**31, 2**32 - 1, 123456789], dtype=torch.int64)
    assert mix32(x).tolist() == [mix32(int(v)) for v in x]  # no int64 overflow
    assert key_hash("a") == int.from_bytes(hashlib.blake2b(b"sa", digest_size=4).digest(), "little")
    assert key_hash(7) == key_hash(torch.tensor(7).item()) != key_hash("7")


def test_fraction_zero_and_one():
    assert keep(batch(), fraction=0.0) == [True] * 8
    # fraction 1 drops every informative group (u < 1 always), keeps the others
    assert keep(batch(), fraction=1.0) == [False, False, True, True, True, True, False, False]


def test_no_signal_groups_and_batches_are_kept():
    # a single response, and a batch where every group has one reward: nothing to drop
    one = from_lists([1.0, 0.5, 0.5, 0.0], [0, 1, 1, 2], prompt_keys=("x", "y", "y", "z"))
    assert keep(one, fraction=1.0) == [True] * 4
    assert keep(batch(rewards=[1, 1, 0, 0, 1, 1, 0, 0]), fraction=1.0) == [True] * 8
    empty = from_lists([], [])
    assert keep(empty) == []


def test_padding_and_invalid_rows_are_never_kept():
    pad = torch.tensor([False, False, True, False, False, False, False, True])
    b = batch(rewards=[1, 0, 1, 1, 0, 0, 1, float("nan")], is_padding=pad)
    # d has one active response left (the NaN row is invalid): no signal, kept
    assert keep(b, fraction=1.0) == [False, False, False, True, True, True, True, False]


def test_decisions_follow_the_prompt_key_not_the_row_order():
    perm = torch.tensor([6, 0, 3, 1, 7, 4, 2, 5])
    groups = [2, 0, 3, 0, 2, 1, 3, 1]  # dense ids in a new order
    b = batch(rewards=[REWARDS[i] for i in perm], groups=groups, keys=tuple(KEYS[i] for i in perm))
    assert keep(b, fraction=0.6) == [keep(batch(), fraction=0.6)[i] for i in perm]
    # without prompt keys the group index is hashed instead, still deterministic
    nokeys = from_lists(REWARDS, GROUPS, step=3)
    assert keep(nokeys) == keep(nokeys)


def test_share_dropped_is_the_fraction_and_steps_are_independent():
    n = 4000
    rewards = [1.0, 0.0] * n
    groups = [g for g in range(n) for _ in (0, 1)]
    keys = tuple(f"q{g}" for g in groups)
    drop = [
        ~torch.tensor(keep(from_lists(rewards, groups, prompt_keys=keys, step=t), fraction=0.3))[
            ::2
        ]
        for t in (0, 1)
    ]
    for d in drop:  # binomial(4000, 0.3): sd 0.0072
        assert float(d.float().mean()) == pytest.approx(0.3, abs=0.03)
    both = float((drop[0] & drop[1]).float().mean())
    assert both == pytest.approx(0.09, abs=0.02)  # independent: 0.3 * 0.3
    salted = ~torch.tensor(
        keep(from_lists(rewards, groups, prompt_keys=keys, step=0), fraction=0.3, salt=1)
    )[::2]
    assert float((drop[0] & salted).float().mean()) == pytest.approx(0.09, abs=0.02)


def test_in_a_strategy_the_loss_keeps_the_full_denominator():
    s = Strategy({"name": "harm", "select": {"actuator": "random_groups"}})
    d = s.decide(batch(advantages=[0.7, -0.7, 0, 0, 0, 0, 0.7, -0.7]))
    assert d.keep_mask.tolist() == [False, False, True, True, True, True, True, True]
    assert not d.renormalizes and d.advantages is None
    assert d.metrics["dataflex/select/renormalize"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", StrategyWarning)  # groups without signal stay
        Strategy({"select": {"actuator": {"name": "random_groups", "fraction": 1.0}}}).decide(
            batch()
        )


@settings(max_examples=60, deadline=None)
@given(rollout_batches(), st.sampled_from([0.0, 0.3, 0.5, 1.0]), st.integers(0, 3))
def test_vectorized_equals_the_loop_oracle(b, fraction, salt):
    keep = RandomGroups(fraction=fraction, salt=salt).select(clean_rewards(b), b)
    rs = oracles.rows(b)
    expected = [False] * b.batch_size
    for g in range(b.num_groups):
        act = [i for i, r in enumerate(rs) if r["g"] == g and oracles.active(r)]
        if not act:
            continue
        first = min(i for i, r in enumerate(rs) if r["g"] == g)
        k = key_hash(b.prompt_keys[first]) if b.prompt_keys is not None else mix32(g)
        u = mix32(k ^ mix32((b.step & 0xFFFFFFFF) ^ mix32(salt))) / 2**32
        informative = len({rs[i]["r"] for i in act}) > 1
        for i in act:
            expected[i] = not (informative and u < fraction)
    assert keep.tolist() == expected
