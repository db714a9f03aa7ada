"""Scorers of the policy's own signals: advantages and token probabilities."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SCORERS, Scorer
from dataflex_rl.core.batch import RolloutBatch


def advantage_magnitude(batch: RolloutBatch, who: str = "advantage_magnitude") -> Tensor:
    """[B] float64 |A| of each response, **defined as mean |A_t|** over its valid tokens.

    This is the one meaning of "|A|" in every component (`advantage_magnitude`,
    `domain_advantage_magnitude`, and what the mixers and reweighters built on them see). It
    differs from |mean A_t| when a response's token advantages change sign: tokens
    (+1, -1) give |A| = 1 (each token is pushed, the response carries signal), not 0. With
    GRPO-style advantages, constant over a response's tokens, the two agree.

    From ``response_advantages`` when the batch has them (|A| of each response, no token
    read). 0 for inactive rows and rows without valid tokens. Float64, from
    `TokenBlocks.row_means`: responses whose tokens all carry the same |A| get exactly that
    value (exact ties, broken by index), and |A| up to 3.4e38 stays finite.
    """
    if not batch.has_advantages:
        raise ValueError(f"{who} needs 'advantages' in the batch")
    if batch.response_advantages is not None:  # one value per response: no [B, T] read
        mean = batch.response_advantages.to(torch.float64).abs()
        return torch.where(batch.active_mask & (batch.response_length > 0), mean, 0.0)
    mean = batch.token_blocks.row_means(batch.advantages, absolute=True)
    return torch.where(batch.active_mask, mean, 0.0)


@SCORERS.register("advantage_magnitude")
@dataclass
class AdvantageMagnitude(Scorer):
    """|advantage| of each response: mean |A_t| over its valid tokens (0 if none).

    See `advantage_magnitude` for the definition of |A| (float64, exact ties, finite).
    """

    granularity: ClassVar[str] = "response"
    requires: ClassVar[tuple[str, ...]] = ("advantages",)

    def score(self, batch: RolloutBatch) -> Tensor:
        return advantage_magnitude(batch)


@SCORERS.register("token_prob")
@dataclass
class TokenProb(Scorer):
    """Per token: p_t = exp(old_log_prob_t), the sampling probability (0 on padding)."""

    granularity: ClassVar[str] = "token"
    requires: ClassVar[tuple[str, ...]] = ("old_log_probs",)
    returns_new: ClassVar[bool] = True

    def score(self, batch: RolloutBatch) -> Tensor:
        if batch.old_log_probs is None:
            raise ValueError("token_prob needs 'old_log_probs' in the batch")
        # one new [B, T] buffer: exp(min(x, 0)) = min(exp(x), 1); then padding tokens and
        # inactive rows to 0, in place
        p = torch.exp(batch.old_log_probs).clamp_(max=1.0)
        batch.token_blocks.fill_invalid_(p, 0.0)
        inactive = ~batch.active_mask
        if bool(inactive.any()):
            p[inactive] = 0.0
        return p

    def row_sums(self, batch: RolloutBatch) -> Tensor:
        """[B] sum of p_t over valid tokens, from the batch's one pass over old log-probs
        (shared with its validity check: no [B, T] buffer)."""
        if batch.old_log_probs is None:
            raise ValueError("token_prob needs 'old_log_probs' in the batch")
        s = batch.token_prob_sums
        return torch.where(batch.active_mask, s, torch.zeros_like(s))

    def write_affine_(self, batch: RolloutBatch, A: Tensor, C: Tensor, out: Tensor) -> bool:
        """A[r] * p + C[r] on valid tokens (0 elsewhere) with the batch's compiled kernels,
        when it has them (`RolloutBatch.token_kernels`): one pass over each row's valid
        tokens; the rare odd rows (`token_prob_odd_rows`) are redone exactly in torch."""
        kernels = batch.token_kernels
        if kernels is None:
            return False
        x = batch.old_log_probs.detach()
        kernels.affine_prob(x, batch.prefix_lengths, A, C, out)
        odd = batch.token_prob_odd_rows
        odd = odd[(A[odd] != 0) | (C[odd] != 0)]  # all-0 rows stay 0 (a NaN row too)
        if odd.numel():
            p = torch.clamp(x[odd], max=0.0).exp_()
            w = torch.addcmul(C[odd, None], p, A[odd, None])
            out[odd] = torch.where(batch.response_mask[odd], w, 0.0)
        return True

    def score_rows_(self, batch: RolloutBatch, start: int, out: Tensor) -> Tensor:
        """p = exp(x) into ``out``, and exp(min(x, 0)) on the rare rows where they may differ
        (`RolloutBatch.token_prob_odd_rows`): one elementwise op per chunk, not two."""
        x = batch.old_log_probs.detach()[start : start + out.shape[0]]
        torch.exp(x, out=out)
        odd = batch.token_prob_odd_rows
        if odd.numel():
            r = odd[(odd >= start) & (odd < start + out.shape[0])] - start
            if r.numel():
                out[r] = torch.clamp(x[r], max=0.0).exp_()
        return out
