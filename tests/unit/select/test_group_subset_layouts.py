"""max_variance and gfpo on the group table (groups listed in order, padding rows appended, as
hosts build batches) equal their flat-sort path and a plain per-group loop, exactly."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.scorers.outcome import Efficiency, Reward
from dataflex_rl.select.group_subset import GroupFilter, MaxVariance
from tests.property import oracles

FRACTIONS = st.sampled_from([0.25, 0.5, 0.75, 1.0])


@st.composite
def host_batches(draw):
    """Groups listed one after another, then a few padding rows copied from the first rows
    (what verl appends to balance a batch); some rewards non-finite (inactive rows)."""
    sizes = draw(st.lists(st.integers(1, 7), min_size=1, max_size=6))
    group_ids = [g for g, n in enumerate(sizes) for _ in range(n)]
    B = len(group_ids)
    value = st.sampled_from([0.0, 1.0, 0.5, 0.25, float("nan")])
    rewards = draw(st.lists(value, min_size=B, max_size=B))
    n_pad = draw(st.integers(0, min(4, B)))
    group_ids += group_ids[:n_pad]
    rewards += rewards[:n_pad]
    T = 6
    lengths = draw(st.lists(st.integers(0, T), min_size=B + n_pad, max_size=B + n_pad))
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return RolloutBatch(
        rewards=torch.tensor(rewards),
        response_mask=mask,
        group_ids=torch.tensor(group_ids),
        is_padding=torch.arange(B + n_pad) >= B,
    )


def _flat(b: RolloutBatch) -> RolloutBatch:
    """The same batch, made to take the flat-sort path (no group table)."""
    c = b.replace()
    c.__dict__["group_layout"] = None
    return c


def _loop_max_variance(b: RolloutBatch, fraction: float) -> list[bool]:
    """Per group: active rewards shifted by their minimum, sorted (ties by index); of the
    subsets "a lowest + (k - a) highest", the first a within 1e-12 of the best variance."""
    rs = oracles.rows(b)
    keep = [False] * b.batch_size
    for g in range(b.num_groups):
        act = [i for i, r in enumerate(rs) if r["g"] == g and oracles.active(r)]
        if not act:
            continue
        n, k = len(act), oracles.keep_count(fraction, len(act))
        lo = min(rs[i]["r"] for i in act)
        order = sorted(act, key=lambda i: (rs[i]["r"] - lo, i))
        vals = [rs[i]["r"] - lo for i in order]
        cands = []
        for a in range(k + 1):
            if n - (k - a) < a:
                continue
            sub = vals[:a] + vals[n - (k - a) :]
            cands.append((a, sum(x * x for x in sub) / k - (sum(sub) / k) ** 2))
        best = max(v for _, v in cands)
        a_star = next(a for a, v in cands if v >= best - 1e-12 * (1 + abs(best)))
        for pos, i in enumerate(order):
            keep[i] = pos < a_star or pos >= n - k + a_star
    return keep


@settings(max_examples=150, deadline=None)
@given(host_batches(), FRACTIONS)
def test_max_variance_table_equals_flat_and_loop(b, fraction):
    assert b.group_layout is not None
    sel, scores = MaxVariance(keep_fraction=fraction), Reward().score(b)
    table = sel.select(scores, b)
    assert table.tolist() == sel.select(scores, _flat(b)).tolist()
    assert table.tolist() == _loop_max_variance(b, fraction)


@settings(max_examples=150, deadline=None)
@given(host_batches(), FRACTIONS, st.booleans())
def test_gfpo_table_equals_flat_and_loop(b, fraction, largest):
    sel, scores = GroupFilter(keep_fraction=fraction, largest=largest), Efficiency().score(b)
    table = sel.select(scores, b)
    assert table.tolist() == sel.select(scores, _flat(b)).tolist()
    rs, s = oracles.rows(b), scores.tolist()
    expected = [False] * b.batch_size
    for g in range(b.num_groups):
        act = [i for i, r in enumerate(rs) if r["g"] == g and oracles.active(r)]
        order = sorted(  # best score, then higher reward, then shorter, then lower index
            act, key=lambda i: (-s[i] if largest else s[i], -rs[i]["r"], rs[i]["length"], i)
        )
        for i in order[: oracles.keep_count(fraction, len(act))]:
            expected[i] = True
    assert table.tolist() == expected
