"""Vectorized segment (per-group) operations on flat values and dense segment ids
(``0..num_segments-1``): scatter/sort ops only, no Python loop over segments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

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
    """Max of ``values`` per segment; ``empty`` (only) for segments with no element."""
    out = torch.full((num_segments,), empty, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, segment_ids, values, reduce="amax", include_self=False)


def segment_min(values: Tensor, segment_ids: Tensor, num_segments: int, empty: float) -> Tensor:
    """Min of ``values`` per segment; ``empty`` (only) for segments with no element."""
    out = torch.full((num_segments,), empty, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, segment_ids, values, reduce="amin", include_self=False)


def segment_moments(
    values: Tensor, segment_ids: Tensor, num_segments: int, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-segment mean and unbiased std of ``values`` over ``mask``, and each deviation.

    **The one rule for group statistics in this package**: float64, on values shifted by
    their segment's minimum, so a segment whose masked values are all equal has std and every
    deviation exactly 0 ("zero variance" means min == max). ``mask``: [N] bool, the elements
    that count; float32-range inputs give finite results.

    Returns:
        (mean [S] float64 (0 for empty segments), std [S] float64 unbiased (n - 1) like
        ``torch.std`` (0 for segments of size < 2), dev [N] float64 ``x - mean`` of the
        element's segment (0 where ``mask`` is False)).
    """
    mean, std, dev, _ = moments_and_counts(values, segment_ids, num_segments, mask)
    return mean, std, dev


