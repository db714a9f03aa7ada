"""``target_difficulty``: draw prompts whose estimated pass rate is near a scheduled target."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import CURRICULA, Curriculum
from dataflex_rl.core.config import param
from dataflex_rl.core.history import Outcomes


@CURRICULA.register("target_difficulty")
@dataclass
class TargetDifficulty(Curriculum):
    """``target_difficulty`` (preset ``nemotron_curriculum``): Gaussian weights over pass rate.

    Each prompt weighs a Gaussian of its estimated pass rate around a scheduled target.

    Estimated pass rate of a prompt (`pass_rate`): over its remembered groups (the prompt
    history's last ``history_size``), S successes (responses with reward > 0.5) of N
    responses, p = (``prior`` x ``prior_weight`` + S) / (``prior_weight`` + N); a prompt never
    seen (N = 0 and ``prior_weight`` 0) gets ``prior``.

    Target at step t (`target_at`): ``schedule: constant``, mu = ``target``; ``schedule:
    linear``, mu = ``start`` + (``end`` - ``start``) x min(t / ``steps``, 1), t the training
    step from 0 (held at ``end`` after ``steps``).

    Weight (`log_weights`): w = ``floor`` + (1 - ``floor``) x exp(-(p - mu)^2 / (2
    ``width``^2)), peaking at prompts whose estimated pass rate is mu; ``floor`` > 0 keeps
    every prompt drawable. The intake draws each domain's count (set by the mix, unchanged)
    from the domain's pool without replacement with probability proportional to w (one
    Gumbel-top-k draw from its seeded generator: docs/concepts.md#curriculum).

    The preset ``nemotron_curriculum`` is the Nemotron 3 Nano recipe's schedule: a Gaussian
    over pass rate whose centre falls linearly over training (``linear``, ``start`` >
    ``end``), per domain at fixed domain counts. Stateless: the target is a function of the
    step and the estimate reads the strategy's prompt history (saved with checkpoints).
    Metrics (the intake's, per draw): ``dataflex/curriculum/target`` (mu),
    ``drawn_pass_rate`` (mean estimated pass rate of the drawn prompts), ``drawn_unseen``
    (their share never seen) and ``pool_pass_rate`` (mean over the pools).
    """

    paper: ClassVar[str] = (
        "NVIDIA 2025, Nemotron 3 Nano technical report (arXiv 2512.20848) sec. 3.2.2: per-domain "
        "Gaussian sampling over pass rate, centre decreasing over training; Shi et al. 2025, "
        "AdaRFT (arXiv 2504.05520): draw the problems nearest a target difficulty"
    )
    schedule: str = param(
        "constant",
        "how the target moves: constant (target) or linear (start to end over steps)",
        choices=("constant", "linear"),
    )
    target: float = param(0.5, "target pass rate of schedule constant", ge=0.0, le=1.0)
    start: float = param(0.8, "target pass rate at step 0 (schedule linear)", ge=0.0, le=1.0)
    end: float = param(
        0.3, "target pass rate from step `steps` on (schedule linear)", ge=0.0, le=1.0
    )
    steps: int = param(200, "steps the linear schedule takes from start to end", ge=1)
    width: float = param(0.15, "standard deviation of the Gaussian over pass rate", gt=0.0, le=10.0)
    floor: float = param(
        0.0,
        "share of a uniform weight mixed in: w = floor + (1 - floor) x Gaussian (0: none)",
        ge=0.0,
        lt=1.0,
    )
    prior: float = param(0.5, "estimated pass rate of a prompt never seen", ge=0.0, le=1.0)
    prior_weight: float = param(
        0.0,
        "pseudo-responses of the prior added to a seen prompt's remembered responses "
        "(0: its observed rate)",
        ge=0.0,
        le=1e6,
    )

    def target_at(self, step: int) -> float:
        if self.schedule == "constant":
            return float(self.target)
        frac = min(max(step, 0) / self.steps, 1.0)
        return float(self.start + (self.end - self.start) * frac)

    def pass_rate(self, outcomes: Outcomes) -> Tensor:
        o = outcomes
        n = (o.responses.to(torch.float64) * o.valid).sum(1)
        succ = (torch.round(o.solve * o.responses.to(torch.float64)) * o.valid).sum(1)
        m = float(self.prior_weight)
        den = n + m
        est = (succ + self.prior * m) / den.clamp(min=1e-300)
        return torch.where(den > 0, est, torch.full_like(est, float(self.prior)))

    def log_weights(self, pass_rate: Tensor, step: int) -> Tensor:
        z = (pass_rate.to(torch.float64) - self.target_at(step)) / self.width
        lw = -0.5 * z * z
        if self.floor > 0:
            lw = torch.logaddexp(
                torch.full_like(lw, math.log(self.floor)), math.log1p(-self.floor) + lw
            )
        return lw
