"""Vectorized segment ops, hand-worked."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.segment import (
    lexsort,
    moments_and_counts,
    order_code32,
    order_code64,
    rank_in_segment,
    round_half_up,
    segment_count,
    segment_max,
    segment_min,
    segment_rank,
    segment_sum,
    segment_table,
)
from tests.numerics import table_moments

SEG = torch.tensor([1, 0, 1, 2, 0])  # segment 3 is empty
VAL = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])


def test_segment_sum_and_count():
    # segment 0: rows 1, 4 -> 2 + 5 = 7; segment 1: rows 0, 2 -> 1 + 3 = 4; 2: 4; 3: empty -> 0
    assert segment_sum(VAL, SEG, 4).tolist() == [7.0, 4.0, 4.0, 0.0]
    mask = torch.tensor([True, True, False, True, True])
    out = segment_count(mask, SEG, 4)
    assert out.dtype == torch.int64 and out.tolist() == [2, 1, 1, 0]


def test_segment_max_min_with_empty_value():
    assert segment_max(VAL, SEG, 4, empty=-9.0).tolist() == [5.0, 3.0, 4.0, -9.0]
    assert segment_min(VAL, SEG, 4, empty=99.0).tolist() == [2.0, 1.0, 4.0, 99.0]
    # ``empty`` inside the values' range must not leak into non-empty segments
    assert segment_min(VAL, SEG, 4, empty=0.0).tolist() == [2.0, 1.0, 4.0, 0.0]
    assert segment_max(VAL, SEG, 4, empty=10.0).tolist() == [5.0, 3.0, 4.0, 10.0]
    idx = torch.arange(5)
    assert segment_min(idx, SEG, 4, empty=0).tolist() == [1, 0, 3, 0]  # first row of each


def test_lexsort_last_key_primary_and_stable():
    primary = torch.tensor([1, 0, 1, 0])
    secondary = torch.tensor([5.0, 7.0, 5.0, 6.0])
    # primary 0: rows 1 (7), 3 (6) -> 3, 1; primary 1: rows 0 (5), 2 (5) tie -> by index 0, 2
    assert lexsort(secondary, primary).tolist() == [3, 1, 0, 2]


def _one_sort_per_key(*keys):
    """The plain definition: one stable torch.sort per key, least significant first."""
    order = torch.arange(keys[0].shape[0])
    for key in keys:
        order = order[torch.sort(key[order], stable=True).indices]
    return order


def test_lexsort_float_ties_like_torch_sort():
    nan = float("nan")
    x = torch.tensor([0.0, -0.0, nan, -nan, float("inf"), -float("inf"), 1e-45, -1e-45, 2.0])
    # -0.0 ties 0.0 (index order), NaNs of either sign tie and go last
    assert lexsort(x).tolist() == [5, 7, 0, 1, 6, 8, 4, 2, 3]
    assert lexsort(x.double()).tolist() == [5, 7, 0, 1, 6, 8, 4, 2, 3]
    # float64 values no float32 holds (1 + 2**-40 rounds to 1.0 in float32) keep their order
    y = torch.tensor([1.0 + 2.0**-40, 1.0, -1e300, 1e300], dtype=torch.float64)
    assert lexsort(y).tolist() == [2, 1, 0, 3]
    # an int64 key spanning more than 63 bits sorts alone, still stable
    z = torch.tensor([2**63 - 1, -(2**63), 0, -(2**63)])
    assert lexsort(torch.tensor([1, 0, 0, 1]), z).tolist() == [1, 3, 2, 0]


def test_lexsort_packed_matches_one_sort_per_key():
    g = torch.Generator().manual_seed(3)
    values = torch.tensor(
        [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.0, -1.0, 0.5, 3.4e38, 1e-45]
    )

    def key(kind, n):
        pick = torch.randint(0, len(values), (n,), generator=g)
        return {
            "f32": values[pick],
            "f64": values[pick].double() + torch.randint(0, 2, (n,), generator=g) * 1e-12,
            "f16": torch.randint(-3, 3, (n,), generator=g).half(),
            "i8": torch.randint(0, 2, (n,), generator=g).to(torch.int8),
            "bool": torch.randint(0, 2, (n,), generator=g).bool(),
            "i64": torch.randint(-5, 500, (n,), generator=g),
        }[kind]

    kinds = ["f32", "f64", "f16", "i8", "bool", "i64"]
    for _ in range(200):
        n = int(torch.randint(1, 40, (1,), generator=g))
        picks = torch.randint(
            0, len(kinds), (int(torch.randint(1, 6, (1,), generator=g)),), generator=g
        )
        keys = [key(kinds[int(i)], n) for i in picks]
        assert torch.equal(lexsort(*keys), _one_sort_per_key(*keys))


def test_segment_rank_matches_flat_sort():
    g = torch.Generator().manual_seed(4)
    for trial in range(200):
        n = int(torch.randint(1, 60, (1,), generator=g))
        seg = torch.randint(0, 8, (n,), generator=g)
        if trial % 2:
            seg = seg.sort().values  # contiguous segments: the table path
        if trial % 5 == 0:
            seg[: n // 2] = 0  # one large segment: the flat path
        seg = torch.unique(seg, return_inverse=True)[1]
        G = int(seg.max()) + 1
        keys = [
            torch.randint(0, 3, (n,), generator=g).float(),
            torch.randn(n, generator=g, dtype=torch.float64).round(),
            torch.randint(0, 2, (n,), generator=g).to(torch.int8),
        ][: trial % 4]
        expected = rank_in_segment(_one_sort_per_key(*keys, seg), seg, G)
        assert torch.equal(segment_rank(keys, seg, G), expected)


def _loop_segment_rank(keys, seg):
    """Plain loop: per segment, its elements sorted by (last key, ..., first key, index)."""
    n = len(seg)
    ranks = [0] * n
    for s in set(seg.tolist()):
        members = [i for i in range(n) if int(seg[i]) == s]
        members.sort(key=lambda i: tuple(float(k[i]) for k in reversed(keys)) + (i,))
        for r, i in enumerate(members):
            ranks[i] = r
    return ranks


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    tail=st.lists(st.integers(0, 11), max_size=4),
    values=st.lists(st.integers(-2, 2), min_size=100, max_size=100),
    flags=st.lists(st.booleans(), min_size=100, max_size=100),
    n_keys=st.integers(0, 2),
)
def test_segment_rank_with_appended_rows_matches_loop(sizes, tail, values, flags, n_keys):
    # segments listed one after another, then a short tail of rows appended in any order
    # (hosts append padding rows copied from earlier groups): the table path with a tail
    head = [s for s, size in enumerate(sizes) for _ in range(size)]
    seg = torch.tensor(head + [t % len(sizes) for t in tail], dtype=torch.int64)
    n = seg.shape[0]
    keys = [
        torch.tensor(values[:n], dtype=torch.float32) / 2,
        torch.tensor(flags[:n], dtype=torch.int8),
    ][:n_keys]
    expected = _loop_segment_rank(keys, seg)
    assert segment_rank(keys, seg, len(sizes)).tolist() == expected
    assert segment_rank(keys, seg, len(sizes), table=None).tolist() == expected  # flat sort


def test_segment_table_cells_hand_worked():
    # segments listed in order, then rows 4 (segment 0) and 5 (segment 1) appended
    t = segment_table(torch.tensor([0, 0, 1, 1, 0, 1]), 2)
    assert (t.num_segments, t.width) == (2, 3)
    assert t.cell.tolist() == [0, 1, 3, 4, 2, 5]
    assert t.fill(torch.arange(6.0), -1.0).tolist() == [[0.0, 1.0, 4.0], [2.0, 3.0, 5.0]]
    assert t.take(t.fill(torch.arange(6.0), -1.0)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # a segment of 20 among segments of 1: 5 x 20 cells for 24 elements is too sparse (> 4N)
    assert segment_table(torch.tensor([0] * 20 + [1, 2, 3, 4]), 5) is None


def test_segment_table_identity_and_columns():
    # every segment full and in order: each element's cell is its index
    t = segment_table(torch.tensor([0, 0, 1, 1, 2, 2]), 3)
    assert (t.num_segments, t.width) == (3, 2)
    assert t.cell.tolist() == [0, 1, 2, 3, 4, 5] and t.column.tolist() == [0, 1] * 3
    # one element; a descent at the very end (a tail of one)
    assert segment_table(torch.tensor([0]), 1).cell.tolist() == [0]
    t = segment_table(torch.tensor([0, 1, 1, 0]), 2)
    assert t.cell.tolist() == [0, 2, 3, 1] and t.column.tolist() == [0, 0, 1, 1]
    # groups out of order beyond a short tail: no table
    assert segment_table(torch.tensor([1, 0] * 200), 2) is None


def test_segment_table_leaving_out_the_last_elements():
    # 3 segments of 2, then 2 appended elements (padding copies of rows 0, 1) left out: the
    # first 6 fill a [3, 2] table exactly, the cells are the elements themselves
    seg = torch.tensor([0, 0, 1, 1, 2, 2, 0, 0])
    t = segment_table(seg, 3, covered=6)
    assert (t.identity, t.covered, t.size, t.width) == (True, 6, 8, 2)
    x = torch.arange(8.0)
    assert t.fill(x, -1.0).tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert t.take(t.fill(x, -1.0), outside=-7.0).tolist() == [0, 1, 2, 3, 4, 5, -7, -7]
    assert t.column.tolist() == [0, 1, 0, 1, 0, 1, 0, 0]
    # not identity: segment 1 has one element before the left-out ones
    t = segment_table(torch.tensor([0, 0, 1, 0]), 2, covered=3)
    assert (t.identity, t.width, t.cell.tolist()) == (False, 2, [0, 1, 2])
    assert t.fill(torch.tensor([5, 6, 7, 8]), 0).tolist() == [[5, 6], [7, 0]]
    assert t.take(torch.tensor([[5, 6], [7, 0]]), outside=-1).tolist() == [5, 6, 7, -1]
    # segment_rank needs every element: it lays out the whole table again
    val = torch.tensor([3.0, 1.0, 2.0, 0.0])
    assert segment_rank([val], torch.tensor([0, 0, 1, 0]), 2, table=t).tolist() == [2, 1, 0, 0]
    assert segment_table(seg, 3, covered=0) is None


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=10),
    tail=st.lists(st.integers(0, 9), max_size=4),
    values=st.lists(
        st.sampled_from([0.0, 1.0, -2.5, 0.1, 1e-30, 3e38, -0.0]), min_size=70, max_size=70
    ),
    flags=st.lists(st.booleans(), min_size=70, max_size=70),
)
def test_table_moments_equal_segment_moments_exactly(sizes, tail, values, flags):
    # the same float64 values bit for bit: sums run in index order in both
    seg = torch.tensor(
        [s for s, size in enumerate(sizes) for _ in range(size)] + [t % len(sizes) for t in tail]
    )
    n, S = seg.shape[0], len(sizes)
    x, mask = torch.tensor(values[:n]), torch.tensor(flags[:n])
    table = segment_table(seg, S)
    assert table is not None
    mean, std, dev, count = moments_and_counts(x, seg, S, mask)
    t_mean, t_std, t_dev, t_count, t_mask = table_moments(x, mask, table)
    assert torch.equal(t_mean[:, 0], mean) and torch.equal(t_std[:, 0], std)
    assert torch.equal(table.take(t_dev), dev) and torch.equal(t_count[:, 0], count)
    assert torch.equal(table.take(t_mask), mask)


def test_order_codes_order_like_torch_sort():
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.4e38, -3.4e38, 1e-45, float("inf"), -float("inf")])
    code = order_code32(x)
    assert code.tolist()[:2] == [0, 0]  # -0.0 ties 0.0
    assert torch.equal(torch.sort(code, stable=True).indices, torch.sort(x, stable=True).indices)
    assert order_code32(x.double() + 2.0**-40) is None  # values float32 does not hold
    assert order_code32(torch.tensor([1, 2])) is None
    y = torch.tensor([float("nan"), 2.0, -float("nan"), -0.0, 0.0, -1e300, float("inf")]).double()
    # NaNs of either sign tie after +inf, -0.0 ties 0.0 (torch.sort's order, stable)
    assert torch.sort(order_code64(y), stable=True).indices.tolist() == [5, 3, 4, 1, 6, 0, 2]
    # descending: the order of -y, NaNs still last (after -inf too)
    z = torch.tensor([float("nan"), -float("inf"), 2.0, -0.0, 0.0, float("inf")])
    assert torch.sort(order_code64(z, descending=True), stable=True).indices.tolist() == [
        5, 2, 3, 4, 1, 0,
    ]  # fmt: skip


def test_segment_rank_tail_hand_worked():
    # segments 0: rows 0, 1 and appended row 4; 1: rows 2, 3 and appended row 5
    seg = torch.tensor([0, 0, 1, 1, 0, 1])
    val = torch.tensor([3.0, 1.0, 2.0, 2.0, 1.0, 0.0])
    # segment 0: 1.0 (row 1), 1.0 (row 4, later index), 3.0 (row 0); segment 1: row 5, 2, 3
    assert segment_rank([val], seg, 2).tolist() == [2, 0, 1, 2, 1, 0]
    assert segment_rank([], seg, 2).tolist() == [0, 1, 0, 1, 2, 2]
    assert segment_rank([val], seg, 2, table=None).tolist() == [2, 0, 1, 2, 1, 0]


def test_segment_rank_hand_worked():
    # segments 0: rows 0-2, 1: rows 3-4; by value, ties by index
    seg = torch.tensor([0, 0, 0, 1, 1])
    val = torch.tensor([2.0, 1.0, 2.0, 5.0, 5.0])
    assert segment_rank([val], seg, 2).tolist() == [1, 0, 2, 0, 1]
    assert segment_rank([], seg, 2).tolist() == [0, 1, 2, 0, 1]


def test_rank_in_segment():
    order = lexsort(VAL, SEG)  # by segment, then value: rows 1, 4 | 0, 2 | 3
    assert rank_in_segment(order, SEG, 4).tolist() == [0, 0, 1, 0, 1]


@pytest.mark.parametrize(
    "x, expected",
    [
        (2.5, 3.0),
        (3.5, 4.0),
        (2.4999, 2.0),
        (0.5, 1.0),
        (-0.5, 0.0),
        (1.0, 1.0),
        # 0.7 * 45 is 31.499999999999996 in binary floating point; the count it means is 31.5 -> 32
        (0.7 * 45, 32.0),
        # 0.58 * 25 is 14.499999999999998 in binary floating point; it means 14.5 -> 15
        (0.58 * 25, 15.0),
    ],
)
def test_round_half_up(x, expected):
    assert float(round_half_up(torch.tensor(x, dtype=torch.float64))) == expected
