"""GRESO-style probabilistic skipping of prompts that recently gave zero-variance groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SKIP_POLICIES, SkipPolicy
from dataflex_rl.core.batch import RolloutBatch, group_successes
from dataflex_rl.core.config import param
from dataflex_rl.core.history import PromptHistory


@SKIP_POLICIES.register("greso")
@dataclass
class Greso(SkipPolicy):
    """Skip prompts whose recent groups were all-correct or all-wrong, with adaptive exploration.

    A prompt is *skippable* when its ``run`` most recent outcomes (``run >= streak``) were
    all zero-variance groups of one kind: all-correct (easy) or all-wrong (hard). It is still
    generated with probability ``p ** run`` (``compound``, the default) or ``p``, where the
    exploration probability p adapts per kind: a prompt that keeps giving no signal is
    generated less and less often, while one that gave none once is still generated with
    probability p, so forgetting and progress are seen. ``run`` is capped by the prompt
    history's ``history_size``; prompts never seen are always generated.

    After each step, p_easy falls by ``adapt_step`` when the share of all-correct groups that
    got through exceeds ``target_zero_variance / 2`` and rises otherwise (same for p_hard),
    within [``min_explore``, 1]: skipping tightens while zero-signal groups still slip
    through and relaxes when they don't.

    Metrics of ``filter``: ``skipped`` (candidates not to generate, also split ``_easy`` /
    ``_hard``) and ``tokens_saved_est``, the sum over skipped prompts of the mean response
    tokens of their remembered groups (not just the last group).

    Keeping the batch full is the host's job, not an option of this policy: both hosts draw
    rounds of ``candidate_factor`` x the missing prompts per domain until enough are kept, for
    at most ``max_draw_rounds`` rounds (`dataflex_rl.hosts.common.draw`; engine ``tasks.*``,
    verl ``dataflex.*``). Both report per step (`dataflex_rl.hosts.common.accounting`):
    ``skipped`` (prompts of the plain batch, the one drawn without pre-rollout, that were not
    generated), ``replacements`` (generated prompts drawn in their place),
    ``tokens_saved_est`` (over those skipped prompts), ``seconds_saved_est`` (tokens saved x
    this step's generation seconds per generated token) and ``zero_variance_through`` (share
    of generated groups whose rewards were all equal).
    """

    paper: ClassVar[str] = (
        "Zheng et al. 2025, Act Only When It Pays: Efficient RL for LLM "
        "Reasoning via Selective Rollouts (GRESO)"
    )
    streak: int = param(1, "consecutive zero-variance outcomes that make a prompt skippable", ge=1)
    explore_prob: float = param(
        0.5, "initial exploration probability p of each kind", ge=0.0, le=1.0
    )
    compound: bool = param(
        True,
        "generate a skippable prompt with probability p ** run "
        "(run: its consecutive zero-variance outcomes); false: p",
    )
    target_zero_variance: float = param(
        0.25, "share of zero-variance groups aimed for", ge=0.0, le=1.0
    )
    adapt_step: float = param(
        0.01, "change of the exploration probability per step", ge=0.0, le=1.0
    )
    min_explore: float = param(0.05, "lowest exploration probability", ge=0.0, le=1.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._p = {"easy": self.explore_prob, "hard": self.explore_prob}

    def runs(self, history: PromptHistory, keys: list) -> tuple[Tensor, Tensor, Tensor]:
        """Per candidate: ([N] easy run, [N] hard run, [N] mean tokens of its history).

        A run is the number of most recent consecutive zero-variance outcomes of that kind
        (at most one of the two is non-zero).
        """
        o = history.outcomes(keys)
        zero = o.zero & o.valid
        easy = (zero & (o.solve >= 1.0)).flip(1).to(torch.int64).cumprod(1).sum(1)
        hard = (zero & (o.solve <= 0.0)).flip(1).to(torch.int64).cumprod(1).sum(1)
        return easy, hard, o.mean_tokens()

    def filter(
        self,
        history: PromptHistory,
        keys: list,
        step: int,
        generator: torch.Generator | None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        n = len(keys)
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        easy_run, hard_run, mean_tokens = self.runs(history, keys)
        is_easy = easy_run >= self.streak
        is_hard = hard_run >= self.streak
        p = torch.where(is_easy, self._p["easy"], self._p["hard"]).to(torch.float64)
        if self.compound:
            p = p ** torch.maximum(easy_run, hard_run).to(torch.float64)
        skip = (is_easy | is_hard) & (u >= p)
        keep = ~skip
        saved = torch.where(skip, mean_tokens, torch.zeros_like(mean_tokens)).sum()
        return keep, {
            "dataflex/prerollout/skipped": float(skip.sum()),
            "dataflex/prerollout/skipped_easy": float((skip & is_easy).sum()),
            "dataflex/prerollout/skipped_hard": float((skip & is_hard).sum()),
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
        k = group_successes(batch)
        share = {
            "easy": float(((k == size) & present).sum()) / n,
            "hard": float(((k == 0) & present).sum()) / n,
        }
        for kind in ("easy", "hard"):
            step = (
                -self.adapt_step if share[kind] > self.target_zero_variance / 2 else self.adapt_step
            )
            self._p[kind] = min(1.0, max(self.min_explore, self._p[kind] + step))

    def state_dict(self) -> dict:
        return {"p": dict(self._p)}

    def load_state_dict(self, state: dict) -> None:
        self._p = dict(state["p"])
