"""Scorers of the policy's own signals: advantages and token probabilities."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SCORERS, Scorer
from dataflex_rl.core.batch import RolloutBatch


@SCORERS.register("advantage_magnitude")
@dataclass
class AdvantageMagnitude(Scorer):
    """|advantage| of each response: mean |A_t| over its valid tokens (0 if none)."""

    granularity: ClassVar[str] = "response"
    requires: ClassVar[tuple[str, ...]] = ("advantages",)

    def score(self, batch: RolloutBatch) -> Tensor:
        if batch.advantages is None:
            raise ValueError("advantage_magnitude needs 'advantages' in the batch")
        total = batch.token_blocks.row_sums(batch.advantages, absolute=True)
        mean = total / batch.response_length.clamp(min=1)
        return torch.where(batch.active_mask, mean, 0.0)


@SCORERS.register("token_prob")
@dataclass
class TokenProb(Scorer):
    """Per token: p_t = exp(old_log_prob_t), the sampling probability (0 on padding)."""

    granularity: ClassVar[str] = "token"
    requires: ClassVar[tuple[str, ...]] = ("old_log_probs",)

    def score(self, batch: RolloutBatch) -> Tensor:
        if batch.old_log_probs is None:
            raise ValueError("token_prob needs 'old_log_probs' in the batch")
        # one [B, T] buffer: -inf off the mask (exp -> 0), clamped and exponentiated in place
        p = torch.where(batch.response_mask, batch.old_log_probs, float("-inf"))
        p.clamp_(max=0).exp_()
        inactive = ~batch.active_mask
        if bool(inactive.any()):
            p[inactive] = 0.0
        return p
