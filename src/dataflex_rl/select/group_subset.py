"""Per-group subset selection: PODS max-variance down-sampling and GFPO filtering.

Both keep n = round_half_up(keep_fraction * size) responses of each group (at least 2, at most
the group's size): GRPO advantages need two responses to compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import round_half_up, segment_min, segment_rank


def keep_counts(batch: RolloutBatch, keep_fraction: float, minimum: int = 2) -> Tensor:
    """[G] int64 responses to keep per group: round-half-up(f * size) clamped to [min, size]."""
    size = batch.group_size
    n = round_half_up(keep_fraction * size.to(torch.float64)).to(torch.int64)
    return torch.minimum(n.clamp(min=minimum), size)


@SELECTORS.register("max_variance")
@dataclass
class MaxVariance(Selector):
    """``max_variance`` (preset ``maxvar``): per group, the n responses of largest reward variance.

    The optimum is always the a lowest plus the (n - a) highest rewards for some a, so every a
    is scored at once from prefix sums of the group's sorted rewards; ties go to the smallest
    a. The scores must be rewards (scorer ``reward``).
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"response"})
    group_based: ClassVar[bool] = True
    default_scorer: ClassVar[str | None] = "reward"
    recompute_advantages_default: ClassVar[bool] = True
    paper: ClassVar[str] = "Xu et al. 2025, PODS: Not All Rollouts are Useful"
    keep_fraction: float = param(0.5, "fraction of each group kept", gt=0.0, le=1.0)

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        G, B = batch.num_groups, batch.batch_size
        if B == 0:
            return torch.zeros(0, dtype=torch.bool)
        active = batch.active_mask
        s = torch.where(active, scores.to(torch.float64), torch.zeros(B, dtype=torch.float64))
        # shift by the group minimum (variance is shift-invariant): a constant group has all
        # zeros, so every subset scores exactly 0 and the first a wins (see segment_moments)
        lo = segment_min(
            torch.where(active, s, torch.full_like(s, float("inf"))), batch.group_ids, G, empty=0.0
        )
        lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
        s = torch.where(active, s - lo[batch.group_ids], torch.zeros_like(s))
        inactive_last = (~active).to(torch.int8)
        rank = segment_rank((s, inactive_last), batch.group_ids, G)  # ascending within group
        size = batch.group_size
        k = keep_counts(batch, self.keep_fraction)
        S = int(size.max()) if G else 0
        # row g: 0, then group g's active rewards ascending; inactive rows land in a spare cell
        cell = torch.where(active, batch.group_ids * (S + 1) + rank + 1, G * (S + 1))
        sorted_r = torch.zeros(G * (S + 1) + 1, dtype=torch.float64)
        sorted_r[cell] = s  # s is 0 where inactive
        sorted_r = sorted_r[:-1].view(G, S + 1)
        P = sorted_r.cumsum(1)  # P[:, j] = sum of j lowest
        Q = (sorted_r**2).cumsum(1)
        a = torch.arange(S + 1, dtype=torch.int64)[None, :]  # [1, S+1]
        hi_start = (size[:, None] - (k[:, None] - a)).clamp(min=0, max=S)
        lo = a.clamp(max=S).expand(G, -1)
        sum_ = P.gather(1, lo) + P.gather(1, size[:, None]) - P.gather(1, hi_start)
        sq = Q.gather(1, lo) + Q.gather(1, size[:, None]) - Q.gather(1, hi_start)
        kf = k[:, None].clamp(min=1).to(torch.float64)
        var = sq / kf - (sum_ / kf) ** 2
        valid = (a <= k[:, None]) & (hi_start >= lo)
        var = torch.where(valid, var, torch.full_like(var, -1.0))
        best = var.max(1, keepdim=True).values
        tol = 1e-12 * (1.0 + best.abs())
        a_star = ((var >= best - tol) & valid).to(torch.int64).argmax(1)  # first (smallest) a
        # an active row's rank is below its group's size: the high block ends there
        low_end, high_from = a_star[batch.group_ids], (size - k + a_star)[batch.group_ids]
        return ((rank < low_end) | (rank >= high_from)) & active


@SELECTORS.register("gfpo")
@dataclass
class GroupFilter(Selector):
    """``gfpo`` (preset ``gfpo``): per group, the n responses with the highest score (GFPO).

    With scorer ``efficiency`` (reward per token) this is GFPO's token-efficiency filter; with
    ``response_length`` and ``largest: false`` it keeps the shortest responses. Ties go to the
    higher reward, then the shorter response, then the lower index.
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"response"})
    group_based: ClassVar[bool] = True
    default_scorer: ClassVar[str | None] = "efficiency"
    recompute_advantages_default: ClassVar[bool] = True
    paper: ClassVar[str] = "Shrivastava et al. 2025, GFPO: Sample More to Think Less"
    keep_fraction: float = param(0.5, "fraction of each group kept", gt=0.0, le=1.0)
    largest: bool = param(True, "keep the highest scores (false: the lowest)")

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        G, B = batch.num_groups, batch.batch_size
        if B == 0:
            return torch.zeros(0, dtype=torch.bool)
        active = batch.active_mask
        s = scores.to(torch.float64)
        s = torch.where(active, -s if self.largest else s, torch.zeros_like(s))
        rank = segment_rank(
            (
                batch.response_length,
                -batch.clean_rewards.to(torch.float64),
                s,
                (~active).to(torch.int8),
            ),
            batch.group_ids,
            G,
        )
        k = keep_counts(batch, self.keep_fraction)
        return (rank < k[batch.group_ids]) & active
