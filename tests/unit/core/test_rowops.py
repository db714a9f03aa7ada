"""`core.rowops`: chunked masked row reductions == the plain masked ops (and loops) they replace."""

import pytest
import torch

import dataflex_rl.core.rowops as rowops
from dataflex_rl.core.rowops import (
    first_valid_values,
    masked_row_means,
    masked_row_sums,
    nonfinite_rows,
    row_counts,
)


def _masks(seed: int):
    """Right-padded, holed and degenerate masks, with odd widths and row offsets."""
    g = torch.Generator().manual_seed(seed)
    for B, T in [(0, 16), (3, 0), (1, 1), (5, 7), (6, 64), (9, 300), (7, 1000), (4, 1030)]:
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        yield torch.arange(T)[None, :] < lengths[:, None]
        yield torch.rand(B, T, generator=g) < torch.rand(B, 1, generator=g)
        yield torch.ones(B, T, dtype=torch.bool)
        yield torch.zeros(B, T, dtype=torch.bool)
        if B > 1:  # a view that starts one row in (storage offset)
            yield (torch.arange(T)[None, :] < lengths[:, None])[1:]


def _values(mask: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(mask.shape, generator=g)
    x[~mask] = float("nan")  # invalid tokens must never leak into a result
    return x


@pytest.fixture(params=[None, 3], ids=["one chunk", "chunks of 3 rows"])
def chunks(request, monkeypatch):
    """Run with the default chunk size and with chunks of a few rows (a ragged last chunk)."""
    if request.param is not None:
        monkeypatch.setattr(rowops, "row_chunks", _chunks_of(request.param))


def _chunks_of(rows: int):
    def row_chunks(B, T):
        for i in range(0, B, rows):
            yield i, min(i + rows, B)

    return row_chunks


def test_hand_worked_sums_counts_and_means(chunks):
    # row 0: 1, 2, (NaN invalid) -> sum 3, count 2, mean 1.5, |x| sum 3
    # row 1: -1, 4, 2 -> sum 5, |x| sum 7; row 2: nothing valid -> 0
    x = torch.tensor([[1.0, 2.0, float("nan")], [-1.0, 4.0, 2.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    assert row_counts(mask).tolist() == [2, 3, 0]
    assert masked_row_sums(x, mask).tolist() == [3.0, 5.0, 0.0]
    assert masked_row_sums(x, mask, absolute=True).tolist() == [3.0, 7.0, 0.0]
    # centered on 1 per row: (1-1) + (2-1) = 1; (-1-1) + (4-1) + (2-1) = 2
    assert masked_row_sums(x, mask, center=torch.ones(3)).tolist() == [1.0, 2.0, 0.0]
    n = row_counts(mask)
    assert masked_row_means(x, mask, n).tolist() == pytest.approx([1.5, 5 / 3, 0.0], abs=1e-15)
    means = masked_row_means(x, mask, n, absolute=True)
    assert means.tolist() == pytest.approx([1.5, 7 / 3, 0.0], abs=1e-15)


def test_counts_and_row_sums_match_the_plain_masked_ops(chunks):
    for i, mask in enumerate(_masks(0)):
        assert torch.equal(row_counts(mask), mask.sum(1))
        x = _values(mask, i)
        plain = torch.where(mask, x, 0.0)
        torch.testing.assert_close(masked_row_sums(x, mask), plain.sum(1), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(
            masked_row_sums(x, mask, absolute=True), plain.abs().sum(1), rtol=1e-5, atol=1e-4
        )


def test_nonfinite_rows_look_only_at_valid_tokens():
    for i, mask in enumerate(_masks(3)):
        x = _values(mask, i)  # NaN on every invalid token: ignored
        if mask.any():
            flat = mask.nonzero()
            for k, bad in enumerate((float("nan"), float("inf"), float("-inf"))):
                r, c = flat[(7 * k) % len(flat)]
                x[r, c] = bad
        got = nonfinite_rows(x, mask, masked_row_sums(x, mask))
        assert torch.equal(got, (mask & ~torch.isfinite(x)).any(1))
        if mask.any():  # a do-nothing check (no row flagged) fails here
            assert bool(got.any())


def test_nonfinite_rows_without_sums_equal_the_token_check():
    for i, mask in enumerate(_masks(4)):
        g = torch.Generator().manual_seed(i)
        clean = torch.randn(mask.shape, generator=g)  # every value finite: no mask read
        assert not nonfinite_rows(clean, mask).any()
        x = _values(mask, i)  # NaN on the invalid tokens: the masked sums decide
        if mask.any():
            r, c = mask.nonzero()[0]
            x[r, c] = float("inf")
        got = nonfinite_rows(x, mask)
        assert torch.equal(got, (mask & ~torch.isfinite(x)).any(1))
        assert bool(got.any()) == bool(mask.any())
    # hand-worked: row 0 NaN on a padding token only (clean), row 1 -inf on a valid one
    x = torch.tensor([[0.5, float("nan")], [float("-inf"), 1.0]])
    mask = torch.tensor([[True, False], [True, True]])
    assert nonfinite_rows(x, mask).tolist() == [False, True]


def test_an_overflowing_sum_is_not_a_non_finite_value():
    mask = torch.ones(2, 256, dtype=torch.bool)
    x = torch.full((2, 256), 3e38)  # finite values whose float32 sum overflows
    sums = masked_row_sums(x, mask)
    assert torch.isinf(sums).all() and not nonfinite_rows(x, mask, sums).any()


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        masked_row_sums(torch.ones(2, 9), torch.ones(2, 8, dtype=torch.bool))


@pytest.mark.parametrize("absolute", [False, True])
def test_row_means_match_a_float64_oracle_and_centered_sums(absolute, chunks):
    for seed in range(2):
        for mask in _masks(seed):
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(mask.shape, generator=g) * 3
            v = x.double().abs() if absolute else x.double()
            n = mask.sum(1)
            ref = torch.where(mask, v, 0.0).sum(1) / n.clamp(min=1)
            got = masked_row_means(x, mask, n, absolute=absolute)
            assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5)
            c = torch.randn(mask.shape[0], generator=g)
            want = torch.where(mask, v - c.double()[:, None], 0.0).sum(1)
            got = masked_row_sums(x, mask, absolute=absolute, center=c)
            assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-3)


def test_row_means_of_equal_tokens_are_exact_holes_included():
    # a float32 sum of n copies of 0.1 divided by n is not 0.1f for every n; deviations from
    # the first valid token are exactly 0, so the mean is exactly 0.1f
    T = 300
    lengths = torch.tensor([1, 3, 7, 10, 100, 299, 300, 0])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mask[2, 0] = False  # a hole at column 0
    x = torch.where(mask, torch.tensor(-0.1), torch.tensor(float("nan")))
    means = masked_row_means(x, mask, mask.sum(1), absolute=True)
    assert means[:-1].tolist() == [float(torch.tensor(0.1))] * 7 and float(means[-1]) == 0.0


def test_row_means_do_not_overflow_near_the_float32_maximum():
    mask = torch.ones(3, 4, dtype=torch.bool)
    x = torch.tensor([[3e38, 3e38, 3e38, 3e38], [3e38, -3e38, 3e38, -3e38], [1.0, 2.0, 3.0, 4.0]])
    n = mask.sum(1)
    assert masked_row_means(x, mask, n, absolute=True).tolist() == pytest.approx(
        [float(torch.tensor(3e38)), float(torch.tensor(3e38)), 2.5], rel=1e-12
    )
    assert masked_row_means(x, mask, n).tolist() == pytest.approx(
        [float(torch.tensor(3e38)), 0.0, 2.5], rel=1e-12
    )


def test_first_valid_values_match_a_plain_loop():
    for seed, mask in enumerate(_masks(5)):
        x = _values(mask, seed)
        got = first_valid_values(x, mask, mask.sum(1))
        want = torch.zeros(mask.shape[0])
        for i in range(mask.shape[0]):  # the oracle: the first True column of each row
            cols = mask[i].nonzero()
            if cols.numel():
                want[i] = x[i, cols[0, 0]]
        assert torch.equal(got, want)


def test_row_chunks_cover_every_row_once():
    assert list(rowops.row_chunks(0, 5)) == []
    spans = list(rowops.row_chunks(1000, 1000))  # 262 rows of 1000 per chunk
    assert spans[0] == (0, 262) and spans[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
