"""Vectorized segment (per-group) operations.

Every function here works on a flat tensor of values and a tensor of dense segment ids
(``0..num_segments-1``) of the same length, with scatter/sort ops only: no Python loop over
segments or elements. They are the building blocks of group statistics and of the
group-level selectors.
"""

from __future__ import annotations

import torch
from torch import Tensor


def segment_sum(values: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Sum of ``values`` [N] per segment -> [num_segments] (0 for empty segments)."""
    out = torch.zeros(num_segments, dtype=values.dtype, device=values.device)
    return out.index_add_(0, segment_ids, values)


def segment_count(mask: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Number of True entries of ``mask`` [N] per segment -> int64 [num_segments]."""
    return segment_sum(mask.to(torch.int64), segment_ids, num_segments)


def segment_max(values: Tensor, segment_ids: Tensor, num_segments: int, empty: float) -> Tensor:
    """Max of ``values`` per segment; ``empty`` for segments with no element.

    ``empty`` never takes part in the reduction of a non-empty segment.
    """
    out = torch.full((num_segments,), empty, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, segment_ids, values, reduce="amax", include_self=False)


def segment_min(values: Tensor, segment_ids: Tensor, num_segments: int, empty: float) -> Tensor:
    """Min of ``values`` per segment; ``empty`` for segments with no element.

    ``empty`` never takes part in the reduction of a non-empty segment.
    """
    out = torch.full((num_segments,), empty, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, segment_ids, values, reduce="amin", include_self=False)


def lexsort(*keys: Tensor) -> Tensor:
    """Indices that sort by the keys, the **last** key primary (numpy's convention).

    Each pass is a stable sort, so equal keys keep their input order: ties are broken by
    index, which makes every ranking in this package deterministic.
    """
    n = keys[0].shape[0]
    order = torch.arange(n, device=keys[0].device)
    for key in keys:
        _, idx = torch.sort(key[order], stable=True)
        order = order[idx]
    return order


def rank_in_segment(sort_order: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Position of each element inside its segment, given an order sorted by segment first.

    Args:
        sort_order: [N] permutation that lists elements segment by segment (for example from
            ``lexsort(score, segment_ids)``).
        segment_ids: [N] dense segment id of each element.
        num_segments: number of segments.

    Returns:
        int64 [N]: 0 for the first element of its segment in ``sort_order``, 1 for the next, ...
    """
    n = segment_ids.shape[0]
    counts = torch.bincount(segment_ids, minlength=num_segments)
    starts = torch.cumsum(counts, 0) - counts
    sorted_seg = segment_ids[sort_order]
    pos = torch.arange(n, device=segment_ids.device) - starts[sorted_seg]
    ranks = torch.empty_like(pos)
    ranks[sort_order] = pos
    return ranks


def round_half_up(x: Tensor) -> Tensor:
    """Round half up (2.5 -> 3), unlike torch.round's half-to-even.

    Values within a relative 1e-9 below a half count as the half: ``keep_fraction * size`` such
    as 0.7 * 45 is 31.499999999999996 in binary floating point but means 31.5, so it gives 32.
    """
    return torch.floor(x + 0.5 + 1e-9 * x.abs().clamp(min=1.0))
