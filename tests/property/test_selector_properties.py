"""Selectors equal plain-loop oracles; padding is never kept; permuting groups permutes."""

import itertools
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.scorers.outcome import (
    Efficiency,
    ResponseLength,
    Reward,
    RewardVariance,
    SolveRate,
)
from dataflex_rl.scorers.policy import AdvantageMagnitude
from dataflex_rl.select.band import Band
from dataflex_rl.select.group_subset import GroupFilter, MaxVariance
from dataflex_rl.select.top_fraction import TopFraction
from dataflex_rl.select.top_p_mass import TopPMass
from tests.hand_worked import check_component
from tests.property import oracles
from tests.strategies import permute_groups, rollout_batches

FRACTIONS = st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.6, 0.7, 0.75, 1.0])


def _keep(selector, scorer, b):
    s = scorer.score(b)
    if scorer.granularity == "group":
        s = s[b.group_ids]
    keep = selector.select(s, b)
    assert keep.shape == (b.batch_size,) and keep.dtype == torch.bool
    return keep & b.active_mask, s


def _members(b):
    rs = oracles.rows(b)
    return rs, [
        [i for i, r in enumerate(rs) if r["g"] == g and oracles.active(r)]
        for g in range(b.num_groups)
    ]


@given(
    rollout_batches(reward_kind="binary"),
    st.sampled_from([(0.2, 0.8), (0.0, 0.5), (0.25, 0.75), (0.4, 0.6)]),
    st.booleans(),
)
def test_band_on_solve_rate_equals_the_loop_oracle(b, bounds, inclusive):
    low, high = bounds
    keep, _ = _keep(Band(low=low, high=high, inclusive=inclusive), SolveRate(), b)
    rs, members = _members(b)
    expected = [False] * b.batch_size
    for act in members:
        if not act:
            continue
        rate = sum(rs[i]["r"] > 0.5 for i in act) / len(act)
        inside = low <= rate <= high if inclusive else low < rate < high
        for i in act:
            expected[i] = inside
    assert keep.tolist() == expected


@given(rollout_batches(max_group_size=7), FRACTIONS)
def test_max_variance_subset_equals_brute_force(b, fraction):
    keep, _ = _keep(MaxVariance(keep_fraction=fraction), Reward(), b)
    rs, members = _members(b)
    kept_rows = set(torch.nonzero(keep).flatten().tolist())
    assert kept_rows <= {i for act in members for i in act}
    for act in members:
        if not act:
            continue
        k = oracles.keep_count(fraction, len(act))
        kept = [i for i in act if i in kept_rows]
        assert len(kept) == k
        vals = [rs[i]["r"] for i in act]
        best = max(oracles.pvariance(c) for c in itertools.combinations(vals, k))
        got = oracles.pvariance([rs[i]["r"] for i in kept])
        assert got >= best - 1e-9 * (1 + best)


@given(rollout_batches(), FRACTIONS, st.sampled_from(["efficiency", "short", "long"]))
def test_gfpo_equals_sorting_each_group_with_the_tie_break(b, fraction, metric):
    scorer = Efficiency() if metric == "efficiency" else ResponseLength()
    largest = metric != "short"
    keep, s = _keep(GroupFilter(keep_fraction=fraction, largest=largest), scorer, b)
    rs, members = _members(b)
    s = s.tolist()
    expected = [False] * b.batch_size
    for act in members:
        # best score first, then higher reward, then shorter, then lower index
        order = sorted(
            act, key=lambda i: (-s[i] if largest else s[i], -rs[i]["r"], rs[i]["length"], i)
        )
        for i in order[: oracles.keep_count(fraction, len(act))]:
            expected[i] = True
    assert keep.tolist() == expected


