"""Per-row reductions of [B, T] token tensors under a mask, a chunk of rows at a time.

Chunks of `CHUNK_ELEMS` elements keep their temporaries in cache: at 8k x 4k tokens a fresh
[B, T] buffer costs more than the reduction itself. Values on invalid tokens never enter a
result, NaN included; results carry no gradient.
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
    """[B] sum over each row's valid tokens (``mask`` [B, T]) of ``values`` [B, T]
    (``|values|`` if ``absolute``), minus ``center`` [B] from each term when given; in
    ``values.dtype``, 0 for rows without valid tokens."""
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

    mean = c + sum(x - c) / n, c the row's first valid token, so a row of equal values gets
    exactly that value; rows whose float32 sum overflows are summed again in float64.
    ``lengths``: [B] int64 ``mask.sum(1)``.
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

    Only rows whose (masked, ``row_sums`` when given; else first the unmasked) sum is not
    finite are checked token by token.
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

    Reads column 0, and in full only the rare rows whose first valid token is further right;
    for advantages constant over a row this is the per-response value exactly.
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
