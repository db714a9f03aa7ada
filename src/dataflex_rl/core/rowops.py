"""Per-row reductions of [B, T] token tensors under a mask, a chunk of rows at a time.

Strategies read per-token fields (advantages, old log-probs, token weights) only to reduce them
per response: a masked sum, a masked mean, "has a non-finite value on a valid token". The
obvious ``torch.where(mask, x, 0).sum(1)`` over the whole tensor allocates a [B, T] temporary,
and at 8k x 4k tokens a fresh [B, T] buffer costs more than the reduction itself (its pages are
faulted in anew each time; ``mask.sum(1)`` is ~15x slower than the same sum chunk by chunk).
The functions here run the same ops on chunks of `CHUNK_ELEMS` elements, whose temporaries
stay in cache. Values on invalid tokens never enter a result, NaN included. Results carry no
gradient (decisions never do).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

#: elements per chunk of rows: 1 MiB of float32
CHUNK_ELEMS = 1 << 18


def row_chunks(B: int, T: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive chunks of rows of about `CHUNK_ELEMS` elements."""
    rows = max(1, CHUNK_ELEMS // max(T, 1))
    for i in range(0, B, rows):
        yield i, min(i + rows, B)


def _check_shapes(values: Tensor, mask: Tensor) -> None:
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} do not match the mask {tuple(mask.shape)}")


def row_counts(mask: Tensor) -> Tensor:
    """[B] int64 number of True entries in each row of ``mask`` [B, T] bool."""
    B, T = mask.shape
    out = torch.zeros(B, dtype=torch.int64, device=mask.device)
    for i, j in row_chunks(B, T):
        torch.sum(mask[i:j], 1, out=out[i:j])
    return out


def masked_row_sums(
    values: Tensor, mask: Tensor, *, absolute: bool = False, center: Tensor | None = None
) -> Tensor:
    """[B] sum over each row's valid tokens of ``values`` (``|values|`` if ``absolute``),
    minus ``center`` [B] from each term when given; in ``values.dtype``, 0 for rows without
    valid tokens.

    Args:
        values: [B, T] float.
        mask: [B, T] bool, the valid tokens.
        absolute: sum absolute values.
        center: optional [B] value subtracted from each (absolute) token value of its row.
    """
    _check_shapes(values, mask)
    values = values.detach()
    B, T = values.shape
    out = torch.zeros(B, dtype=values.dtype, device=values.device)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    c = None if center is None else center.to(values.dtype)[:, None]
    for i, j in row_chunks(B, T):
        x = values[i:j]
        x = x.abs() if absolute else x
        x = x - c[i:j] if c is not None else x
        torch.sum(torch.where(mask[i:j], x, zero), 1, out=out[i:j])
    return out


def masked_row_means(
    values: Tensor, mask: Tensor, lengths: Tensor, *, absolute: bool = False
) -> Tensor:
    """[B] float64 mean over each row's valid tokens of ``values`` (``|values|``); 0 for rows
    without valid tokens.

    Summed as deviations from the row's first valid token c: mean = c + sum(x - c) / n. A row
    whose valid tokens are all equal therefore gets exactly that value (a float32 sum of n
    equal values does not divide back to it, so ties would be broken by rounding). Rows whose
    float32 sum overflows (|x| near 3.4e38) are summed again in float64: finite tokens give a
    finite mean.

    Args:
        values: [B, T] float.
        mask: [B, T] bool, the valid tokens.
        lengths: [B] int64 valid tokens per row (``mask.sum(1)``).
        absolute: average absolute values.
    """
    values = values.detach()
    c = first_valid_values(values, mask, lengths)
    c = c.abs() if absolute else c
    s = masked_row_sums(values, mask, absolute=absolute, center=c)
    bad = (~torch.isfinite(s) & torch.isfinite(c)).nonzero().squeeze(1)
    s = s.to(torch.float64)
    if bad.numel():  # overflow: those rows again in float64
        v = values[bad].to(torch.float64)
        v = v.abs() if absolute else v
        v = v - c[bad].to(torch.float64)[:, None]
        s[bad] = torch.where(mask[bad], v, 0.0).sum(1)
    return c.to(torch.float64) + s / lengths.clamp(min=1).to(torch.float64)


def nonfinite_rows(values: Tensor, mask: Tensor, row_sums: Tensor | None = None) -> Tensor:
    """[B] bool: rows with a NaN or infinite value on a valid token.

    A sum with a non-finite term is not finite, so only rows whose sum is not finite (a bad
    value, or a rare overflow) are checked token by token. ``row_sums``: each row's masked
    sum (`masked_row_sums`) when the caller has it. Without it, each row's sum over all its
    tokens is taken first (no mask read, ~4x cheaper than a masked sum): when every one is
    finite, so is every value and no row is returned; otherwise the masked sums are taken.
    """
    if row_sums is None:
        plain = values.detach().sum(1)
        if bool(torch.isfinite(plain).all()):
            return torch.zeros(plain.shape, dtype=torch.bool, device=plain.device)
        row_sums = masked_row_sums(values, mask)
    suspect = ~torch.isfinite(row_sums)
    if not bool(suspect.any()):
        return suspect
    rows = suspect.nonzero().squeeze(1)
    out = torch.zeros_like(suspect)
    out[rows] = (mask[rows] & ~torch.isfinite(values[rows])).any(1)
    return out


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
