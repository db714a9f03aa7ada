"""Per-row reductions of [B, T] token tensors under a mask, without [B, T] temporaries.

Strategies read per-token fields (advantages, old log-probs) only to reduce them per response:
mean advantage, mean |advantage|, "has a non-finite value on a valid token". The obvious
``torch.where(mask, x, 0).sum(1)`` allocates [B, T] temporaries, and at 8k x 4k tokens a fresh
[B, T] buffer costs more than the reduction itself (its pages are faulted in anew each time);
``mask.sum(1)`` on a bool tensor is ~10x slower than a float sum.

`TokenBlocks` summarizes the mask once per block of ``K`` tokens: a block is *full* (every
token valid), *empty*, or *mixed*. A masked row sum is then one plain block-sum pass over the
values (full blocks taken as they are, empty ones ignored) plus an exact ``where`` over the
mixed blocks, gathered (one per right-padded row; any mask works, holes included). Values on
invalid tokens never enter a result, NaN included. Sums agree with
``torch.where(mask, x, 0).sum(1)`` up to float rounding (the summation order differs).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch
from torch import Tensor

#: largest block: a block's count must fit in one byte (see `_block_counts`)
MAX_BLOCK = 248
#: elements per chunk when a pass needs an elementwise temporary (|x|): 1 MiB of float32
CHUNK_ELEMS = 1 << 18
_CHUNK_ELEMS = CHUNK_ELEMS


def block_size(T: int) -> int:
    """Tokens per block for rows of T tokens: the largest multiple of 8 that divides T and is at
    most `MAX_BLOCK`, so blocks tile the row exactly (128 when T is not a multiple of 8: the
    last T % 128 columns are then handled exactly as a tail)."""
    if T % 8:
        return 128
    words = T // 8
    return 8 * max(d for d in range(1, MAX_BLOCK // 8 + 1) if words % d == 0)


def _block_counts(mask: Tensor, nb: int, K: int) -> Tensor:
    """[B, nb] int64 number of True in each block of K columns (the first nb * K columns).

    Fast path: a bool is one byte holding 0 or 1, so viewing 4 bools as one int32 and summing
    the block's K / 4 words adds the bools byte lane by byte lane (each lane <= K / 4 < 128,
    no carry, no sign); folding the 4 lanes into the low byte then gives the count
    (<= K <= 248, no carry). ~2x faster than summing the bools, ~10x than ``mask.sum``.
    """
    B, T = mask.shape
    if nb == 0:
        return torch.zeros(B, 0, dtype=torch.int64, device=mask.device)
    if mask.is_contiguous() and T % 4 == 0 and mask.storage_offset() % 4 == 0:
        words = mask.view(torch.int32)[:, : nb * K // 4]
        s = words.reshape(B, nb, K // 4).sum(2, dtype=torch.int32)
        s = s + (s >> 16)
        s.add_(s >> 8)
        return s.bitwise_and_(0xFF)
    return mask[:, : nb * K].reshape(B, nb, K).sum(2)


def _block_sums(v3: Tensor) -> Tensor:
    """[B, nb] sums of the last dim of ``v3`` [B, nb, K]: a matrix-vector product with ones when
    the blocks are contiguous rows (as fast as a flat sum; a reduction over a short last dim is
    ~20% slower)."""
    B, nb, K = v3.shape
    if v3.dtype in (torch.float32, torch.float64) and v3.is_contiguous() and B * nb:
        ones = torch.ones(K, dtype=v3.dtype, device=v3.device)
        return torch.mv(v3.view(B * nb, K), ones).view(B, nb)
    return v3.sum(2)


def exact_prob_rows(log_probs: Tensor, mask: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """([k] sum over the valid tokens (``mask``) of each of ``rows`` of p = exp(min(x, 0)),
    [k] bool: a non-finite value on one of those tokens), token by token: the exact path for
    the rare rows a faster pass flags (a NaN stays NaN in the sum)."""
    x, m = log_probs[rows], mask[rows]
    p = torch.clamp(x, max=0.0).exp_()
    return torch.where(m, p, 0.0).sum(1), (m & ~torch.isfinite(x)).any(1)


def nonfinite_rows_from_sums(values: Tensor, mask: Tensor, row_sums: Tensor) -> Tensor:
    """[B] bool: rows with a NaN or infinite value on a valid token, given each row's masked
    sum: a sum with a non-finite term is non-finite, so only rows whose sum is not finite (a
    bad value, or a rare overflow) are checked token by token."""
    suspect = ~torch.isfinite(row_sums)
    if not bool(suspect.any()):
        return suspect
    rows = suspect.nonzero().squeeze(1)
    out = torch.zeros_like(suspect)
    out[rows] = (mask[rows] & ~torch.isfinite(values[rows])).any(1)
    return out


class TokenBlocks:
    """Block summary of a [B, T] bool token mask, for fast masked per-row reductions.

    Args:
        mask: [B, T] bool.
        block: tokens per block, a multiple of 8 up to `MAX_BLOCK` (default `block_size`).

    Attributes:
        row_counts: [B] int64 number of valid tokens per row.
    """

    def __init__(self, mask: Tensor, block: int | None = None) -> None:
        if mask.dtype != torch.bool or mask.dim() != 2:
            raise ValueError("TokenBlocks needs a [B, T] bool mask")
        B, T = mask.shape
        K = block_size(T) if block is None else block
        if K % 8 or not 8 <= K <= MAX_BLOCK:
            raise ValueError(f"block must be a multiple of 8 in [8, {MAX_BLOCK}], got {K}")
        self.mask, self.K, self.nb = mask, K, T // K
        counts = _block_counts(mask, self.nb, K)  # [B, nb]
        self.counts = counts
        self.not_full = counts != K
        self.empty = counts == 0
        mixed = ((counts > 0) & self.not_full).view(-1).nonzero().squeeze(1)
        self.mixed_rows = torch.div(mixed, max(self.nb, 1), rounding_mode="floor")
        self.mixed_cols = mixed - self.mixed_rows * self.nb
        self.mixed_invalid = ~self._gather(mask)  # [M, K] bool
        self.tail = self.nb * K < T  # columns after the blocks
        row_counts = counts.sum(1)
        if self.tail:
            row_counts = row_counts + mask[:, self.nb * K :].sum(1)
        self.row_counts = row_counts
        self._empty_at: tuple[Tensor, Tensor] | None = None

    @cached_property
    def prefix_lengths(self) -> Tensor | None:
        """[B] int64 `row_counts` when every row is right-padded (row r valid exactly on its
        first ``row_counts[r]`` tokens), else None (a hole in some row).

        From the block summary: each block's count must be its share of the row's length,
        each mixed block's valid tokens must come first, and so must the tail's: no [B, T]
        pass over the mask.
        """
        n, K, nb = self.row_counts, self.K, self.nb
        dev = self.mask.device
        if nb:
            starts = torch.arange(nb, device=dev) * K
            expect = (n[:, None] - starts).clamp_(0, K)
            if not torch.equal(self.counts.to(torch.int64), expect):
                return None
            if self.mixed_rows.numel():
                c = expect[self.mixed_rows, self.mixed_cols]
                prefix = torch.arange(K, device=dev)[None, :] >= c[:, None]
                if not torch.equal(self.mixed_invalid, prefix):
                    return None
        if self.tail:
            cols = torch.arange(nb * K, self.mask.shape[1], device=dev)
            if not torch.equal(self.mask[:, nb * K :], cols[None, :] < n[:, None]):
                return None
        return n.to(torch.int64)

    def _blocks(self, x: Tensor) -> Tensor:
        """[B, nb, K] view (or copy, for odd strides) of the first nb * K columns."""
        return x[:, : self.nb * self.K].reshape(x.shape[0], self.nb, self.K)

    def _gather(self, x: Tensor) -> Tensor:
        """[M, K] the mixed blocks of ``x``."""
        if self.nb * self.K == x.shape[1] and x.is_contiguous():
            flat = self.mixed_rows * self.nb + self.mixed_cols
            return x.view(-1, self.K).index_select(0, flat)
        return self._blocks(x)[self.mixed_rows, self.mixed_cols]

    def row_sums(
        self, values: Tensor, absolute: bool = False, center: Tensor | None = None
    ) -> Tensor:
        """[B] sum over each row's valid tokens of ``values`` (of ``|values|`` if ``absolute``).

        Args:
            values: [B, T] float, same shape as the mask.
            absolute: sum absolute values.
            center: optional [B] value subtracted from each (absolute) token value of its row
                before summing (see `row_means`).

        Returns:
            [B] in ``values.dtype``; 0 for rows without valid tokens.
        """
        if values.shape != self.mask.shape:
            raise ValueError(
                f"values {tuple(values.shape)} do not match the mask {tuple(self.mask.shape)}"
            )
        c = None if center is None else center.to(values.dtype)[:, None]
        if self.nb:
            v3 = self._blocks(values)
            if absolute or c is not None:
                bs = self._shifted_block_sums(v3, absolute, None if c is None else c[:, :, None])
            else:
                bs = _block_sums(v3)
            out = bs.masked_fill_(self.not_full, 0.0).sum(1)
            if self.mixed_rows.numel():
                part = self._gather(values)  # a copy: ours
                part = part.abs_() if absolute else part
                if c is not None:
                    part.sub_(c[self.mixed_rows])
                part.masked_fill_(self.mixed_invalid, 0.0)
                out.index_add_(0, self.mixed_rows, part.sum(1))
        else:
            out = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
        if self.tail:
            v = values[:, self.nb * self.K :]
            v = v.abs() if absolute else v
            v = v - c if c is not None else v
            out = out + torch.where(self.mask[:, self.nb * self.K :], v, 0.0).sum(1)
        return out

    def row_means(self, values: Tensor, absolute: bool = False) -> Tensor:
        """[B] float64 mean over each row's valid tokens of ``values`` (``|values|``); 0 for
        rows without valid tokens.

        Summed as deviations from the row's first valid token c: mean = c + sum(x - c) / n.
        A row whose valid tokens are all equal therefore gets exactly that value (a float32
        sum of n equal values does not divide back to it, so ties would be broken by
        rounding), at the cost of the plain float32 pass. Rows whose float32 sum overflows
        (|x| near 3.4e38) are summed again in float64: finite tokens give a finite mean.
        """
        B, T = values.shape
        n = self.row_counts
        col = torch.zeros_like(n)
        if T:
            lacking = (~self.mask[:, 0] & (n > 0)).nonzero().squeeze(1)
            if lacking.numel():  # rows with a hole at column 0 (rare)
                col[lacking] = self.mask[lacking].to(torch.uint8).argmax(1)
            c = values[torch.arange(B, device=values.device), col]
        else:
            c = torch.zeros(B, dtype=values.dtype, device=values.device)
        c = c.abs() if absolute else c
        c = torch.where(n > 0, c, torch.zeros_like(c))
        s = self.row_sums(values, absolute, center=c)
        bad = (~torch.isfinite(s) & torch.isfinite(c)).nonzero().squeeze(1)
        s = s.to(torch.float64)
        if bad.numel():  # overflow: those rows again in float64
            v = values[bad].to(torch.float64)
            v = v.abs() if absolute else v
            v = v - c[bad].to(torch.float64)[:, None]
            s[bad] = v.masked_fill_(~self.mask[bad], 0.0).sum(1)
        return c.to(torch.float64) + s / n.clamp(min=1).to(torch.float64)

    def fill_invalid_(self, x: Tensor, value: float = 0.0) -> Tensor:
        """Set ``x`` [B, T] to ``value`` on invalid tokens, in place (block by block: no [B, T]
        mask temporary). Returns ``x``."""
        if x.shape != self.mask.shape:
            raise ValueError(f"x {tuple(x.shape)} does not match the mask {tuple(self.mask.shape)}")
        if not x.is_contiguous():
            return x.masked_fill_(~self.mask, value)
        if self.nb:
            if self._empty_at is None:  # (rows, cols) of the empty blocks, once
                e = self.empty.view(-1).nonzero().squeeze(1)
                r = torch.div(e, self.nb, rounding_mode="floor")
                self._empty_at = (r, e - r * self.nb)
            self._blocks(x)[self._empty_at] = value  # writes only the empty blocks
            if self.mixed_rows.numel():
                part = self._gather(x).masked_fill_(self.mixed_invalid, value)
                if self.nb * self.K == x.shape[1]:
                    flat = self.mixed_rows * self.nb + self.mixed_cols
                    x.view(-1, self.K).index_copy_(0, flat, part)
                else:
                    self._blocks(x)[self.mixed_rows, self.mixed_cols] = part
        if self.tail:
            x[:, self.nb * self.K :].masked_fill_(~self.mask[:, self.nb * self.K :], value)
        return x

    def mapped_row_sums(
        self, values: Tensor, fn: Callable[[Tensor, Tensor], Tensor]
    ) -> tuple[Tensor, Tensor]:
        """([B] sum over each row's valid tokens of ``fn(values)``, [B] plain sum of
        ``values`` over *all* tokens), in one pass that reads ``values`` once.

        A chunk of rows at a time, ``fn(chunk, out)`` writes the elementwise function of the
        chunk into a cache-resident buffer ``out``, which is summed block by block like
        `row_sums` (invalid tokens never enter, whatever ``fn`` makes of them). The plain sums
        come from the same read: a finite plain sum proves its row has no non-finite value.
        """
        if values.shape != self.mask.shape:
            raise ValueError(
                f"values {tuple(values.shape)} do not match the mask {tuple(self.mask.shape)}"
            )
        B, T = values.shape
        out = torch.zeros(B, dtype=values.dtype, device=values.device)
        plain = torch.zeros(B, dtype=values.dtype, device=values.device)
        for i, j, c, b in self._chunks(values):
            torch.sum(values[i:j], 1, out=plain[i:j])
            self._chunk_sums(fn(values[i:j], b), i, j, c, out[i:j])
        return out, plain

    def prob_row_sums(self, log_probs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """([B] sum over each row's valid tokens of p = exp(min(x, 0)), [B] bool: rows with a
        non-finite value on a valid token, [k] int64 ascending: the rows where exp(x) is not
        p everywhere ("odd" rows, see below)), in one read of ``log_probs`` [B, T].

        A chunk of rows at a time: e = exp(x) into a cache-resident buffer, then each row's
        largest and smallest e (over all its tokens). A row with 0 < e <= 1 everywhere has
        only finite x <= 0, where e is p (and exp of a tiny x > 0 rounds to 1 = p); the other
        rows (a NaN, an infinity, an x > 0, or an x so small that e underflows to 0: rare)
        get p = exp(min(x, 0)) written exactly and are checked token by token. The sums are
        the block sums of `mapped_row_sums` with ``fn = exp(min(x, 0))``, bit for bit.
        """
        if log_probs.shape != self.mask.shape:
            raise ValueError(
                f"values {tuple(log_probs.shape)} do not match the mask {tuple(self.mask.shape)}"
            )
        B = log_probs.shape[0]
        out = torch.zeros(B, dtype=log_probs.dtype, device=log_probs.device)
        odd_rows = []
        for i, j, c, b in self._chunks(log_probs):
            xc = log_probs[i:j]
            torch.exp(xc, out=b)
            odd = ~(b.amax(1) <= 1.0) | (b.amin(1) == 0.0)  # (NaN fails <=)
            if bool(odd.any()):
                r = odd.nonzero().squeeze(1)
                b[r] = torch.clamp(xc[r], max=0.0).exp_()
                odd_rows.append(r + i)
            self._chunk_sums(b, i, j, c, out[i:j])
        bad = torch.zeros(B, dtype=torch.bool, device=log_probs.device)
        odd = torch.zeros(0, dtype=torch.int64, device=log_probs.device)
        if odd_rows:
            odd = torch.cat(odd_rows)
            bad[odd] = (self.mask[odd] & ~torch.isfinite(log_probs[odd])).any(1)
        return out, bad, odd

    def _chunks(self, values: Tensor):
        """(start, end, (first, last) of its mixed blocks, [end - start, T] buffer) for each
        chunk of rows, with a buffer of `CHUNK_ELEMS` elements (it stays in cache) reused by
        every chunk."""
        B, T = values.shape
        rows = max(1, CHUNK_ELEMS // max(T, 1))
        buf = torch.empty(min(rows, B), T, dtype=values.dtype, device=values.device)
        starts = torch.arange(0, B + rows, rows, device=values.device).clamp_(max=B)
        cut = torch.searchsorted(self.mixed_rows, starts).tolist()  # mixed rows are sorted
        for c, i in enumerate(range(0, B, rows)):
            j = min(i + rows, B)
            yield i, j, (cut[c], cut[c + 1]), buf[: j - i]

    def _chunk_sums(self, b: Tensor, i: int, j: int, cut: tuple[int, int], s: Tensor) -> None:
        """``s`` [j - i] = sums over the valid tokens of rows i..j of ``b`` (their values);
        ``cut``: the range of their mixed blocks."""
        K, nb = self.K, self.nb
        if nb:
            v3 = b[:, : nb * K].reshape(j - i, nb, K)
            s.copy_(_block_sums(v3).masked_fill_(self.not_full[i:j], 0.0).sum(1))
            lo, hi = cut
            if hi > lo:
                r = self.mixed_rows[lo:hi] - i
                part = v3[r, self.mixed_cols[lo:hi]].masked_fill_(self.mixed_invalid[lo:hi], 0.0)
                s.index_add_(0, r, part.sum(1))
        if self.tail:
            s.add_(torch.where(self.mask[i:j, nb * K :], b[:, nb * K :], 0.0).sum(1))

    def _shifted_block_sums(self, v3: Tensor, absolute: bool, c3: Tensor | None) -> Tensor:
        """[B, nb] block sums of |v3| (or v3) minus ``c3`` [B, 1, 1], a chunk of rows at a
        time (the elementwise buffer stays cached)."""
        B, nb, K = v3.shape
        rows = max(1, _CHUNK_ELEMS // max(nb * K, 1))
        if rows >= B:
            t = v3.abs() if absolute else v3.clone()
            return _block_sums(t.sub_(c3) if c3 is not None else t)
        out = torch.empty(B, nb, dtype=v3.dtype, device=v3.device)
        buf = torch.empty(rows, nb, K, dtype=v3.dtype, device=v3.device)
        for i in range(0, B, rows):
            j = min(i + rows, B)
            b = buf[: j - i]
            if absolute:
                torch.abs(v3[i:j], out=b)
            else:
                b.copy_(v3[i:j])
            if c3 is not None:
                b.sub_(c3[i:j])
            out[i:j] = _block_sums(b)
        return out

    def nonfinite_rows(self, values: Tensor, row_sums: Tensor | None = None) -> Tensor:
        """[B] bool: rows with a NaN or infinite value on a valid token.

        A sum with a non-finite term is non-finite, so only rows whose masked sum is not finite
        (a bad value, or a rare overflow) are checked token by token.

        Args:
            values: [B, T] float.
            row_sums: ``row_sums(values)`` when already computed.
        """
        s = self.row_sums(values) if row_sums is None else row_sums
        return nonfinite_rows_from_sums(values, self.mask, s)


def first_valid_values(values: Tensor, mask: Tensor, lengths: Tensor) -> Tensor:
    """[B] each row's value on its first valid token (0 for rows without one).

    Reads column 0 of ``values`` and ``mask``, and only the rows whose first valid token is
    further right (holes at column 0, rare) in full. For advantages that are constant over a
    row (outcome estimators) this is the per-response value itself, exactly, where a mean
    over the row would add float rounding.

    Args:
        values: [B, T] float.
        mask: [B, T] bool valid tokens.
        lengths: [B] int64 valid tokens per row (``mask.sum(1)``).
    """
    B, T = values.shape
    if T == 0:
        return torch.zeros(B, dtype=values.dtype, device=values.device)
    first = torch.where(mask[:, 0], values[:, 0], 0.0)
    lacking = (~mask[:, 0] & (lengths > 0)).nonzero().squeeze(1)
    if lacking.numel():
        col = mask[lacking].to(torch.uint8).argmax(1)
        first[lacking] = values[lacking, col]
    return first
