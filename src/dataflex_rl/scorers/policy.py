"""Scorers of the policy's own signals: advantages, token probabilities and entropies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SCORERS, Scorer
from dataflex_rl.core.batch import RolloutBatch, token_mask
from dataflex_rl.core.rowops import masked_row_means, row_chunks


def advantage_magnitude(batch: RolloutBatch, who: str = "advantage_magnitude") -> Tensor:
    """[B] float64 |A| of each response, **defined as mean |A_t|** over its valid tokens.

    The one meaning of "|A|" in every component (docs/concepts.md): tokens (+1, -1) give 1,
    not 0. From ``response_advantages`` when given; 0 for inactive and empty rows; exact for
    rows of equal |A_t| (`masked_row_means`).
    """
    if not batch.has_advantages:
        raise ValueError(f"{who} needs 'advantages' in the batch")
    if batch.response_advantages is not None:  # one value per response: no [B, T] read
        mean = batch.response_advantages.to(torch.float64).abs()
        return torch.where(batch.active_mask & (batch.response_length > 0), mean, 0.0)
    mean = masked_row_means(
        batch.advantages, batch.response_mask, batch.response_length, absolute=True
    )
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
    """Per token: p_t = exp(old_log_prob_t), the sampling probability (0 on padding tokens and
    inactive rows). exp(min(x, 0)): a log-prob above 0 (rounding in the host) counts as 1."""

    granularity: ClassVar[str] = "token"
    requires: ClassVar[tuple[str, ...]] = ("old_log_probs",)

    def score(self, batch: RolloutBatch) -> Tensor:
        if batch.old_log_probs is None:
            raise ValueError("token_prob needs 'old_log_probs' in the batch")
        # one new [B, T] buffer, then in place: min(exp(x), 1) = exp(min(x, 0)); padding
        # tokens and inactive rows 0. A chunk of rows at a time: the clamp and the mask run
        # on a chunk still in cache (whole-tensor passes cost ~3x as much at 8k x 4k tokens;
        # element-wise, so the values are the same either way)
        x, mask = batch.old_log_probs.detach(), batch.response_mask
        p = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        zero = torch.zeros((), dtype=p.dtype, device=p.device)
        for i, j in row_chunks(*x.shape):
            c = torch.exp(x[i:j], out=p[i:j]).clamp_(max=1.0)
            torch.where(mask[i:j], c, zero, out=c)
        inactive = (~batch.active_mask).nonzero().squeeze(1)
        if inactive.numel():
            p.index_fill_(0, inactive, 0.0)
        return p


@SCORERS.register("token_entropy")
@dataclass
class TokenEntropy(Scorer):
    """Per token: the policy's entropy at the token (0 on padding tokens and inactive rows).

    The entropy of the policy's next-token distribution, field ``entropies``, filled by the
    host from the logits it computes old log-probs with (docs/concepts.md).

    High-entropy tokens are the "forks" where the policy hesitates between continuations;
    Wang et al. (2025) find that the policy gradient on the top ~20% of them carries RLVR's
    gains.
    """

    granularity: ClassVar[str] = "token"
    requires: ClassVar[tuple[str, ...]] = ("entropies",)
    paper: ClassVar[str] = (
        "Wang et al. 2025, Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive "
        "Effective Reinforcement Learning for LLM Reasoning (arXiv 2506.01939)"
    )

    def score(self, batch: RolloutBatch) -> Tensor:
        if batch.entropies is None:
            raise ValueError("token_entropy needs 'entropies' in the batch")
        e = batch.entropies.detach()
        return torch.where(token_mask(batch), e, torch.zeros((), dtype=e.dtype, device=e.device))
