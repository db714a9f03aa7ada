"""max_variance and gfpo on the group table (groups listed in order, padding rows appended, as
hosts build batches) equal their flat-sort path and a plain per-group loop, exactly; so do their
packed-key paths (unstable sorts of distinct int64 keys) and the stable row sorts they replace."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import RolloutBatch, from_lists, group_layout
from dataflex_rl.scorers.outcome import Efficiency, ResponseLength, Reward
from dataflex_rl.select import group_subset
from dataflex_rl.select.group_subset import GroupFilter, MaxVariance, keep_count, keep_counts
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
    return padded_batch(draw, group_ids, rewards, max_pad=4, T=6)


def padded_batch(draw, group_ids: list, rewards: list, max_pad: int, T: int) -> RolloutBatch:
    """The groups' rows, then up to ``max_pad`` padding rows copied from the first rows (what
    verl appends to balance a batch), with drawn right-padded lengths of at most T tokens."""
    B = len(group_ids)
    n_pad = draw(st.integers(0, min(max_pad, B)))
    group_ids = group_ids + group_ids[:n_pad]
    rewards = rewards + rewards[:n_pad]
    lengths = draw(st.lists(st.integers(0, T), min_size=B + n_pad, max_size=B + n_pad))
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return RolloutBatch(
        rewards=torch.tensor(rewards),
        response_mask=mask,
        group_ids=torch.tensor(group_ids),
        is_padding=torch.arange(B + n_pad) >= B,
    )


def _flat_select(sel, scores, b: RolloutBatch):
    """``sel.select(scores, b)`` made to take the flat-sort path (no group table)."""
    with patch.object(group_subset, "group_layout", return_value=None):
        return sel.select(scores, b)


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
    assert group_layout(b) is not None
    sel, scores = MaxVariance(keep_fraction=fraction), Reward().score(b)
    table = sel.select(scores, b)
    assert table.tolist() == _flat_select(sel, scores, b).tolist()
    assert table.tolist() == _loop_max_variance(b, fraction)


@settings(max_examples=150, deadline=None)
@given(host_batches(), FRACTIONS, st.booleans())
def test_gfpo_table_equals_flat_and_loop(b, fraction, largest):
    sel, scores = GroupFilter(keep_fraction=fraction, largest=largest), Efficiency().score(b)
    table = sel.select(scores, b)
    assert table.tolist() == _flat_select(sel, scores, b).tolist()
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


# ---------------------------------------------------------------- packed keys vs row sorts
@st.composite
def grpo_batches(draw):
    """G groups of n responses (the usual GRPO batch: every group the same size) or of
    uneven sizes, listed in order, padding rows appended; integer-valued rewards so ties are
    frequent, some extreme ones (1 and 2 shifted by -3e38 round to one value: the packed
    path hands such groups to the row sort), some NaN (inactive rows: sizes differ again)."""
    G = draw(st.integers(1, 6))
    if draw(st.booleans()):
        sizes = [draw(st.integers(1, 9))] * G
    else:
        sizes = draw(st.lists(st.integers(1, 9), min_size=G, max_size=G))
    group_ids = [g for g, n in enumerate(sizes) for _ in range(n)]
    B = len(group_ids)
    plain = st.integers(-2, 3).map(float)
    value = draw(st.sampled_from(["plain", "plain", "extreme", "nan"]))
    if value == "extreme":
        plain = st.one_of(plain, st.sampled_from([-3.0e38, 3.0e38, 2.0**-30, 1e-45, -0.0]))
    elif value == "nan":
        plain = st.one_of(plain, st.just(float("nan")))
    rewards = draw(st.lists(plain, min_size=B, max_size=B))
    return padded_batch(draw, group_ids, rewards, max_pad=3, T=5)


@settings(max_examples=200, deadline=None)
@given(grpo_batches(), st.sampled_from([0.25, 0.5, 0.7, 1.0]))
def test_max_variance_packed_equals_row_sort_flat_and_loop(b, fraction):
    sel, scores = MaxVariance(keep_fraction=fraction), Reward().score(b)
    packed = sel.select(scores, b)
    with patch.object(group_subset, "_max_variance_packed", return_value=None):
        row_sort = sel.select(scores, b)  # one stable row sort, the permutation scattered back
    assert packed.tolist() == row_sort.tolist()
    assert packed.tolist() == _flat_select(sel, scores, b).tolist()
    assert packed.tolist() == _loop_max_variance(b, fraction)


@settings(max_examples=200, deadline=None)
@given(grpo_batches(), st.sampled_from([0.25, 0.5, 0.7, 1.0]), st.booleans())
def test_gfpo_packed_equals_row_sorts_and_flat(b, fraction, largest):
    sel, scores = GroupFilter(keep_fraction=fraction, largest=largest), Efficiency().score(b)
    packed = sel.select(scores, b)
    with patch.object(group_subset, "_top_k_packed", return_value=None):
        row_sorts = sel.select(scores, b)  # `segment_rank` on the table: stable row sorts
    assert packed.tolist() == row_sorts.tolist()
    assert packed.tolist() == _flat_select(sel, scores, b).tolist()


@settings(max_examples=200, deadline=None)
@given(grpo_batches(), st.sampled_from([0.25, 0.5, 0.75]), st.booleans(), st.data())
def test_gfpo_packed_any_scores(b, fraction, largest, data):
    # a user scorer's values: infinities, NaN (last either way, tied), -0.0 (ties 0.0)
    value = st.sampled_from([0.0, -0.0, 1.0, float("inf"), -float("inf"), float("nan")])
    scores = torch.tensor(data.draw(st.lists(value, min_size=b.batch_size, max_size=b.batch_size)))
    sel = GroupFilter(keep_fraction=fraction, largest=largest)
    packed = sel.select(scores, b)
    with patch.object(group_subset, "_top_k_packed", return_value=None):
        assert packed.tolist() == sel.select(scores, b).tolist()
    assert packed.tolist() == _flat_select(sel, scores.double(), b).tolist()


def test_packed_paths_hand_worked_ties():
    # one group of 6, rewards 1, 0, 1, 0, 0, 1 (lengths 4, 2, 2, 4, 2, 3), keep 3
    b = from_lists([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], [0] * 6, [4, 2, 2, 4, 2, 3])
    # max variance: a = 1 (one 0 and two 1s; a = 2 ties it and loses to the smaller a): the
    # lowest 0 by index (row 1), the two highest 1s by index (rows 2, 5)
    assert MaxVariance(keep_fraction=0.5).select(b.rewards, b).tolist() == [
        False, True, True, False, False, True,
    ]  # fmt: skip
    # efficiency 1/4, 0, 1/2, 0, 0, 1/3: the three highest are rows 2, 5, 0
    keep = GroupFilter(keep_fraction=0.5).select(Efficiency().score(b), b)
    assert keep.tolist() == [True, False, True, False, False, True]
    # shortest (largest=False on length): lengths 2, 2, 2 at rows 1, 2, 4; ties to the higher
    # reward (row 2 first), then the lower index (rows 1, 4): all three kept
    keep = GroupFilter(keep_fraction=0.5, largest=False).select(ResponseLength().score(b), b)
    assert keep.tolist() == [False, True, True, False, True, False]
    # keep 2 of them (fraction 1/3): row 2 (reward 1), then row 1 (lower index than row 4)
    keep = GroupFilter(keep_fraction=1 / 3, largest=False).select(ResponseLength().score(b), b)
    assert keep.tolist() == [False, True, True, False, False, False]


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.3, 0.5, 0.7, 0.75, 0.9, 1.0])
def test_keep_count_equals_keep_counts(fraction):
    sizes = range(1, 130)  # 0.7 * 45 = 31.499999999999996 -> 32, see `round_half_up`
    b = from_lists([0.0] * sum(sizes), [g for g, n in enumerate(sizes) for _ in range(n)])
    assert [keep_count(fraction, n) for n in sizes] == keep_counts(b, fraction).tolist()
    assert keep_count(fraction, 0) == 0
