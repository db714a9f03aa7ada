"""Response-level reweighters. The strategy normalizes their raw weights to mean 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import REWEIGHTERS, Reweighter
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.segment import segment_moments


@REWEIGHTERS.register("softmax")
@dataclass
class Softmax(Reweighter):
    """w = softmax(score / T) * N over the normalization set (mean 1 there)."""

    default_scorer: ClassVar[str | None] = "advantage_magnitude"
    temperature: float = param(1.0, "softmax temperature; large -> uniform weights", gt=0.0)

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        big = torch.finfo(torch.float64).max
        s = (scores.to(torch.float64) / self.temperature).clamp(-big, big)  # finite: no inf - inf
        top = s[norm_mask].max() if bool(norm_mask.any()) else torch.tensor(0.0, dtype=s.dtype)
        return torch.exp(torch.where(norm_mask, s - top, torch.zeros_like(s)))


@REWEIGHTERS.register("per")
@dataclass
class Priority(Reweighter):
    """``per`` (preset ``per``): w = (|score| + eps) ** alpha, mean 1 (prioritized replay).

    Computed in log space relative to the largest priority of the normalization set,
    exp(alpha * (log(|s| + eps) - max log(|s| + eps))), which equals the formula up to the
    factor the mean-1 normalization removes: finite for any finite score and alpha (|A| of
    3e38 gave NaN as inf / inf).
    """

    default_scorer: ClassVar[str | None] = "advantage_magnitude"
    paper: ClassVar[str] = "Schaul et al. 2016, Prioritized Experience Replay"
    alpha: float = param(0.6, "priority exponent; 0 gives uniform weights", ge=0.0, le=100.0)
    eps: float = param(
        0.01, "added to |score| so no informative response gets weight 0", gt=0.0, le=1e6
    )

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        log_p = torch.log(scores.to(torch.float64).abs() + self.eps)
        top = (
            log_p[norm_mask].max() if bool(norm_mask.any()) else torch.zeros((), dtype=log_p.dtype)
        )
        return torch.exp(
            torch.where(norm_mask, self.alpha * (log_p - top), torch.zeros_like(log_p))
        )


@REWEIGHTERS.register("band_weight")
@dataclass
class BandWeight(Reweighter):
    """``band_weight`` (preset ``diffband``): ``inside`` for scores in [low, high], else 1; mean 1.

    With ``solve_rate``: responses of groups of medium difficulty count more (diffband).
    """

    default_scorer: ClassVar[str | None] = "solve_rate"
    low: float = param(0.2, "lower bound of the band (inclusive)")
    high: float = param(0.8, "upper bound of the band (inclusive)")
    inside: float = param(2.0, "raw weight inside the band (outside: 1)", ge=0.0, le=1e6)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.low > self.high:
            raise ConfigError(f"BandWeight.low: must be <= high ({self.high}), got {self.low}")

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        # compare in the scores' own precision (see Band.select)
        s = scores if scores.is_floating_point() else scores.to(torch.float64)
        inside = (s >= self.low) & (s <= self.high)
        s = s.to(torch.float64)
        return torch.where(inside, torch.full_like(s, self.inside), torch.ones_like(s))


@REWEIGHTERS.register("maxrl")
@dataclass
class MaxRL(Reweighter):
    """``maxrl`` (preset ``maxrl``): weights that make each advantage MaxRL's (r - mean) / mean.

    MaxRL (Tajwar, Zeng et al. 2026) normalizes a group's centred reward by the group's mean
    instead of its std: A = (r - mean) / mean, about a 1/p weight on the successes of a prompt
    solved with probability p. The weight of response i is that target over the advantage
    A_i the host computed, w_i = ((r_i - mean) / mean) / A_i, and the weights are **absolute**
    (not normalized to mean 1): w_i x A_i is the target, whatever the host's group estimator
    (GRPO's (r - mean) / (std + eps), without the std, RLOO), and multiplying the per-token
    clipped loss by w_i >= 0 is the clipped loss of advantage w_i x A_i. The mean is over the
    group's active responses (those the host's advantages were computed on) and r is the score
    (scorer ``reward``).

    Edges: a group whose mean is 0 (no success: every reward 0) has advantage 0 (weight 0 on
    any row the host gave a non-zero advantage), the paper's no-success convention (prime-rl's
    MaxRL keeps it); a group whose mean is below 0 too (rewards are expected in [0, 1], the
    paper's binary correctness; (r - mean) / mean would reverse their order). A row whose
    host advantage is 0 has weight 1 (its policy-gradient term is 0 either way; under GRPO it
    is a row with r = mean, whose target is 0 too); a row whose host advantage has the other
    sign than r - mean has weight 0. With a select that recomputes advantages on the responses
    it keeps it is refused (the target is over the whole group). Exact to float32 rounding of
    the weight (capped at float32's largest value, so every weight is finite).

    Stateless (nothing to checkpoint). In the decision log: ``weight`` is the absolute weight,
    so ``weight`` x ``advantage`` is the advantage trained on; ``decision_advantage`` null;
    replay re-decides it exactly from the logged rewards and advantages (the first token's,
    every token's under a group estimator).
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"response"})
    group_based: ClassVar[bool] = True
    normalized: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ("advantages",)
    default_scorer: ClassVar[str | None] = "reward"
    paper: ClassVar[str] = (
        "Tajwar, Zeng et al. 2026, Maximum Likelihood Reinforcement Learning (MaxRL, "
        "arXiv 2602.02710)"
    )

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        active = batch.active_mask
        mean, _, dev = segment_moments(scores, batch.group_ids, batch.num_groups, active)
        m = mean.index_select(0, batch.group_ids)
        target = torch.where(active & (m > 0), dev / torch.where(m > 0, m, 1.0), 0.0)
        if batch.advantage_per_response is None:
            raise ValueError("maxrl: the batch has no advantages (it rescales the host's)")
        host = batch.advantage_per_response.to(torch.float64)
        nonzero = host != 0
        ratio = target / torch.where(nonzero, host, 1.0)
        big = torch.finfo(torch.float32).max  # a weight stays finite in float32
        return torch.where(nonzero, torch.where(ratio > 0, ratio.clamp(max=big), 0.0), 1.0)
