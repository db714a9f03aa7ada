"""`TokenBlocks`: block-wise masked row reductions == the plain masked ops they replace."""

import math

import pytest
import torch

from dataflex_rl.core.rowops import TokenBlocks, block_size, first_valid_values


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


@pytest.mark.parametrize("block", [None, 8, 128, 248])
def test_counts_and_row_sums_match_the_plain_masked_ops(block):
    for i, mask in enumerate(_masks(0)):
        tb = TokenBlocks(mask, block)
        assert torch.equal(tb.row_counts, mask.sum(1))
        x = _values(mask, i)
        plain = torch.where(mask, x, 0.0)
        torch.testing.assert_close(tb.row_sums(x), plain.sum(1), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(
            tb.row_sums(x, absolute=True), plain.abs().sum(1), rtol=1e-5, atol=1e-4
        )


def test_absolute_sums_in_chunks_match():
    g = torch.Generator().manual_seed(1)
    mask = torch.arange(512)[None, :] < torch.randint(0, 513, (3000,), generator=g)[:, None]
    x = _values(mask, 2)
    torch.testing.assert_close(
        TokenBlocks(mask).row_sums(x, absolute=True),
        torch.where(mask, x.abs(), 0.0).sum(1),
        rtol=1e-5,
        atol=1e-4,
    )


def test_nonfinite_rows_look_only_at_valid_tokens():
    for i, mask in enumerate(_masks(3)):
        tb = TokenBlocks(mask)
        x = _values(mask, i)  # NaN on every invalid token: ignored
        if mask.any():
            flat = mask.nonzero()
            for k, bad in enumerate((float("nan"), float("inf"), float("-inf"))):
                r, c = flat[(7 * k) % len(flat)]
                x[r, c] = bad
        assert torch.equal(tb.nonfinite_rows(x), (mask & ~torch.isfinite(x)).any(1))


def test_an_overflowing_sum_is_not_a_non_finite_value():
    mask = torch.ones(2, 256, dtype=torch.bool)
    x = torch.full((2, 256), 3e38)  # finite values whose float32 sum overflows
    assert not TokenBlocks(mask).nonfinite_rows(x).any()


def test_fill_invalid_sets_exactly_the_invalid_tokens():
    for i, mask in enumerate(_masks(4)):
        x = _values(mask, i)
        y = TokenBlocks(mask).fill_invalid_(x.clone(), 0.0)
        assert torch.equal(y, torch.where(mask, x, 0.0))
        z = x.t().contiguous().t()  # non-contiguous: the plain path
        TokenBlocks(mask).fill_invalid_(z, -1.0)
        assert torch.equal(z, torch.where(mask, x, -1.0))


def test_block_size_tiles_the_row():
    assert block_size(4096) == 128 and block_size(1000) == 200 and block_size(8) == 8
    assert block_size(1030) == 128  # not a multiple of 8: a tail
    for T in range(8, 2000, 8):
        K = block_size(T)
        assert T % K == 0 and K % 8 == 0 and K <= 248


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="bool"):
        TokenBlocks(torch.ones(2, 8))
    with pytest.raises(ValueError, match="multiple of 8"):
        TokenBlocks(torch.ones(2, 8, dtype=torch.bool), block=12)
    with pytest.raises(ValueError, match="do not match"):
        TokenBlocks(torch.ones(2, 8, dtype=torch.bool)).row_sums(torch.ones(2, 9))


@pytest.mark.parametrize("absolute", [False, True])
def test_row_means_match_a_float64_oracle_and_centered_sums(absolute):
    for seed in range(2):
        for mask in _masks(seed):
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(mask.shape, generator=g) * 3
            tb = TokenBlocks(mask)
            v = x.double().abs() if absolute else x.double()
            n = mask.sum(1)
            ref = torch.where(mask, v, 0.0).sum(1) / n.clamp(min=1)
            assert torch.allclose(tb.row_means(x, absolute), ref, rtol=1e-5, atol=1e-5)
            c = torch.randn(mask.shape[0], generator=g)
            want = torch.where(mask, v - c.double()[:, None], 0.0).sum(1)
            got = tb.row_sums(x, absolute, center=c)
            assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-3)