@given(rollout_batches(), FRACTIONS)
def test_top_fraction_of_responses_equals_the_loop_oracle(b, fraction):
    keep, s = _keep(TopFraction(fraction=fraction), AdvantageMagnitude(), b)
    rs = oracles.rows(b)
    s = s.tolist()
    eligible = [i for i, r in enumerate(rs) if oracles.active(r)]
    k = oracles.round_half_up_exact(fraction, len(eligible))
    chosen = set(sorted(eligible, key=lambda i: (-s[i], i))[:k])
    assert keep.tolist() == [i in chosen for i in range(b.batch_size)]


@given(rollout_batches(), FRACTIONS)
def test_top_fraction_by_group_equals_the_loop_oracle(b, fraction):
    keep, s = _keep(TopFraction(fraction=fraction, by_group=True), AdvantageMagnitude(), b)
    rs, members = _members(b)
    s = s.tolist()
    groups = [g for g, act in enumerate(members) if act]
    mean = {g: sum(s[i] for i in members[g]) / len(members[g]) for g in groups}
    k = oracles.round_half_up_exact(fraction, len(groups))
    kept_groups = {int(b.group_ids[i]) for i in torch.nonzero(keep).flatten().tolist()}
    assert len(kept_groups) == k
    for g in kept_groups:  # whole groups, their active rows only
        assert [bool(keep[i]) for i in members[g]] == [True] * len(members[g])
    dropped = [g for g in groups if g not in kept_groups]
    if kept_groups and dropped:  # ranked by mean score (float tolerance)
        assert min(mean[g] for g in kept_groups) >= max(mean[g] for g in dropped) - 1e-9
    means = sorted(mean.values())
    if all(b2 - a > 1e-9 for a, b2 in zip(means, means[1:])):  # no near-ties: exact set
        assert kept_groups == set(sorted(groups, key=lambda g: (-mean[g], g))[:k])


@settings(max_examples=300)
@given(rollout_batches(), st.sampled_from([0.05, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0]))
def test_top_p_mass_equals_the_loop_oracle(b, p):
    # the oracle: per group its unbiased reward variance (statistics.variance over the active
    # rows); groups in decreasing mass, ties by group id, added one by one while the mass
    # before the next is below p x the total (summed in that order) and the next has mass
    check_component("selector", "top_p_mass")  # a keep-all selector fails there
    keep, s = _keep(TopPMass(p=p), RewardVariance(), b)
    rs, members = _members(b)
    s = s.tolist()
    mass = {}
    for g, act in enumerate(members):
        if not act:
            continue
        vals = [rs[i]["r"] for i in act]
        want = statistics.variance(vals) if len(vals) > 1 else 0.0
        assert s[act[0]] == pytest.approx(want, rel=1e-9, abs=1e-12)  # the scorer
        assert (s[act[0]] == 0) == (min(vals) == max(vals))  # zero exactly when all equal
        mass[g] = s[act[0]]
    order = sorted(mass, key=lambda g: (-mass[g], g))
    total = 0.0
    for g in order:
        total += mass[g]
    kept, before = set(), 0.0
    for g in order:
        if not (before < p * total and mass[g] > 0):
            break
        kept.add(g)
        before += mass[g]
    expected = [rs[i]["g"] in kept and oracles.active(rs[i]) for i in range(b.batch_size)]
    assert keep.tolist() == expected


SELECTORS = {
    "band": (Band(), SolveRate()),
    "max_variance": (MaxVariance(), Reward()),
    "gfpo": (GroupFilter(), Efficiency()),
    "gfpo_short": (GroupFilter(largest=False), ResponseLength()),
}


@given(rollout_batches(), st.sampled_from(sorted(SELECTORS)), st.data())
def test_permuting_groups_permutes_the_keep_mask(b, name, data):
    check_component("selector", {"gfpo_short": "gfpo"}.get(name, name))  # keep-all permutes too
    selector, scorer = SELECTORS[name]
    perm = data.draw(st.permutations(range(b.num_groups)))
    pb, rows = permute_groups(b, perm)
    assert torch.equal(_keep(selector, scorer, pb)[0], _keep(selector, scorer, b)[0][rows])


