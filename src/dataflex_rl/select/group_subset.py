"""Per-group subset selection: PODS max-variance down-sampling and GFPO filtering.

Both keep n = round_half_up(keep_fraction * size) responses of each group (at least 2, at most
the group's size): GRPO advantages need two responses to compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch, clean_rewards, group_layout
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import (
    SegmentTable,
    order_code32,
    order_code64,
    round_half_up,
    segment_min,
    segment_rank,
)


def keep_counts(batch: RolloutBatch, keep_fraction: float, minimum: int = 2) -> Tensor:
    """[G] int64 responses to keep per group: round-half-up(f * size) clamped to [min, size]."""
    size = batch.group_size
    n = round_half_up(keep_fraction * size.to(torch.float64)).to(torch.int64)
    return torch.minimum(n.clamp(min=minimum), size)


def keep_count(keep_fraction: float, size: int, minimum: int = 2) -> int:
    """`keep_counts` for one group size, in Python (the same float64 operations)."""
    x = keep_fraction * float(size)
    n = math.floor(x + 0.5 + 1e-9 * max(abs(x), 1.0))  # `round_half_up`
    return min(max(n, minimum), size)


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
        B = batch.batch_size
        if B == 0:
            return torch.zeros(0, dtype=torch.bool)
        active = batch.active_mask
        size = batch.group_size
        layout = group_layout(batch)
        if layout is not None:
            keep = _max_variance_packed(scores, batch, layout, self.keep_fraction)
            if keep is not None:
                return keep
        k = keep_counts(batch, self.keep_fraction)
        if layout is not None:
            sorted_r, perm = _sorted_groups_table(scores, active, layout, size)
        else:
            sorted_r, rank = _sorted_groups_flat(scores, batch, size)
        S = sorted_r.shape[1] - 1
        a_star = _best_low_count(sorted_r, size, k)
        if layout is not None:  # keep by sorted position, scattered back to the cells
            j = torch.arange(S, dtype=torch.int64)[None, :]
            keep_sorted = ((j < a_star[:, None]) | (j >= (size - k + a_star)[:, None])) & (
                j < size[:, None]
            )
            cells = torch.zeros_like(keep_sorted).scatter_(1, perm, keep_sorted)
            return layout.take(cells) & active
        # an active row's rank is below its group's size: the high block ends there
        ends = torch.stack([a_star, size - k + a_star], 1).index_select(0, batch.group_ids)
        return ((rank < ends[:, 0]) | (rank >= ends[:, 1])) & active


def _best_low_count(sorted_r: Tensor, size: Tensor, k: Tensor) -> Tensor:
    """[G] int64 a*: the smallest a whose subset "a lowest + (k - a) highest" has the largest
    variance (within a relative 1e-12), from ``sorted_r`` [G, S + 1] (0, then each group's
    active scores ascending, shifted by their minimum; entries past the group's size are
    never read)."""
    G, S = sorted_r.shape[0], sorted_r.shape[1] - 1
    # [0]: P[:, j] = sum of the j lowest, [1]: Q, of their squares
    PQ = torch.stack([sorted_r, sorted_r * sorted_r]).cumsum(2)
    A = int(k.max()) if G else 0  # a > k is no subset
    a = torch.arange(A + 1, dtype=torch.int64)[None, :]  # [1, A+1]
    hi_start = (size[:, None] - (k[:, None] - a)).clamp(min=0, max=S)
    # subset "a lowest + (k - a) highest": P[a] + P[size] - P[size - k + a], likewise Q
    total = PQ.gather(2, size[None, :, None].expand(2, G, 1))
    high = PQ.gather(2, hi_start.expand(2, G, A + 1))
    sum_, sq = PQ[:, :, : A + 1] + total - high
    kf = k[:, None].clamp(min=1).to(torch.float64)
    var = sq / kf - (sum_ / kf) ** 2
    valid = (a <= k[:, None]) & (hi_start >= a)
    var = torch.where(valid, var, torch.full_like(var, -1.0))
    best = var.max(1, keepdim=True).values
    tol = 1e-12 * (1.0 + best.abs())
    return ((var >= best - tol) & valid).to(torch.int64).argmax(1)  # first (smallest) a


def _best_low_count_uniform(sorted_r: Tensor, size: int, k: int) -> Tensor:
    """`_best_low_count` when every group has ``size`` active rows and keeps ``k``: every
    a in 0..k is a subset, and P[size - k + a] is a column range (the same operations, so
    the same values)."""
    PQ = torch.stack([sorted_r, sorted_r * sorted_r]).cumsum(2)
    sum_, sq = PQ[:, :, : k + 1] + PQ[:, :, size : size + 1] - PQ[:, :, size - k : size + 1]
    kf = float(max(k, 1))
    var = sq / kf - (sum_ / kf) ** 2
    best = var.max(1, keepdim=True).values
    tol = 1e-12 * (1.0 + best.abs())
    return (var >= best - tol).view(torch.uint8).argmax(1)  # first (smallest) a


#: the key of inactive rows and empty cells in `_top_k_packed`'s tables: after every row
_LAST = torch.iinfo(torch.int64).max
#: 2**31 << column bits: the key of inactive rows and empty cells in `_max_variance_packed`,
#: above every active row's key (`order_code32` codes are below 2**31)
_EMPTY_CODE = 2**31


def _max_variance_packed(
    scores: Tensor, batch: RolloutBatch, layout: SegmentTable, keep_fraction: float
) -> Tensor | None:
    """`MaxVariance.select` by one unstable row sort of the group table, or None when the
    scores do not pack (not float32) or shifting by the group minimum is not exact.

    Keys (score code above column) are distinct, so the unstable sort orders rows as a stable
    one would; kept: keys below the a*-th sorted key or at least the (size - k + a*)-th.
    """
    code = order_code32(scores)
    if code is None:
        return None
    active, size = batch.active_mask, batch.group_size
    G, W = layout.num_segments, layout.width
    bits = (W - 1).bit_length()
    empty = _EMPTY_CODE << bits
    table = layout.fill(torch.where(active, (code << bits) + layout.column, empty), empty)
    sorted_keys, order = torch.sort(table, dim=1)  # distinct keys: stable or not alike
    # the sorted scores (0 past each group's size)
    values = layout.fill(torch.where(active, scores, 0.0), 0)
    raw = values.gather(1, order).to(torch.float64)
    lo = raw[:, :1]
    sorted_r = torch.zeros(G, W + 1, dtype=torch.float64)
    shifted = torch.sub(raw, lo, out=sorted_r[:, 1:])
    # an exact shift keeps distinct scores distinct (x - lo + lo == x; NaN and infinities
    # fail it too); read back with the group sizes
    inexact = (raw - (shifted + lo)).count_nonzero()
    flags = torch.stack([inexact, *torch.aminmax(size)]).tolist()
    if flags[0]:
        return None
    if flags[1] == flags[2]:  # every group the same size (the usual GRPO batch)
        n = flags[1]
        k = keep_count(keep_fraction, n)
        a_star = _best_low_count_uniform(sorted_r, n, k)
        ends = torch.stack([a_star, a_star + (n - k)], 1)
    else:
        kt = keep_counts(batch, keep_fraction)
        a_star = _best_low_count(sorted_r, size, kt)
        ends = torch.stack([a_star, size - kt + a_star], 1)
    padded = torch.cat([sorted_keys, torch.full((G, 1), empty)], 1)
    ends = padded.gather(1, ends)
    keep = (table < ends[:, :1]) | (table >= ends[:, 1:])
    return layout.take(keep) & active


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
        layout = group_layout(batch)
        if layout is not None:
            keep = _top_k_packed(scores, self.largest, batch, layout, self.keep_fraction)
            if keep is not None:
                return keep
        s = scores.to(torch.float64)
        s = torch.where(active, -s if self.largest else s, torch.zeros_like(s))
        rank = segment_rank(
            (
                batch.response_length,
                -clean_rewards(batch).to(torch.float64),
                s,
                (~active).to(torch.int8),
            ),
            batch.group_ids,
            G,
            table=layout,
        )
        k = keep_counts(batch, self.keep_fraction)
        return (rank < k.index_select(0, batch.group_ids)) & active


def _top_k_packed(
    scores: Tensor, largest: bool, batch: RolloutBatch, layout: SegmentTable, keep_fraction: float
) -> Tensor | None:
    """`GroupFilter.select` on the group table by two unstable row sorts (the k-th score code
    cuts; ties at it by a packed (reward, length, column) key), or None when the tie-break
    keys do not pack into an int64."""
    active = batch.active_mask
    reward = order_code32(clean_rewards(batch))
    W = layout.width
    col_bits = (W - 1).bit_length()
    len_bits = int(batch.response_mask.shape[1]).bit_length()
    if reward is None or 32 + len_bits + col_bits > 63:
        return None
    size = batch.group_size
    lo, hi = torch.stack(torch.aminmax(size)).tolist()
    # primary: the score's order code; inactive rows after every active one
    primary = layout.fill(torch.where(active, order_code64(scores, largest), _LAST), _LAST)
    sorted_primary = torch.sort(primary, dim=1).values
    if lo == hi:  # every group the same size (the usual GRPO batch)
        k = keep_count(keep_fraction, lo)
        if k == 0:
            return torch.zeros_like(active)
        cut = sorted_primary[:, k - 1 : k]
    else:
        k = keep_counts(batch, keep_fraction)[:, None]
        cut = sorted_primary.gather(1, (k - 1).clamp(min=0))
    below = primary < cut
    tied = primary == cut
    need = k - below.sum(1, keepdim=True)  # >= 1 where k >= 1: the k-th row is tied
    # reward descending: 2**31 - 1 - code in [0, 2**32)
    second = ((2**31 - 1 - reward) << (len_bits + col_bits)) + (
        (batch.response_length << col_bits) + layout.column
    )
    second = torch.where(tied, layout.fill(second, _LAST), _LAST)
    cut2 = torch.sort(second, dim=1).values.gather(1, (need - 1).clamp(min=0))
    return layout.take(below | (second <= cut2)) & active
