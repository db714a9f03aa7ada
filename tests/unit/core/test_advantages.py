"""`group_advantages`, the one GRPO advantage: hand-worked numbers and a per-group loop oracle.

One rule for a group with a single counted response: 0 (no baseline). The engine never meets
it (its config refuses ``group_size`` < 2); a strategy re-centring on kept responses does.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.advantages import group_advantages
from dataflex_rl.core.segment import segment_table


def _adv(r, g, **kw):
    return group_advantages(r, g, int(g.max()) + 1, **kw)


def test_hand_worked():
    # group 0: rewards 1,0,0,1 -> mean 0.5, unbiased var = 4 * 0.25 / 3 = 1/3, std 0.57735
    #          -> A = +-0.5 / 0.57735 = +-0.86603
    # group 1: rewards 1,1,1,0 -> mean 0.75, deviations .25,.25,.25,-.75,
    #          ss = 3 * .0625 + .5625 = .75, var = .75 / 3 = .25, std .5 -> A = .5,.5,.5,-1.5
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    s = 0.5 / math.sqrt(1 / 3)
    expected = torch.tensor([s, -s, -s, s, 0.5, 0.5, 0.5, -1.5])
    a = group_advantages(r, g, 2, eps=0.0)
    torch.testing.assert_close(a, expected)
    assert a.dtype == torch.float32


def test_constant_group_is_zero_and_single_response_group_is_zero():
    # all-equal group: deviations 0 -> A = 0 / (0 + eps) = 0 (exactly, also for 0.7s)
    # single-response group (G=1): no baseline -> 0, with or without the std
    r = torch.tensor([0.7, 0.7, 0.7, 0.7])
    g = torch.tensor([0, 0, 0, 1])
    assert group_advantages(r, g, 2).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert _adv(r, g, norm_by_std=False).tolist() == [0.0, 0.0, 0.0, 0.0]
    # a batch of G=1 groups only: every advantage 0
    one = torch.arange(3)
    assert _adv(torch.tensor([1.0, 0.0, 1.0]), one).tolist() == [0.0, 0.0, 0.0]


def test_without_std_is_centred_reward():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    a = _adv(r, torch.zeros(4, dtype=torch.int64), norm_by_std=False)
    # mean 0.25 -> 0.75, -0.25, -0.25, -0.25
    torch.testing.assert_close(a, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_keep_restricts_the_group_and_zeroes_the_rest():
    # group 0 keeps rows 0, 1 (rewards 1, 0): mean .5, std sqrt(.5) -> +-0.70711; rows 2, 3 -> 0
    # group 1 keeps only row 4: one kept response, no baseline -> 0 (as re-centring gives)
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1])
    keep = torch.tensor([True, True, False, False, True, False])
    s = 0.5 / math.sqrt(0.5)
    torch.testing.assert_close(
        group_advantages(r, g, 2, keep, eps=0.0), torch.tensor([s, -s, 0.0, 0.0, 0.0, 0.0])
    )


def test_vectorized_matches_loop():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        G = int(torch.randint(1, 6, (1,), generator=gen))
        g = torch.randint(0, G, (40,), generator=gen)
        g = torch.unique(g, return_inverse=True)[1]  # dense ids
        r = torch.randint(0, 2, (40,), generator=gen).float()
        fast = group_advantages(r, g, int(g.max()) + 1)
        slow = torch.empty(40)
        for gid in g.unique().tolist():  # the oracle: verl's per-group loop
            idx = (g == gid).nonzero().squeeze(1)
            vals = r[idx]
            if len(idx) > 1:
                slow[idx] = (vals - vals.mean()) / (vals.std() + 1e-6)
            else:
                slow[idx] = 0.0
        torch.testing.assert_close(fast, slow)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=8),
    tail=st.lists(st.integers(0, 7), max_size=3),
    rewards=st.lists(st.integers(-2, 3), min_size=60, max_size=60),
    keep=st.lists(st.booleans(), min_size=60, max_size=60),
    norm_by_std=st.booleans(),
    eps=st.sampled_from([1e-6, 0.0]),
)
def test_group_table_gives_the_same_advantages(sizes, tail, rewards, keep, norm_by_std, eps):
    # the [G, width] table path (`table_moments`) and the scatter path agree bit for bit,
    # with ties, groups of one counted response, dropped rows and appended rows
    g = torch.tensor(
        [s for s, size in enumerate(sizes) for _ in range(size)] + [t % len(sizes) for t in tail]
    )
    n, G = g.shape[0], len(sizes)
    r, k = torch.tensor(rewards[:n], dtype=torch.float32) / 3, torch.tensor(keep[:n])
    kw = dict(norm_by_std=norm_by_std, eps=eps)
    flat = group_advantages(r, g, G, k, **kw)
    table = group_advantages(r, g, G, k, table=segment_table(g, G), **kw)
    torch.testing.assert_close(table, flat, rtol=0, atol=0, equal_nan=True)  # eps 0: 0 / 0
