"""Scorers of outcomes: reward, solve rate, length, efficiency."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SCORERS, Scorer
from dataflex_rl.core.batch import RolloutBatch, clean_rewards, group_successes
from dataflex_rl.core.config import param


@SCORERS.register("reward")
@dataclass
class Reward(Scorer):
    """Outcome reward of each response (0 for padding and non-finite rewards)."""

    granularity: ClassVar[str] = "response"

    def score(self, batch: RolloutBatch) -> Tensor:
        return clean_rewards(batch)


@SCORERS.register("solve_rate")
@dataclass
class SolveRate(Scorer):
    """Per group: fraction of responses with reward > threshold, from integer counts (float64).

    ``k / n`` in float64 equals the literal of the same fraction (0.4 == 2/5), so band bounds
    given as decimals compare exactly.
    """

    granularity: ClassVar[str] = "group"
    group_based: ClassVar[bool] = True
    paper: ClassVar[str] = "Yu et al. 2025, DAPO; Bae et al. 2025, online difficulty filtering"
    threshold: float = param(0.5, "a response is correct when its reward is above this")

    def score(self, batch: RolloutBatch) -> Tensor:
        k = group_successes(batch, self.threshold).to(torch.float64)
        return k / batch.group_size.clamp(min=1).to(torch.float64)


@SCORERS.register("reward_std")
@dataclass
class RewardStd(Scorer):
    """Per group: the unbiased std of the active responses' rewards (float64); exactly 0 when
    they are all equal, the groups whose GRPO advantages are all 0 (the zero-variance groups
    DAPO's dynamic sampling drops, and verl's ``filter_groups`` drops when its metric is the
    reward)."""

    granularity: ClassVar[str] = "group"
    group_based: ClassVar[bool] = True
    paper: ClassVar[str] = "Yu et al. 2025, DAPO (dynamic sampling)"

    def score(self, batch: RolloutBatch) -> Tensor:
        return batch.group_std.clone()


@SCORERS.register("reward_variance")
@dataclass
class RewardVariance(Scorer):
    """Per group: the unbiased (n - 1) variance of the active responses' rewards (float64).

    The square of ``reward_std``: 0 for groups of fewer than 2 active responses and exactly 0
    when their rewards are all equal. The default score of ``top_p_mass`` (preset
    ``ragen_snr``), whose mass it is: RAGEN-2's reward variance (RV) per prompt, with the
    sample variance (ddof 1) of the authors' reference implementations.
    """

    granularity: ClassVar[str] = "group"
    group_based: ClassVar[bool] = True
    paper: ClassVar[str] = "Wang et al. 2026, RAGEN-2 (arXiv 2604.06268), SNR-aware filtering"

    def score(self, batch: RolloutBatch) -> Tensor:
        return batch.group_std * batch.group_std


@SCORERS.register("response_length")
@dataclass
class ResponseLength(Scorer):
    """Number of valid response tokens."""

    granularity: ClassVar[str] = "response"

    def score(self, batch: RolloutBatch) -> Tensor:
        return batch.response_length.to(torch.float32)


@SCORERS.register("efficiency")
@dataclass
class Efficiency(Scorer):
    """Reward per token: reward / max(length, 1) (GFPO's token efficiency)."""

    granularity: ClassVar[str] = "response"
    paper: ClassVar[str] = "Shrivastava et al. 2025, GFPO: Sample More to Think Less"

    def score(self, batch: RolloutBatch) -> Tensor:
        return clean_rewards(batch) / batch.response_length.clamp(min=1).to(torch.float32)
