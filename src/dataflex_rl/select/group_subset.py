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
from dataflex_rl.core.segment import SegmentTable, round_half_up, segment_min, segment_rank


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
        size = batch.group_size
        k = keep_counts(batch, self.keep_fraction)
        layout = batch.group_layout
        if layout is not None:
            sorted_r, perm = _sorted_groups_table(scores, active, layout, size)
        else:
            sorted_r, rank = _sorted_groups_flat(scores, batch, size)
        S = sorted_r.shape[1] - 1
        # [0]: P[:, j] = sum of the j lowest, [1]: Q, of their squares
        PQ = torch.stack([sorted_r, sorted_r * sorted_r]).cumsum(2)
        a = torch.arange(S + 1, dtype=torch.int64)[None, :]  # [1, S+1]
        hi_start = (size[:, None] - (k[:, None] - a)).clamp(min=0, max=S)
        # subset "a lowest + (k - a) highest": P[a] + P[size] - P[size - k + a], likewise Q
        total = PQ.gather(2, size[None, :, None].expand(2, G, 1))
        sum_, sq = PQ + total - PQ.gather(2, hi_start.expand(2, G, S + 1))
        kf = k[:, None].clamp(min=1).to(torch.float64)
        var = sq / kf - (sum_ / kf) ** 2
        valid = (a <= k[:, None]) & (hi_start >= a)
        var = torch.where(valid, var, torch.full_like(var, -1.0))
        best = var.max(1, keepdim=True).values
        tol = 1e-12 * (1.0 + best.abs())
        a_star = ((var >= best - tol) & valid).to(torch.int64).argmax(1)  # first (smallest) a
        if layout is not None:  # keep by sorted position, scattered back to the cells
            j = a[:, :S]
            keep_sorted = ((j < a_star[:, None]) | (j >= (size - k + a_star)[:, None])) & (
                j < size[:, None]
            )
            cells = torch.zeros_like(keep_sorted).scatter_(1, perm, keep_sorted)
            return layout.take(cells) & active
        # an active row's rank is below its group's size: the high block ends there
        ends = torch.stack([a_star, size - k + a_star], 1).index_select(0, batch.group_ids)
        return ((rank < ends[:, 0]) | (rank >= ends[:, 1])) & active


def _sorted_groups_table(
    scores: Tensor, active: Tensor, layout: SegmentTable, size: Tensor
) -> tuple[Tensor, Tensor]:
    """([G, S + 1] float64: 0, then each group's active scores minus the group minimum,
    ascending (ties by index), then zeros; [G, S] the sorting permutation of the layout's
    cells), with one row sort of the group table."""
    inf = float("inf")
    vals = layout.fill(torch.where(active, scores.to(torch.float64), inf), inf)
    # shift by the group minimum (variance is shift-invariant): a constant group has all
    # zeros, so every subset scores exactly 0 and the first a wins (see segment_moments)
    lo = vals.amin(1, keepdim=True)
    lo = torch.where(lo.abs() < inf, lo, 0.0)  # groups without active rows: 0
    ordered, perm = torch.sort(vals - lo, dim=1, stable=True)  # inactive (inf) last
    G, S = ordered.shape
    in_group = torch.arange(S, device=size.device)[None, :] < size[:, None]
    sorted_r = torch.zeros(G, S + 1, dtype=torch.float64, device=ordered.device)
    sorted_r[:, 1:] = torch.where(in_group, ordered, 0.0)
    return sorted_r, perm


def _sorted_groups_flat(scores: Tensor, batch: RolloutBatch, size: Tensor) -> tuple[Tensor, Tensor]:
    """`_sorted_groups_table` for any group layout: ([G, S + 1] sorted shifted scores, [B]
    each row's rank in its group) from one flat `segment_rank`."""
    G = batch.num_groups
    active = batch.active_mask
    s = torch.where(active, scores.to(torch.float64), 0.0)
    lo = segment_min(torch.where(active, s, float("inf")), batch.group_ids, G, empty=0.0)
    lo = torch.where(lo.abs() < float("inf"), lo, 0.0)
    s = torch.where(active, s - lo.index_select(0, batch.group_ids), 0.0)
    inactive_last = (~active).to(torch.int8)
    rank = segment_rank((s, inactive_last), batch.group_ids, G, table=None)
    S = int(size.max()) if G else 0
    # row g: 0, then group g's active scores ascending; inactive rows land in a spare cell
    cell = torch.where(active, batch.group_ids * (S + 1) + rank + 1, G * (S + 1))
    sorted_r = torch.zeros(G * (S + 1) + 1, dtype=torch.float64)
    sorted_r.scatter_(0, cell, s)  # s is 0 where inactive (all land in the spare cell)
    return sorted_r[:-1].view(G, S + 1), rank


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
            table=batch.group_layout,
        )
        k = keep_counts(batch, self.keep_fraction)
        return (rank < k.index_select(0, batch.group_ids)) & active
