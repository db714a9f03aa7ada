"""GRPO advantages: the one implementation, for hosts and for strategies.

``(r - mean_g) / (std_g + eps)`` over the responses of the group that count (unbiased std, as
verl; ``norm_by_std=False``: Dr. GRPO), from `segment_moments`, so a group of equal rewards
gets exactly 0. A group with a single counted response gets 0 (no baseline), the one rule for
the engine and for strategies re-centring on the responses they keep.
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

    ``keep``: [B] bool, the responses that count (default all; others get 0); ``table``:
    the groups' `SegmentTable` when known (the same values by row reductions). Returns [B]
    in the rewards' dtype, clamped to its finite range.
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