@given(rollout_batches(), st.booleans(), FRACTIONS, st.data())
def test_permuting_groups_permutes_top_fraction_without_ties(b, by_group, fraction, data):
    check_component("selector", "top_fraction")
    # ties go by global index, which moves when rows move: use distinct scores (by_group: one
    # distinct score per group, so the group means are distinct too)
    n = b.num_groups if by_group else b.batch_size
    distinct = torch.tensor(data.draw(st.permutations(range(n))), dtype=torch.float64)
    scores = distinct[b.group_ids] if by_group else distinct
    perm = data.draw(st.permutations(range(b.num_groups)))
    pb, rows = permute_groups(b, perm)
    sel = TopFraction(fraction=fraction, by_group=by_group)
    assert torch.equal(
        sel.select(scores[rows], pb) & pb.active_mask, (sel.select(scores, b) & b.active_mask)[rows]
    )


@given(
    rollout_batches(max_tokens=7),
    st.sampled_from([0.05, 0.1, 0.2, 0.3, 0.5, 0.9, 1.0]),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_top_tokens_equals_a_per_pool_torch_quantile_loop(b, fraction, pools, micro, seed):
    # the oracle: per pool, torch.quantile over its valid tokens (a Python loop over pools
    # and rows), keep tokens >= it
    from dataflex_rl.scorers.policy import TokenEntropy
    from dataflex_rl.select.top_tokens import TopTokens

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, pools, (b.batch_size,), generator=g)
    b = b.replace(micro_batch_ids=ids)
    scope = "micro_batch" if micro else "batch"
    scores = TokenEntropy().score(b)
    keep = TopTokens(fraction=fraction, scope=scope).select(scores, b)
    pool_of = ids.tolist() if micro else [0] * b.batch_size
    valid = b.response_mask & b.active_mask[:, None]
    expected = torch.zeros_like(valid)
    for k in set(pool_of):
        rows = [i for i in range(b.batch_size) if pool_of[i] == k]
        values = [float(scores[i, t]) for i in rows for t in range(valid.shape[1]) if valid[i, t]]
        if not values:
            continue
        thr = torch.quantile(torch.tensor(values, dtype=scores.dtype), 1.0 - fraction)
        for i in rows:
            expected[i] = valid[i] & (scores[i] >= thr)
    assert torch.equal(keep, expected)
    if fraction == 1.0:
        assert torch.equal(keep, valid)
    # never a padding token or a token of an inactive row
    assert not (keep & ~valid).any()


@given(
    st.lists(st.floats(0, 50, width=32), min_size=1, max_size=60),
    st.floats(0, 1),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_segment_quantile_is_torch_quantile_bit_for_bit(values, q, dtype):
    from dataflex_rl.core.segment import segment_quantile

    v = torch.tensor(values, dtype=dtype)
    got = segment_quantile(v, torch.zeros(len(values), dtype=torch.int64), 1, q)[0]
    assert torch.equal(got, torch.quantile(v, q))


@given(
    st.lists(st.floats(0, 50, width=32), min_size=1, max_size=60),
    st.integers(1, 4),
    st.floats(0, 1),
    st.integers(0, 2**31 - 1),
)
def test_segment_quantile_per_segment_is_torch_quantile_bit_for_bit(values, S, q, seed):
    from dataflex_rl.core.segment import segment_quantile

    v = torch.tensor(values)
    ids = torch.randint(0, S, (len(values),), generator=torch.Generator().manual_seed(seed))
    got = segment_quantile(v, ids, S + 1, q)  # the last segment is empty
    for k in range(S):
        expected = torch.quantile(v[ids == k], q) if bool((ids == k).any()) else None
        assert torch.isnan(got[k]) if expected is None else torch.equal(got[k], expected)
    assert torch.isnan(got[S])
