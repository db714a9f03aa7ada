"""A user's own scorer and actuator, living outside the dataflex_rl package.

Used from YAML as ``"my_strategies:ShortAdvantage"`` once this folder is importable
(``PYTHONPATH=examples/custom_strategy``). See docs/extending.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl import RolloutBatch, Scorer, Selector, param


@dataclass
class ShortAdvantage(Scorer):
    """|advantage| discounted by length: |A| / (1 + length / scale).

    Prefers responses that carry signal in few tokens.
    """

    granularity: ClassVar[str] = "response"
    requires: ClassVar[tuple[str, ...]] = ("advantages",)
    scale: float = param(32.0, "length (tokens) at which the score halves", gt=0.0)

    def score(self, batch: RolloutBatch) -> Tensor:
        length = batch.response_length.to(torch.float32)
        return batch.advantage_per_response.abs() / (1.0 + length / self.scale)


@dataclass
class AtLeast(Selector):
    """Keep responses whose score is at least ``minimum``."""

    accepts: ClassVar[frozenset[str]] = frozenset({"response"})
    minimum: float = param(0.1, "smallest score kept", ge=0.0)

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        return scores >= self.minimum