def test_row_means_of_equal_tokens_are_exact_holes_included():
    # a float32 sum of n copies of 0.1 divided by n is not 0.1f for every n; deviations from
    # the first valid token are exactly 0, so the mean is exactly 0.1f
    T = 300
    lengths = torch.tensor([1, 3, 7, 10, 100, 299, 300, 0])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mask[2, 0] = False  # a hole at column 0
    x = torch.where(mask, torch.tensor(-0.1), torch.tensor(float("nan")))
    means = TokenBlocks(mask).row_means(x, absolute=True)
    assert means[:-1].tolist() == [float(torch.tensor(0.1))] * 7 and float(means[-1]) == 0.0


def test_row_means_do_not_overflow_near_the_float32_maximum():
    mask = torch.ones(3, 4, dtype=torch.bool)
    x = torch.tensor([[3e38, 3e38, 3e38, 3e38], [3e38, -3e38, 3e38, -3e38], [1.0, 2.0, 3.0, 4.0]])
    tb = TokenBlocks(mask)
    assert tb.row_means(x, absolute=True).tolist() == pytest.approx(
        [float(torch.tensor(3e38)), float(torch.tensor(3e38)), 2.5], rel=1e-12
    )
    assert tb.row_means(x).tolist() == pytest.approx(
        [float(torch.tensor(3e38)), 0.0, 2.5], rel=1e-12
    )


@pytest.mark.parametrize("T", [16, 20, 3, 256])
def test_mapped_row_sums_match_a_masked_loop(T):
    # holes, empty rows, full rows, NaN garbage on invalid tokens; T = 20 and 3 have a tail
    g = torch.Generator().manual_seed(T)
    B = 9
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[0] = True
    mask[1] = False
    x = -torch.rand(B, T, generator=g) * 3
    x[~mask] = float("nan")
    blocks = TokenBlocks(mask, block=8)
    out, plain = blocks.mapped_row_sums(x, lambda xc, buf: torch.exp(xc, out=buf))
    expected = [sum(math.exp(float(v)) for v, ok in zip(x[i], mask[i]) if ok) for i in range(B)]
    torch.testing.assert_close(
        out.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6
    )
    assert torch.equal(torch.isfinite(plain), mask.all(1))


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


@pytest.mark.parametrize("T", [16, 20, 3, 256, 1030])
@pytest.mark.parametrize("chunk", [None, 2])
def test_prob_row_sums_match_a_loop_and_the_clamped_pass(T, chunk, monkeypatch):
    # valid tokens: log-probs <= 0, plus rows with a NaN, +-inf, a positive value or an
    # underflowing one (exp = 0) on a valid token, and garbage on invalid ones
    import dataflex_rl.core.rowops as rowops

    if chunk is not None:  # several chunks of rows, odd rows in some of them
        monkeypatch.setattr(rowops, "CHUNK_ELEMS", chunk * T)
    g = torch.Generator().manual_seed(T)
    B = 12
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[0], mask[1] = True, False
    x = -torch.rand(B, T, generator=g) * 5
    specials = [float("nan"), float("inf"), -float("inf"), 0.7, -200.0, 1e-9]
    for r, v in enumerate(specials, start=2):  # rows 2..7 hold one special valid token
        col = int(mask[r].nonzero()[0]) if mask[r].any() else 0
        mask[r, col] = True
        x[r, col] = v
    x[8][~mask[8]] = float("nan")  # garbage on invalid tokens only
    x[9][~mask[9]] = 5.0
    blocks = TokenBlocks(mask, block=8)
    sums, bad, odd = blocks.prob_row_sums(x)
    # rows 2..7 hold a value where exp(x) != exp(min(x, 0)) may happen; row 8: NaN garbage
    assert set(odd.tolist()) >= {2, 3, 4, 5, 6} and odd.tolist() == sorted(odd.tolist())
    # the clamped pass it replaces, bit for bit
    ref, _ = blocks.mapped_row_sums(x, lambda xc, buf: torch.clamp(xc, max=0.0, out=buf).exp_())
    assert torch.equal(sums.isnan(), ref.isnan())
    assert torch.equal(sums[~ref.isnan()], ref[~ref.isnan()])
    # plain loops: sum of exp(min(x, 0)) and "a non-finite value on a valid token"
    for i in range(B):
        vals = [float(v) for v, ok in zip(x[i], mask[i]) if ok]
        want = sum(math.exp(min(v, 0.0)) for v in vals)
        if math.isnan(want):
            assert math.isnan(float(sums[i]))
        else:
            assert float(sums[i]) == pytest.approx(want, rel=1e-5, abs=1e-6)
        assert bool(bad[i]) == any(not math.isfinite(v) for v in vals)
