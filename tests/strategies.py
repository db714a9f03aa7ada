"""Hypothesis generators of random valid `RolloutBatch`es, shared by the property tests.

A generated batch has random group sizes (1 included), rows of different groups interleaved,
padding rows (some groups made only of padding), NaN/inf rewards, now and then a NaN advantage
on a valid token, 0/1 or continuous rewards (with ties), random lengths (0 included), random
advantages and old log-probs, and garbage (NaN or huge values) on every token that a strategy
must ignore.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from dataflex_rl.core.batch import RolloutBatch

DOMAINS = ("math", "logic", "science")

#: rewards drawn from a small set so that ties are common
TIED_REWARDS = (0.0, 0.25, 0.5, 1.0, 2.0)


@st.composite
def rollout_batches(
    draw,
    *,
    max_groups: int = 6,
    max_group_size: int = 6,
    max_tokens: int = 5,
    reward_kind: str | None = None,
    invalid: bool = True,
    padding: bool = True,
    advantages: bool = True,
    old_log_probs: bool = True,
    entropies: bool = True,
    min_groups: int = 1,
    num_domains: int | None = None,
) -> RolloutBatch:
    """A random valid batch.

    Args:
        reward_kind: "binary" (0/1), "continuous", "tied" (a few values) or None (any).
        invalid: allow NaN/inf rewards on non-padding rows.
        padding: allow padding rows.
        advantages / old_log_probs / entropies: include these fields (entropies tied now
            and then, as the first tokens of a group's responses are).
        num_domains: D (None: 1 to 3).
    """
    G = draw(st.integers(min_groups, max_groups))
    sizes = draw(st.lists(st.integers(1, max_group_size), min_size=G, max_size=G))
    D = num_domains if num_domains is not None else draw(st.integers(1, len(DOMAINS)))
    group_domain = draw(st.lists(st.integers(0, D - 1), min_size=G, max_size=G))
    kind = reward_kind or draw(st.sampled_from(["binary", "continuous", "tied"]))
    if kind == "binary":
        reward = st.sampled_from([0.0, 1.0])
    elif kind == "tied":
        reward = st.sampled_from(TIED_REWARDS)
    else:
        reward = st.floats(-2.0, 3.0, allow_nan=False, width=32)
    group_ids: list[int] = []
    rewards: list[float] = []
    pad: list[bool] = []
    for g, n in enumerate(sizes):
        for _ in range(n):
            group_ids.append(g)
            is_pad = padding and draw(st.integers(0, 5)) == 0
            pad.append(is_pad)
            if invalid and not is_pad and draw(st.integers(0, 7)) == 0:
                rewards.append(draw(st.sampled_from([float("nan"), float("inf"), -float("inf")])))
            else:
                rewards.append(draw(reward))
    B = len(group_ids)
    perm = draw(st.permutations(range(B)))  # interleave groups
    group_ids = [group_ids[i] for i in perm]
    rewards = [rewards[i] for i in perm]
    pad = [pad[i] for i in perm]
    for i in range(B):  # padding rewards may be anything
        if pad[i] and draw(st.booleans()):
            rewards[i] = float("nan")
    T = draw(st.integers(1, max_tokens))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    mask = torch.arange(T)[None, :] < torch.tensor(lengths, dtype=torch.int64)[:, None]
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    adv = olp = None
    garbage = draw(st.sampled_from([float("nan"), 1e6, -3.0]))
    if advantages:
        per_resp = torch.randn(B, generator=gen)
        zero = torch.rand(B, generator=gen) < 0.3  # some zero-advantage rows
        per_resp = torch.where(zero, torch.zeros_like(per_resp), per_resp)
        noise = 0.1 * torch.randn(B, T, generator=gen) * draw(st.sampled_from([0.0, 1.0]))
        adv = torch.where(mask, per_resp[:, None] + noise, torch.full((B, T), garbage))
        adv = torch.where(mask & zero[:, None], torch.zeros_like(adv), adv)
        if invalid and B and T and draw(st.integers(0, 3)) == 0:
            # a host bug: a non-finite advantage on a valid token makes its row invalid
            adv[draw(st.integers(0, B - 1)), draw(st.integers(0, T - 1))] = float("nan")
    if old_log_probs:
        lp = -torch.rand(B, T, generator=gen) * 4.0
        olp = torch.where(mask, lp, torch.full((B, T), garbage))
    ent = None
    if entropies:
        e = torch.rand(B, T, generator=gen) * 3.0
        if draw(st.booleans()):  # ties: a few values only
            e = (e * 2).round() / 2
        ent = torch.where(mask, e, torch.full((B, T), garbage))
    dom = torch.tensor([group_domain[g] for g in group_ids], dtype=torch.int64)
    return RolloutBatch(
        rewards=torch.tensor(rewards, dtype=torch.float32),
        response_mask=mask,
        group_ids=torch.tensor(group_ids, dtype=torch.int64),
        domain_ids=dom,
        domains=DOMAINS[:D],
        advantages=adv,
        old_log_probs=olp,
        prompt_keys=tuple(f"p{g}" for g in group_ids),
        is_padding=torch.tensor(pad, dtype=torch.bool),
        step=draw(st.integers(0, 20)),
        entropies=ent,
    )


def permute_groups(batch: RolloutBatch, group_perm: list[int], row_seed: int = 0) -> tuple:
    """Relabel groups by ``group_perm`` and reorder rows group by group.

    Rows keep their relative order inside each group (so index tie-breaks inside a group are
    unchanged). Returns (permuted batch, row index: new row i is old row ``rows[i]``).
    """
    new_gid = torch.tensor(group_perm, dtype=torch.int64)[batch.group_ids]
    order = torch.sort(new_gid, stable=True).indices  # rows grouped by new id, stable
    take = lambda t: None if t is None else t[order]  # noqa: E731
    keys = None if batch.prompt_keys is None else tuple(batch.prompt_keys[i] for i in order)
    permuted = RolloutBatch(
        rewards=batch.rewards[order],
        response_mask=batch.response_mask[order],
        group_ids=new_gid[order],
        domain_ids=batch.domain_ids[order],
        domains=batch.domains,
        advantages=take(batch.advantages),
        old_log_probs=take(batch.old_log_probs),
        prompt_keys=keys,
        is_padding=batch.is_padding[order],
        step=batch.step,
        entropies=take(batch.entropies),
        micro_batch_ids=take(batch.micro_batch_ids),
    )
    return permuted, order


def random_batch(
    seed: int,
    *,
    num_groups: int = 6,
    max_group_size: int = 6,
    T: int = 5,
    D: int = 3,
    step: int = 0,
) -> RolloutBatch:
    """A seeded random batch without hypothesis (contract tests): mixed group sizes (1
    included), interleaved rows, padding, a NaN reward, zero-advantage groups, garbage on
    masked tokens."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_group_size + 1, (num_groups,), generator=g)
    sizes[0] = 1
    gids = torch.repeat_interleave(torch.arange(num_groups), sizes)
    B = int(gids.shape[0])
    perm = torch.randperm(B, generator=g)
    gids = gids[perm]
    rewards = torch.where(
        torch.rand(B, generator=g) < 0.5,
        torch.rand(B, generator=g),
        (torch.rand(B, generator=g) < 0.5).float(),
    )
    rewards[gids == 1] = 1.0  # an all-correct group
    pad = torch.rand(B, generator=g) < 0.15
    rewards[int(torch.randint(0, B, (1,), generator=g))] = float("nan")
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    adv = torch.randn(B, generator=g)[:, None].expand(B, T).clone()
    adv[gids == 1] = 0.0
    adv = torch.where(mask, adv, torch.full_like(adv, float("nan")))
    lp = torch.where(mask, -torch.rand(B, T, generator=g) * 3, torch.full((B, T), 1e6))
    group_dom = torch.randint(0, D, (num_groups,), generator=g)
    ent = torch.where(mask, torch.rand(B, T, generator=g) * 2, torch.full((B, T), 1e6))
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=gids,
        domain_ids=group_dom[gids],
        domains=DOMAINS[:D],
        advantages=adv,
        old_log_probs=lp,
        prompt_keys=tuple(f"q{int(i)}" for i in gids),
        is_padding=pad,
        step=step,
        entropies=ent,
    )
