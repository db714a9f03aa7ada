"""GRESO-style probabilistic skipping of prompts that recently gave zero-variance groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.component import param
from dataflex_rl.prerollout.base import SKIP_POLICIES, SkipPolicy
from dataflex_rl.prerollout.history import PromptHistory


@SKIP_POLICIES.register("greso")
@dataclass
class Greso(SkipPolicy):
    """Skip prompts whose recent groups were all-correct or all-wrong, with adaptive exploration.

    A prompt whose last ``streak`` groups were all-correct (easy) or all-wrong (hard) is skipped
    with probability 1 - p, where the exploration probability p adapts per kind.

    After each step, p_easy falls by ``adapt_step`` when the share of all-correct groups that
    got through exceeds ``target_zero_variance / 2`` and rises otherwise (same for p_hard):
    skipping tightens while zero-signal groups still slip through and relaxes when they don't,
    so forgetting and progress are still seen.

    Metrics of ``filter``: ``skipped`` (candidates not to generate, also split ``_easy`` /
    ``_hard``) and ``tokens_saved_est``, the sum over skipped prompts of the mean response
    tokens of their remembered groups (`PromptHistory.mean_tokens`, not just the last group).

    Keeping the batch full is the host's job, not an option of this policy: the embedded
    engine draws ``tasks.candidate_factor`` x prompts_per_step candidates and generates, per
    domain, the first kept ones up to the domain's quota (1.0: skipped prompts are simply not
    generated, so the batch shrinks); verl's intake draws further rounds of candidates until
    exactly ``train_batch_size`` prompts are kept. The engine reports per step ``skipped``
    (prompts of the plain batch that were not generated), ``replacements`` (generated prompts
    drawn in their place), ``tokens_saved_est`` (over those skipped prompts),
    ``seconds_saved_est`` (tokens saved x this step's generation seconds per generated token)
    and ``zero_variance_through`` (share of generated groups whose rewards were all equal).
    """

    paper: ClassVar[str] = ("Zheng et al. 2025, Act Only When It Pays: Efficient RL for LLM "
                            "Reasoning via Selective Rollouts (GRESO)")
    streak: int = param(1, "consecutive zero-variance outcomes that make a prompt skippable",
                        ge=1)
    explore_prob: float = param(0.5, "initial probability of generating a skippable prompt",
                                ge=0.0, le=1.0)
    target_zero_variance: float = param(0.25, "share of zero-variance groups aimed for",
                                        ge=0.0, le=1.0)
    adapt_step: float = param(0.01, "change of the exploration probability per step", ge=0.0)
    min_explore: float = param(0.05, "lowest exploration probability", ge=0.0, le=1.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._p = {"easy": self.explore_prob, "hard": self.explore_prob}

    def _kind(self, outcomes: list) -> str | None:
        recent = outcomes[-self.streak:]
        if len(recent) < self.streak or not all(o[2] for o in recent):
            return None
        if all(o[1] >= 1.0 for o in recent):
            return "easy"
        if all(o[1] <= 0.0 for o in recent):
            return "hard"
        return None

    def filter(self, history: PromptHistory, keys: list, step: int,
               generator: torch.Generator | None) -> tuple[Tensor, dict]:
        n = len(keys)
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        keep = torch.ones(n, dtype=torch.bool)
        saved = 0
        skipped = {"easy": 0, "hard": 0}
        for i, key in enumerate(keys):   # dict look-ups per candidate prompt
            outcomes = history.get(key)
            kind = self._kind(outcomes) if outcomes else None
            if kind is not None and float(u[i]) >= self._p[kind]:
                keep[i] = False
                skipped[kind] += 1
                saved += sum(o[3] for o in outcomes) / len(outcomes)
        return keep, {
            "dataflex/prerollout/skipped": float(n - int(keep.sum())),
            "dataflex/prerollout/skipped_easy": float(skipped["easy"]),
            "dataflex/prerollout/skipped_hard": float(skipped["hard"]),
            "dataflex/prerollout/tokens_saved_est": float(saved),
            "dataflex/prerollout/explore_prob_easy": self._p["easy"],
            "dataflex/prerollout/explore_prob_hard": self._p["hard"],
        }

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        size = batch.group_size
        present = size > 0
        n = int(present.sum())
        if n == 0:
            return
        k = batch.group_successes()
        share = {"easy": float(((k == size) & present).sum()) / n,
                 "hard": float(((k == 0) & present).sum()) / n}
        for kind in ("easy", "hard"):
            step = -self.adapt_step if share[kind] > self.target_zero_variance / 2 else self.adapt_step
            self._p[kind] = min(1.0, max(self.min_explore, self._p[kind] + step))

    def state_dict(self) -> dict:
        return {"p": dict(self._p)}

    def load_state_dict(self, state: dict) -> None:
        self._p = dict(state["p"])
