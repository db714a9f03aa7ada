"""Keep responses (or whole groups) whose score lies in a band."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.registry import ConfigError


@SELECTORS.register("band")
@dataclass
class Band(Selector):
    """``band`` (presets ``difffilter``, ``dapo``, ``dapo_entropy``): keep scores in a band.

    A response is kept when its score lies between ``low`` and ``high``.

    With the group scorer ``solve_rate`` this is difficulty filtering: exclusive bounds
    (0.2, 0.8) with G=5 keep exactly the groups with 2 or 3 correct answers, dropping the
    all-wrong, all-right and nearly-so groups that carry little GRPO signal. With the group
    scorer ``reward_std``, ``low: 0`` and no upper bound (preset ``dapo``) it keeps exactly the
    groups whose rewards are not all equal.
    """

    default_scorer: ClassVar[str | None] = "solve_rate"
    elementwise: ClassVar[bool] = True
    paper: ClassVar[str] = "Yu et al. 2025, DAPO (dynamic sampling); Bae et al. 2025"
    low: float = param(0.2, "lower bound of the kept band")
    high: float | None = param(0.8, "upper bound of the kept band (null: none)")
    inclusive: bool = param(False, "keep scores equal to a bound (default: bounds excluded)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.high is not None and self.low > self.high:
            raise ConfigError(f"Band.low: must be <= high ({self.high}), got {self.low}")

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        # compare in the scores' own precision: a float32 reward 0.2 equals the bound 0.2
        s = scores if scores.is_floating_point() else scores.to(torch.float64)
        if self.high is None:
            return s >= self.low if self.inclusive else s > self.low
        if self.inclusive:
            return (s >= self.low) & (s <= self.high)
        return (s > self.low) & (s < self.high)
