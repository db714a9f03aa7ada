"""Token-level reweighters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import REWEIGHTERS, Reweighter
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param


@REWEIGHTERS.register("ar")
@dataclass
class ProbabilityAware(Reweighter):
    """``ar`` (preset ``ar``): token weights w_t = alpha * p_t + (1 - alpha), mean 1 (valid tokens).

    The mean is 1 over the valid tokens of the normalization set.

    p_t = exp(old_log_prob_t) (scorer ``token_prob``): tokens the sampler found unlikely count
    less, which damps the high-variance updates they cause.
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"token"})
    level: ClassVar[str] = "token"
    default_scorer: ClassVar[str | None] = "token_prob"
    alpha: float = param(0.5, "mixing weight of the token probability", ge=0.0, le=1.0)

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        # (1 - alpha) + alpha * p, one pass into one new tensor
        base = torch.full((), 1.0 - self.alpha, dtype=scores.dtype, device=scores.device)
        return torch.add(base, scores, alpha=self.alpha)
