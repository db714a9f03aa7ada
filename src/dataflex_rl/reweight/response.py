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