def moments_and_counts(
    values: Tensor, segment_ids: Tensor, num_segments: int, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`segment_moments` and the int64 [S] number of masked elements per segment."""
    x = values.to(torch.float64)
    inf = float("inf")
    lo = segment_min(torch.where(mask, x, inf), segment_ids, num_segments, empty=0.0)
    lo = torch.where(lo.abs() < inf, lo, 0.0)  # empty (or a masked -inf): 0
    shifted = torch.where(mask, x - lo.index_select(0, segment_ids), 0.0)
    count = segment_count(mask, segment_ids, num_segments)
    n = count.to(torch.float64)
    shifted_mean = segment_sum(shifted, segment_ids, num_segments) / n.clamp(min=1)
    dev = torch.where(mask, shifted - shifted_mean.index_select(0, segment_ids), 0.0)
    ss = segment_sum(dev * dev, segment_ids, num_segments)
    var = torch.where(n > 1, ss / (n - 1).clamp(min=1), 0.0)
    return lo + shifted_mean, var.sqrt(), dev, count


def table_deviations(
    values: Tensor, mask: Tensor, table: SegmentTable
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per-segment moments of a table before the variance: (lo, shifted mean, dev, sum of dev**2, count,
    mask table), [S, 1] columns but dev and the mask [S, width]."""
    inf = float("inf")
    xt = table.fill(torch.where(mask, values.to(torch.float64), inf), inf)
    mt = table.fill(mask, False)
    lo = xt.amin(1, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)  # empty (or a masked -inf): 0
    shifted = torch.where(mt, xt - lo, 0.0)
    count = mt.sum(1, keepdim=True)
    shifted_mean = shifted.cumsum(1)[:, -1:] / count.clamp(min=1)
    dev = torch.where(mt, shifted - shifted_mean, 0.0)
    ss = (dev * dev).cumsum(1)[:, -1:]
    return lo, shifted_mean, dev, ss, count, mt


def table_std_dev(
    values: Tensor, mask: Tensor, table: SegmentTable
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(std [S, 1], dev, count [S, 1], mask table) of ``values`` laid out in ``table``; std is
    not forced to 0 for segments of fewer than two masked elements (it is 0 there anyway when
    their values are finite; callers that use only segments of two or more need no more)."""
    _, _, dev, ss, count, mt = table_deviations(values, mask, table)
    return (ss / (count - 1).clamp(min=1)).sqrt_(), dev, count, mt


#: order codes of +inf in float32 and float64; the codes of NaNs lie beyond +-inf
F32_INF_CODE = 0x7F800000
_F64_INF_CODE = 0x7FF0000000000000


def _order_code(key: Tensor) -> tuple[Tensor, int | None]:
    """int64 codes whose signed order is ``torch.sort``'s order of ``key``, and the code of +inf.

    Floats: the IEEE bits with negative magnitudes flipped (-0.0 made 0.0), 32-bit codes when
    every value is a float32, else 64-bit; NaN codes lie beyond +-inf (`_packed_words` ties
    them). Integer keys: themselves, and ``None``.
    """
    if not key.is_floating_point():
        return key.to(torch.int64), None
    x = key + 0.0  # -0.0 + 0.0 is 0.0
    if x.dtype == torch.float64:
        as32 = x.to(torch.float32)
        if not torch.equal(as32.to(torch.float64), x):  # (NaN compares unequal: also here)
            bits = x.view(torch.int64)
            return torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFFFFFFFFFF), _F64_INF_CODE
        x = as32
    if x.dtype != torch.float32:  # float16, bfloat16
        x = x.to(torch.float32)
    bits = x.view(torch.int32).to(torch.int64)
    return bits ^ ((bits >> 63) & 0x7FFFFFFF), F32_INF_CODE


def order_code32(key: Tensor) -> Tensor | None:
    """int64 codes in [-2**31, 2**31) whose order is ``torch.sort``'s order of the float
    tensor ``key`` (-0.0 ties 0.0; NaN codes lie beyond those of +-inf), or None when ``key``
    is not float or holds a value float32 does not (`_order_code`). The code of -inf is
    ``-1 - F32_INF_CODE``, of +inf ``F32_INF_CODE``."""
    if not key.is_floating_point():
        return None
    code, inf = _order_code(key)
    return code if inf == F32_INF_CODE else None


def order_code64(key: Tensor, descending: bool = False) -> Tensor:
    """int64 codes whose order is ``torch.sort``'s order of ``key`` as float64 (of ``-key``
    with ``descending``): -0.0 ties 0.0, NaNs (any sign or payload) tie with each other after
    every number either way."""
    x = key.to(torch.float64) + 0.0  # -0.0 + 0.0 is 0.0
    bits = x.view(torch.int64)
    code = bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)
    # numbers: [-inf code - 1, inf code], negated [-inf code, inf code + 1]; NaNs above both
    return torch.where(x == x, -code if descending else code, _F64_INF_CODE + 2)


def _packed_words(keys: Sequence[Tensor]) -> list[Tensor]:
    """int64 words (each <= 2**63 - 1), least significant first, whose lexicographic order is
    the keys' order: the keys' `_order_code` codes, offset to 0 and packed into as few words
    as their ranges allow (a constant key is dropped)."""
    codes = [_order_code(k) for k in keys]
    if not codes:
        return []
    bounds = torch.stack([torch.stack(torch.aminmax(c)) for c, _ in codes]).tolist()
    words: list[list[tuple[Tensor, int]]] = []
    used = 64
    for (code, inf), (lo, hi) in zip(codes, bounds):
        if inf is not None and (hi > inf or lo < -1 - inf):  # NaNs: one code, last
            code = torch.where((code > inf) | (code < -1 - inf), inf + 1, code)
            lo, hi = torch.stack(torch.aminmax(code)).tolist()
        width = (hi - lo).bit_length()
        if width == 0:  # a constant key orders nothing
            continue
        if width > 63:
            words.append([(code, 0)])
            used = 64
            continue
        if used + width > 63:
            words.append([])
            used = 0
        words[-1].append((code - lo if lo else code, used))
        used += width
    out = []
    for word in words:
        packed = word[0][0]
        for code, shift in word[1:]:
            packed = packed + (code << shift)
        out.append(packed)
    return out


def lexsort(*keys: Tensor) -> Tensor:
    """Indices that sort by the keys, the **last** key primary (numpy's convention), ties by
    index (stable); one sort per packed word (`_packed_words`), not per key."""
    n = keys[0].shape[0]
    device = keys[0].device
    if n == 0:
        return torch.arange(0, device=device)
    order: Tensor | None = None
    for word in _packed_words(keys):
        if order is None:
            order = torch.sort(word, stable=True).indices
        else:
            order = order[torch.sort(word[order], stable=True).indices]
    return torch.arange(n, device=device) if order is None else order


def rank_in_segment(sort_order: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """int64 [N] position of each element inside its segment in ``sort_order``, a [N]
    permutation listing elements segment by segment (e.g. ``lexsort(score, segment_ids)``)."""
    n = segment_ids.shape[0]
    counts = torch.bincount(segment_ids, minlength=num_segments)
    starts = torch.cumsum(counts, 0) - counts
    sorted_seg = segment_ids[sort_order]
    pos = torch.arange(n, device=segment_ids.device) - starts[sorted_seg]
    ranks = torch.empty_like(pos)
    ranks[sort_order] = pos
    return ranks


#: most appended rows `segment_table` places with its [tail, tail] comparison
MAX_TAIL = 256


@dataclass(frozen=True, eq=False)
class SegmentTable:
    """N elements laid out as a [num_segments, width] table: row = segment, the elements of a
    segment in index order from column 0, ``cell`` the flat cell of each element; the other
    cells are empty. Group-wise sorts become row sorts of the table (`segment_rank`).

    Elements past the first ``cell.shape[0]`` (of ``size``; appended padding) have no cell:
    `fill` ignores them, `take` gives them ``outside``. ``identity``: cell = element index.
    """

    cell: Tensor
    num_segments: int
    width: int
    size: int = -1
    identity: bool = False

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", int(self.cell.shape[0]))

    @property
    def covered(self) -> int:
        """The number of leading elements laid out in the table."""
        return int(self.cell.shape[0])

    def fill(self, values: Tensor, empty) -> Tensor:
        """[num_segments, width] table of ``values`` [N], ``empty`` in the empty cells (with
        ``identity``: a view of ``values``, not to be written into)."""
        if self.covered < self.size:
            values = values[: self.covered]
        if self.identity:
            return values.reshape(self.num_segments, self.width)
        t = torch.full(
            (self.num_segments * self.width,), empty, dtype=values.dtype, device=values.device
        )
        return t.scatter_(0, self.cell, values).view(self.num_segments, self.width)

    def take(self, table: Tensor, outside=0) -> Tensor:
        """[N] each element's cell of ``table`` [num_segments, width] (``outside`` for the
        elements left out)."""
        flat = table.reshape(-1)
        out = flat if self.identity else flat.index_select(0, self.cell)
        if self.covered < self.size:
            out = torch.cat([out, out.new_full((self.size - self.covered,), outside)])
        return out

    @cached_property
    def column(self) -> Tensor:
        """[N] int64 each element's column: its position in its segment, in index order (0
        for the elements left out)."""
        col = torch.remainder(self.cell, self.width)
        if self.covered < self.size:
            col = torch.cat([col, col.new_zeros(self.size - self.covered)])
        return col


def segment_table(
    segment_ids: Tensor, num_segments: int, covered: int | None = None
) -> SegmentTable | None:
    """The `SegmentTable` of ``segment_ids`` (only the first ``covered`` elements laid out),
    or None unless the ids are non-decreasing up to a tail of at most `MAX_TAIL` elements
    and the table has at most 4N cells."""
    size = segment_ids.shape[0]
    if covered is not None and covered < size:
        segment_ids = segment_ids[:covered]
    n = segment_ids.shape[0]
    device = segment_ids.device
    if n == 0:
        return None
    G = num_segments
    if n % G == 0:  # G segments of n / G elements, in order (the usual GRPO batch)?
        cell = torch.arange(n, device=device)
        if torch.equal(cell // (n // G), segment_ids):
            return SegmentTable(cell, G, n // G, size, identity=True)
    counts = torch.bincount(segment_ids, minlength=G)
    if n > 1:  # the first descent, if any (max gives the first index of the largest value)
        down = torch.max((segment_ids[1:] < segment_ids[:-1]).view(torch.uint8), 0)
        W, any_down, j = torch.stack([counts.max(), down.values, down.indices]).tolist()
    else:
        W, any_down, j = 1, 0, 0
    if G * W > 4 * n:
        return None
    L = j + 1 if any_down else n
    if n - L > MAX_TAIL:
        return None
    if L == n and G * W == n:  # every segment has W elements, in order: cell = index
        return SegmentTable(torch.arange(n, device=device), G, W, size, identity=True)
    head = segment_ids[:L]
    tail = segment_ids[L:]
    head_counts = counts if L == n else counts - torch.bincount(tail, minlength=G)
    # cell of an in-order element: its index + (segment * width - segment start)
    offset = torch.arange(0, G * W, W, device=device) - (torch.cumsum(head_counts, 0) - head_counts)
    cell = offset.index_select(0, head) + torch.arange(L, device=device)
    if L == n:
        return SegmentTable(cell, G, W, size)
    # a tail element: after its segment's in-order elements and its earlier tail elements
    pos = (tail[:, None] == tail[None, :]).tril_(-1).sum(1)
    tail_cell = tail * W + head_counts.index_select(0, tail) + pos
    return SegmentTable(torch.cat([cell, tail_cell]), G, W, size)


def segment_rank(
    keys: Sequence[Tensor],
    segment_ids: Tensor,
    num_segments: int,
    table: SegmentTable | None | bool = True,
) -> Tensor:
    """Rank of each element inside its segment by ``keys`` (last primary), ties by index.

    Exactly ``rank_in_segment(lexsort(*keys, segment_ids), segment_ids, num_segments)``,
    by row sorts of a `SegmentTable` when there is one. ``table``: the layout when known
    (`core.batch.group_layout`), None for the flat sort, True (default) to look for one.
    """
    n = segment_ids.shape[0]
    device = segment_ids.device
    if n == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    if table is True or (isinstance(table, SegmentTable) and table.covered < n):
        table = segment_table(segment_ids, num_segments)  # every element needs a rank
    if table is None or table is False:
        return rank_in_segment(lexsort(*keys, segment_ids), segment_ids, num_segments)
    G, S = table.num_segments, table.width
    perm: Tensor | None = None
    for word in _packed_words(keys):
        # empty cells hold the largest value and follow every element: they sort last
        t = table.fill(word, torch.iinfo(torch.int64).max)
        if perm is None:
            perm = torch.sort(t, dim=1, stable=True).indices
        else:
            perm = perm.gather(1, torch.sort(t.gather(1, perm), dim=1, stable=True).indices)
    if perm is None:
        return table.cell - segment_ids * S
    ranks = torch.empty(G, S, dtype=torch.int64, device=device)
    ranks.scatter_(1, perm, torch.arange(S, device=device).expand(G, S))
    return table.take(ranks)


def round_half_up(x: Tensor) -> Tensor:
    """Round half up (2.5 -> 3), unlike torch.round's half-to-even; values within a relative
    1e-9 below a half count as the half (0.7 * 45 = 31.499999999999996 gives 32)."""
    return torch.floor(x + 0.5 + 1e-9 * x.abs().clamp(min=1.0))


def segment_quantile(values: Tensor, segment_ids: Tensor, num_segments: int, q: float) -> Tensor:
    """[S] the ``q``-quantile of each segment's values, linearly interpolated, NaN for an
    empty segment.

    Bit for bit ``torch.quantile(values, q)`` per segment (linear interpolation, in the
    values' dtype), without its 2**24-value limit. ``values``: [N] finite; ``q`` in [0, 1].
    """
    device, dtype = values.device, values.dtype
    if num_segments == 1 and values.numel():  # one segment: two selections, no sort
        ranks = torch.tensor(q, dtype=dtype, device=device) * (values.numel() - 1)
        below = int(ranks)
        above = int(torch.ceil(ranks))
        lo = torch.kthvalue(values, below + 1).values
        hi = lo if above == below else torch.kthvalue(values, above + 1).values
        return torch.lerp(lo, hi, ranks - below).reshape(1)
    order = lexsort(values, segment_ids)  # by segment, then by value
    ordered = values[order]
    counts = torch.bincount(segment_ids, minlength=num_segments)
    starts = torch.cumsum(counts, 0) - counts
    last = (counts - 1).clamp(min=0).to(dtype)
    ranks = torch.tensor(q, dtype=dtype, device=device) * last
    below = ranks.to(torch.int64)
    above = torch.ceil(ranks).to(torch.int64)
    weights = ranks - below.to(dtype)
    if ordered.numel() == 0:
        return torch.full((num_segments,), float("nan"), dtype=dtype, device=device)
    idx = (starts + below).clamp(max=ordered.numel() - 1)
    idx_above = (starts + above).clamp(max=ordered.numel() - 1)
    out = torch.lerp(ordered[idx], ordered[idx_above], weights)
    return torch.where(counts > 0, out, torch.full_like(out, float("nan")))
