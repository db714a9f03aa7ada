"""Vectorized segment ops, hand-worked."""

import pytest
import torch

from dataflex_rl.core.segment import (
    lexsort,
    rank_in_segment,
    round_half_up,
    segment_count,
    segment_max,
    segment_min,
    segment_sum,
)

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
