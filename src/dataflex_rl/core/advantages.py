"""GRPO advantages: the one implementation, for hosts and for strategies.

A response's advantage is ``(r - mean_g) / (std_g + eps)`` over the responses of its group that
count (unbiased std, as verl; ``norm_by_std=False`` gives Dr. GRPO's ``r - mean_g``). Group
statistics come from `segment_moments` (float64): a group whose rewards are all equal gets
advantages exactly 0.

A group with a single counted response gets 0: one response has no baseline to be better or
worse than. This is the one rule, for both callers:

* the embedded engine: every group has ``grpo.group_size`` >= 2 responses (the config refuses
  fewer) and all of them count, so the case never arises there. (verl's
  ``compute_grpo_outcome_advantage`` gives such a response ``r / (1 + eps)``; the verl host
  uses verl's own advantages, so no dataflex code needs that convention.)
* a strategy re-centring advantages on the responses it keeps (GFPO/PODS,
  ``recompute_advantages``): a group left with one kept response carries no signal.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch, group_layout
from dataflex_rl.core.segment import SegmentTable, moments_and_counts, table_std_dev


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    num_groups: int,
    keep: Tensor | None = None,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    table: SegmentTable | None = None,
) -> Tensor:
    """[B] GRPO advantages over the ``keep`` responses of each group.

    Args:
        rewards: [B] float.
        group_ids: [B] int64 dense group ids 0..G-1.
        num_groups: G.
        keep: [B] bool, the responses that count (default all); others get 0.
        norm_by_std: divide by ``std + eps`` (GRPO) or not (Dr. GRPO).
        eps: added to the std.
        table: the groups' `SegmentTable` when known (`core.batch.group_layout`): the
            same values from row reductions of a [G, width] table.

    Returns:
        [B] in the rewards' dtype, clamped to its finite range.
    """
    k = torch.ones_like(group_ids, dtype=torch.bool) if keep is None else keep
    big = torch.finfo(rewards.dtype).max
    if table is not None:
        std, dev, count, counted = table_std_dev(rewards, k, table)  # groups of 2+ count
        adv = dev / (std + eps) if norm_by_std else dev
        counted = counted & (count > 1)  # (the table may be a view of k)
        out = torch.where(counted, adv.clamp(-big, big), 0.0).to(rewards.dtype)
        return table.take(out)
    _, std, dev, count = moments_and_counts(rewards, group_ids, num_groups, k)
    # one gather of the row's group: [std, counted responses]
    row = torch.stack([std, count.to(torch.float64)], 1).index_select(0, group_ids)
    row_std, n = row[:, 0], row[:, 1]
    adv = dev / (row_std + eps) if norm_by_std else dev
    counted = k & (n > 1)
    return torch.where(counted, adv.clamp(-big, big), 0.0).to(rewards.dtype)


def grpo_advantages_per_response(
    batch: RolloutBatch, keep: Tensor, norm_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """[B] GRPO advantages re-centred on the kept responses of each group: `group_advantages`
    over the kept active responses."""
    return group_advantages(
        batch.rewards,
        batch.group_ids,
        batch.num_groups,
        keep & batch.active_mask,
        norm_by_std=norm_by_std,
        eps=eps,
        table=group_layout(batch),
    )
