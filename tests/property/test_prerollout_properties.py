"""Pre-rollout: the tensor-backed history, GRESO's runs and the per-domain take equal loops."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.hosts.common.accounting import first_per_domain
from dataflex_rl.prerollout.greso import Greso

#: one group outcome: (prompt key, rewards of its responses, tokens per response)
GROUPS = st.lists(
    st.tuples(
        st.sampled_from("abcdefgh"),
        st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=3),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=8,
)


def _batch(groups, step):
    rewards, gids, keys, lengths = [], [], [], []
    for g, (key, rs, t) in enumerate(groups):
        rewards += rs
        gids += [g] * len(rs)
        keys += [key] * len(rs)
        lengths += [t] * len(rs)
    return from_lists(rewards, gids, lengths, prompt_keys=tuple(keys), step=step)


def _history(steps, size):
    h = PromptHistory(size)
    for step, groups in enumerate(steps):
        h.update(_batch(groups, step))
    return h


def _oracle_history(steps, size):
    """{key: [outcome, ...]} kept by a plain loop, one outcome per group in order."""
    out: dict = {}
    for step, groups in enumerate(steps):
        for key, rs, t in groups:
            solve = sum(r > 0.5 for r in rs) / len(rs)
            out.setdefault(key, []).append((step, solve, len(set(rs)) == 1, t * len(rs)))
            out[key] = out[key][-size:]
    return out


@given(st.lists(GROUPS, min_size=1, max_size=6), st.integers(1, 4))
@settings(max_examples=150)
def test_history_equals_a_plain_loop_and_round_trips(steps, size):
    h = _history(steps, size)
    oracle = _oracle_history(steps, size)
    for key in "abcdefgh":
        assert h.get(key) == oracle.get(key, [])
        want = (sum(o[3] for o in oracle[key]) / len(oracle[key])) if key in oracle else None
        assert h.mean_tokens(key) == want
    h2 = PromptHistory()
    assert len(h) == len(oracle) > 0  # the history moved: the round trip restores something
    h2.load_state_dict(h.state_dict())
    assert all(h2.get(k) == h.get(k) for k in "abcdefgh") and len(h2) == len(h)


def _oracle_run(outcomes, kind):
    run = 0
    for _, solve, zero, _ in reversed(outcomes):
        if not zero or (solve < 1.0 if kind == "easy" else solve > 0.0):
            break
        run += 1
    return run


@given(st.lists(GROUPS, min_size=1, max_size=6), st.integers(1, 4))
@settings(max_examples=150)
def test_greso_runs_equal_a_plain_loop(steps, size):
    h = _history(steps, size)
    keys = list("abcdefghz")
    easy, hard, _ = Greso().runs(h, keys)
    assert easy.tolist() == [_oracle_run(h.get(k), "easy") for k in keys]
    assert hard.tolist() == [_oracle_run(h.get(k), "hard") for k in keys]


@given(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=30),
    st.lists(st.integers(0, 6), min_size=3, max_size=3),
)
def test_first_per_domain_equals_a_loop(cands, quota):
    left = list(quota)
    want = []
    for d, ok in cands:
        take = ok and left[d] > 0
        left[d] -= int(take)
        want.append(take)
    dom = torch.tensor([d for d, _ in cands], dtype=torch.int64)
    ok = torch.tensor([o for _, o in cands], dtype=torch.bool)
    got = first_per_domain(dom, ok, torch.tensor(quota, dtype=torch.int64))
    assert got.tolist() == want
