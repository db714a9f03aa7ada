"""Thompson-sampled prompt difficulty: skip prompts predicted to be solved always or never."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from dataflex_rl.core.base import SKIP_POLICIES, SkipPolicy
from dataflex_rl.core.config import param
from dataflex_rl.core.history import Outcomes, PromptHistory
from dataflex_rl.core.registry import ConfigError


@SKIP_POLICIES.register("thompson")
@dataclass
class ThompsonBand(SkipPolicy):
    """``thompson``: skip a prompt when a Beta-posterior draw of its solve rate is outside a band.

    Each candidate's solve rate has a Beta(``prior_a`` + successes, ``prior_b`` + failures)
    posterior over its remembered groups (every response counts; the group ``k`` outcomes
    back weighs ``discount ** k``, so old evidence fades as the policy changes). One draw per
    candidate (Thompson sampling): the prompt is generated when the draw lies in
    [``low``, ``high``], where a group of G responses is likely to have both outcomes, and
    skipped otherwise (``skipped_easy`` above ``high``, ``skipped_hard`` below ``low``).
    Uncertain prompts have wide posteriors and are still drawn inside the band now and
    then, which is the exploration; prompts never seen are generated (``keep_unseen``).

    Unlike ``greso``, which waits for zero-variance groups, this also predicts that a prompt
    solved 15 times of 16 will likely give no signal next time, and it needs no adaptation:
    the band sets how sure the policy must be. Metrics as ``greso`` (``skipped``,
    ``skipped_easy``, ``skipped_hard``, ``tokens_saved_est``); hosts add the plain-batch
    accounting (`dataflex_rl.hosts.common.accounting`).
    """

    paper: ClassVar[str] = (
        "Qu et al. 2025, Can Prompt Difficulty be Online Predicted for "
        "Accelerating RL Finetuning of Reasoning Models? (MoPPS; here a "
        "band on the Thompson draw instead of a top-k)"
    )
    low: float = param(0.1, "skip when the drawn solve rate is below this", ge=0.0, le=1.0)
    high: float = param(0.9, "skip when the drawn solve rate is above this", ge=0.0, le=1.0)
    prior_a: float = param(1.0, "Beta prior pseudo-successes", gt=0.0, le=1e6)
    prior_b: float = param(1.0, "Beta prior pseudo-failures", gt=0.0, le=1e6)
    discount: float = param(
        1.0, "weight of a group per outcome of age (1: all equal)", gt=0.0, le=1.0
    )
    keep_unseen: bool = param(True, "always generate prompts without history")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.low < self.high:
            raise ConfigError(f"thompson: need low < high, got low={self.low}, high={self.high}")

    def posterior(self, history: PromptHistory, keys: list) -> tuple[Tensor, Tensor, Tensor]:
        """Per candidate: ([N] alpha, [N] beta, [N] count of remembered groups)."""
        return self._posterior(history.outcomes(keys))

    def _posterior(self, o: Outcomes) -> tuple[Tensor, Tensor, Tensor]:
        H = o.step.shape[1]
        age = torch.arange(H - 1, -1, -1, dtype=torch.float64)
        w = (self.discount**age) * o.valid  # [N, H], newest weight 1
        n = o.responses.to(torch.float64)
        succ = torch.round(o.solve * n)
        alpha = self.prior_a + (w * succ).sum(1)
        beta = self.prior_b + (w * (n - succ)).sum(1)
        return alpha, beta, o.count

    def filter(
        self,
        history: PromptHistory,
        keys: list,
        step: int,
        generator: torch.Generator | None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        n = len(keys)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        o = history.outcomes(keys)
        alpha, beta, count = self._posterior(o)
        theta = torch.from_numpy(np.random.default_rng(seed).beta(alpha.numpy(), beta.numpy()))
        seen = count > 0 if self.keep_unseen else torch.ones(n, dtype=torch.bool)
        easy = seen & (theta > self.high)
        hard = seen & (theta < self.low)
        skip = easy | hard
        saved = torch.nan_to_num(o.mean_tokens())[skip].sum()
        return ~skip, {
            "dataflex/prerollout/skipped": float(skip.sum()),
            "dataflex/prerollout/skipped_easy": float(easy.sum()),
            "dataflex/prerollout/skipped_hard": float(hard.sum()),
            "dataflex/prerollout/tokens_saved_est": float(saved),
        }
