"""GRPO advantages computed by the strategy: re-centred on the responses it keeps."""

from __future__ import annotations

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.segment import segment_moments


def grpo_advantages(batch: RolloutBatch, keep: Tensor, norm_by_std: bool = True,
                    eps: float = 1e-6) -> Tensor:
    """GRPO advantages [B, T] re-centred on the kept responses of each group.

    A_i = (r_i - mean_kept) / (std_kept + eps) (unbiased std, as verl), broadcast over valid
    tokens; 0 for dropped rows and for groups with fewer than two kept responses.
    """
    adv = grpo_advantages_per_response(batch, keep, norm_by_std, eps)
    return adv[:, None] * batch.response_mask.to(adv.dtype)


def grpo_advantages_per_response(batch: RolloutBatch, keep: Tensor, norm_by_std: bool = True,
                                 eps: float = 1e-6) -> Tensor:
    """[B] the per-response value of `grpo_advantages` (before broadcasting over tokens).

    Group statistics follow `segment_moments` (float64): a group whose kept rewards are all
    equal gets advantages exactly 0. The result is in the rewards' dtype, clamped to its finite
    range.
    """
    k = keep & batch.active_mask
    _, std, dev = segment_moments(batch.rewards, batch.group_ids, batch.num_groups, k)
    adv = dev / (std[batch.group_ids] + eps) if norm_by_std else dev
    n = torch.bincount(batch.group_ids[k], minlength=batch.num_groups)
    adv = torch.where(k & (n[batch.group_ids] > 1), adv, torch.zeros_like(adv))
    dtype = batch.rewards.dtype
    big = torch.finfo(dtype).max
    return adv.clamp(-big, big).to(dtype)
