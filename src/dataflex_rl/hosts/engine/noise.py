"""Keyed sampling noise: common random numbers for paired runs.

The uniform that picks token ``t`` of sample ``j`` of prompt ``k`` at step ``s`` is
``U(hash(base, s, k, j, t))`` (splitmix64), ``base`` from the run's seed and noise stream: runs
of one seed share it whatever else they did, and tokens drawn by inverse CDF mostly agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

_M64 = (1 << 64) - 1


def derive_seed(seed: int, stream: str) -> int:
    """An independent 31-bit seed for one named randomness stream of a run."""
    digest = hashlib.sha256(f"{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & ((1 << 31) - 1)


def _signed(x: int) -> int:
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_C1 = _signed(0xBF58476D1CE4E5B9)
_C2 = _signed(0x94D049BB133111EB)


def _shr(x: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def mix64(x: Tensor) -> Tensor:
    """splitmix64's finalizer on int64 tensors (bit patterns, wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ _shr(x, 30)) * _C1
    x = (x ^ _shr(x, 27)) * _C2
    return x ^ _shr(x, 31)


def uniforms(keys: Tensor, position: int) -> Tensor:
    """[R] float64 uniforms in [0, 1) for the rows' ``keys`` [R] int64 at token ``position``."""
    h = mix64(keys ^ mix64(torch.full_like(keys, position + 1)))
    return _shr(h, 11).to(torch.float64) * (1.0 / (1 << 53))


def text_key(text: str) -> int:
    """A stable signed 64-bit key of a string (sha256 prefix; not Python's salted hash)."""
    return _signed(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))


def row_keys(base: int, step: int, prompt_keys: Sequence[str], group_size: int) -> Tensor:
    """[N * G] int64 noise keys of the rows of N prompts (``prompt_keys``) × G samples, grouped
    by prompt, at ``step`` (-1: evaluation); a prompt drawn twice gets new keys the 2nd time."""
    seen: dict[str, int] = {}
    occurrence = []
    for k in prompt_keys:
        occurrence.append(seen.get(k, 0))
        seen[k] = occurrence[-1] + 1
    prompt = torch.tensor([text_key(k) for k in prompt_keys], dtype=torch.int64)
    head = mix64(
        torch.tensor([_signed(base)], dtype=torch.int64)
        ^ mix64(torch.tensor([step], dtype=torch.int64))
    )
    per_prompt = mix64(mix64(head ^ prompt) ^ torch.tensor(occurrence, dtype=torch.int64))
    sample = torch.arange(group_size, dtype=torch.int64)
    return mix64(per_prompt.repeat_interleave(group_size) ^ sample.repeat(len(prompt_keys)))


def inverse_cdf_draw(log_probs: Tensor, u: Tensor) -> Tensor:
    """[R] token ids: the first token whose cumulative probability (of ``log_probs`` [R, V])
    exceeds ``u`` [R] (float64 uniforms in [0, 1))."""
    cdf = torch.cumsum(log_probs.double().exp(), -1)
    target = (u * cdf[:, -1]).unsqueeze(1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return idx.clamp(max=log_probs.shape[1] - 1)
