"""Drop a random share of the informative groups: the planted harm of ``compare`` controls.

The draw is a hash of (step, prompt key, salt), not a random generator: stateless, the same in
every process and row order (see `RandomGroups`).
"""

from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import segment_max, segment_min

M32 = 0xFFFFFFFF
#: multipliers of `mix32`; both < 2**31, so every int64 product of a 32-bit value fits
_C1, _C2 = 0x21F0AAAD, 0x735A2D97


def mix32(x):
    """The 32-bit bit mixer on a Python int or an int64 tensor of values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * _C1) & M32
    x = x ^ (x >> 15)
    x = (x * _C2) & M32
    return x ^ (x >> 15)


def key_hash(key) -> int:
    """A stable 32-bit hash of a prompt key (the same in every process, unlike ``hash``)."""
    text = (
        b"i" + str(int(key)).encode()
        if isinstance(key, numbers.Integral)
        else b"s" + str(key).encode()
    )
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little")


def group_uniforms(batch: RolloutBatch, salt: int) -> Tensor:
    """[G] float64 in [0, 1): the hashed draw ``u_g`` of every group at ``batch.step``."""
    G = batch.num_groups
    if batch.prompt_keys is not None and G:
        idx = torch.arange(batch.batch_size)
        first = segment_min(idx, batch.group_ids, G, empty=0)  # [G] first row of each group
        keys = torch.tensor(
            [key_hash(batch.prompt_keys[i]) for i in first.tolist()], dtype=torch.int64
        )
    else:
        keys = mix32(torch.arange(G, dtype=torch.int64))
    step_salt = mix32((batch.step & M32) ^ mix32(salt & M32))
    return mix32(keys ^ step_salt).to(torch.float64) / 2.0**32


@SELECTORS.register("random_groups")
@dataclass
class RandomGroups(Selector):
    """Drop a hashed-random ``fraction`` of the informative groups each step (a planted harm).

    A group is informative when its scores are not all equal over its active responses (with the
    default scorer ``reward``: non-zero reward variance). Informative group g of step t is
    dropped when

        u_g = mix32(k_g XOR mix32(t XOR mix32(salt))) / 2**32  <  fraction

    ``k_g``: the first 4 bytes (little-endian) of ``blake2b(key)`` of the group's prompt key
    (``b"i" + str(int)`` for integer keys, ``b"s" + str(key)`` otherwise), or ``mix32(g)``
    without prompt keys. ``mix32``: ``x ^= x >> 16; x *= 0x21f0aaad; x ^= x >> 15;
    x *= 0x735a2d97; x ^= x >> 15`` on 32 bits. So each informative group is dropped with
    probability ``fraction``, independently across keys and steps, deterministically: no state,
    no global random generator, the same decision in any process and row order. Groups without
    signal (one response, all scores equal) are always kept: dropping them would change only
    the loss's denominator. ``fraction`` 0 keeps everything; 1 drops every informative group.

    ``renormalize`` defaults to false: the loss stays averaged over the whole batch's tokens, so
    dropped groups count as zeros and the update is the baseline's with that share of its
    informative groups removed. With renormalization the kept tokens would be averaged over
    fewer tokens, a larger step per token that could help a run whose learning rate is too small
    and blur the harm. It is the ``drop_half`` control of ``dataflex-rl compare``.
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"response"})
    group_based: ClassVar[bool] = True
    default_scorer: ClassVar[str | None] = "reward"
    recompute_advantages_default: ClassVar[bool] = False
    renormalize_default: ClassVar[bool] = False
    fraction: float = param(0.5, "probability that an informative group is dropped", ge=0.0, le=1.0)
    salt: int = param(
        0,
        "salt of the hash (another salt drops other groups; 32 bits are used)",
        ge=0,
        le=2**32 - 1,
    )

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        G, B = batch.num_groups, batch.batch_size
        if B == 0:
            return torch.zeros(0, dtype=torch.bool)
        active = batch.active_mask
        s, gid = scores.to(torch.float64)[active], batch.group_ids[active]
        informative = segment_max(s, gid, G, 0.0) > segment_min(s, gid, G, 0.0)  # [G]
        dropped = informative & (group_uniforms(batch, self.salt) < self.fraction)
        return active & ~dropped.index_select(0, batch.group_ids)
