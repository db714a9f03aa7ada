"""Skip policies: which candidate prompts are worth generating."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.component import Component
from dataflex_rl.core.registry import Registry
from dataflex_rl.prerollout.history import PromptHistory


@dataclass
class SkipPolicy(Component):
    """Prompt history -> which candidate prompts to generate."""

    kind: ClassVar[str] = "skip policy"
    needs_signal: ClassVar[bool] = False

    def filter(self, history: PromptHistory, keys: list, step: int,
               generator: torch.Generator | None) -> tuple[Tensor, dict]:
        """([N] bool keep, metrics) for candidate prompts ``keys``."""
        raise NotImplementedError

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        """Adapt to this step's outcomes (before ``history`` records them)."""


SKIP_POLICIES: Registry[type[SkipPolicy]] = Registry("skip policy", SkipPolicy)
