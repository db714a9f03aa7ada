"""Reference numerics only tests use: whole-batch GRPO advantages and table moments."""

from __future__ import annotations

import torch
from torch import Tensor

from dataflex_rl.core.advantages import grpo_advantages_per_response
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.segment import SegmentTable, table_deviations


def grpo_advantages(
    batch: RolloutBatch, keep: Tensor, norm_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO advantages [B, T] re-centred on the kept responses of each group.

    A_i = (r_i - mean_kept) / (std_kept + eps) (unbiased std, as verl), broadcast over valid
    tokens; 0 for dropped rows and for groups with fewer than two kept responses.
    """
    adv = grpo_advantages_per_response(batch, keep, norm_by_std, eps)
    return adv[:, None] * batch.response_mask.to(adv.dtype)


def table_moments(
    values: Tensor, mask: Tensor, table: SegmentTable
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`moments_and_counts` with the segments laid out in ``table``: row reductions of the
    [S, width] table instead of scatters, the same values (sums run left to right, in index
    order, as the scatter-add runs; the shift by the minimum is the same, see
    `segment_moments`).

    Returns:
        (mean [S, 1], std [S, 1], dev [S, width] (0 in empty cells and where ``mask`` is
        False), count [S, 1] int64, [S, width] bool ``mask`` in the table).
    """
    lo, shifted_mean, dev, ss, count, mt = table_deviations(values, mask, table)
    n = count.to(torch.float64)
    var = torch.where(n > 1, ss / (n - 1).clamp(min=1), 0.0)
    return lo + shifted_mean, var.sqrt_(), dev, count, mt
