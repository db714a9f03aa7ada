"""Mixers: a per-domain signal -> domain proportions.

Each returns raw proportions on the simplex; the strategy then mixes in the floor,
p = floor + (1 - D floor) raw, so every domain keeps at least ``floor`` after renormalization.
Domains without data in the signal's window get the mean signal of the observed ones (or the
prior when none is observed yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import MIXERS, Mixer
from dataflex_rl.core.config import param
from dataflex_rl.core.proportions import normalize_proportions


def fill_unobserved(values: Tensor, observed: Tensor) -> Tensor:
    """Replace signals of unobserved domains by the mean of the observed ones."""
    if not bool(observed.any()):
        return values
    fill = values[observed].mean()
    return torch.where(observed, values, fill)


def softmax(values: Tensor, temperature: float) -> Tensor:
    """softmax(values / T) in float64; finite for any finite values and T > 0 (a quotient that
    overflows is clamped to the largest float, so the softmax never sees inf - inf)."""
    big = torch.finfo(torch.float64).max
    return torch.softmax((values.to(torch.float64) / temperature).clamp(-big, big), dim=0)


@MIXERS.register("static")
@dataclass
class Static(Mixer):
    """Fixed proportions: ``proportions`` (list in domain order or domain -> value) or the prior."""

    needs_signal: ClassVar[bool] = False
    floor: float = param(0.0, "minimum proportion of every domain", ge=0.0, lt=1.0)
    proportions: list[float] | dict[str, float] | None = param(
        None, "fixed proportions (normalized); null: the mechanism's prior (uniform)", ge=0.0
    )

    def initial(self, prior: Tensor, domains: tuple[str, ...]) -> Tensor:
        if self.proportions is None:
            return prior
        return normalize_proportions(self.proportions, domains, "static.proportions")

    def raw_proportions(self, values, observed, drawn, prior) -> Tensor:
        return prior


@MIXERS.register("reward_gap")
@dataclass
class RewardGap(Mixer):
    """p = softmax((max_d r_d - r_d) / T): the further a domain lags, the more it is drawn."""

    default_scorer: ClassVar[str | None] = "domain_reward"
    temperature: float = param(0.1, "softmax temperature over reward gaps", gt=0.0)

    def raw_proportions(self, values, observed, drawn, prior) -> Tensor:
        if not bool(observed.any()):
            return prior
        v = fill_unobserved(values, observed)
        return softmax(v.max() - v, self.temperature)


@MIXERS.register("ucb")
@dataclass
class UCB(Mixer):
    """``ucb`` (preset ``dump_ucb``): UCB1 over domains, softmax((v_d + c sqrt(2 ln N/n_d)) / T).

    v_d: the domain's value (its signal);
    n_d: responses drawn from domain d so far, N = sum of n_d. A domain never drawn counts
    as drawn once in its bonus (largest, but finite, so the floor and softmax still apply).
    """

    default_scorer: ClassVar[str | None] = "domain_advantage_magnitude"
    paper: ClassVar[str] = "Wang et al. 2025, DUMP; Auer et al. 2002, UCB1"
    c: float = param(1.0, "exploration coefficient of the UCB bonus", ge=0.0, le=1e6)
    temperature: float = param(0.1, "softmax temperature over UCB values", gt=0.0)

    def raw_proportions(self, values, observed, drawn, prior) -> Tensor:
        n = drawn.to(torch.float64).clamp(min=1)
        N = drawn.to(torch.float64).sum().clamp(min=1)
        bonus = self.c * torch.sqrt(2.0 * torch.log(N) / n)
        v = fill_unobserved(values, observed) if bool(observed.any()) else torch.zeros_like(n)
        return softmax(v + bonus, self.temperature)


@MIXERS.register("softmax")
@dataclass
class SoftmaxMixer(Mixer):
    """``softmax`` mixer (preset ``tscl``): p = softmax(value / T) over any domain signal.

    With the ``learning_progress`` scorer it is TSCL.
    """

    default_scorer: ClassVar[str | None] = "learning_progress"
    temperature: float = param(0.01, "softmax temperature over the signal", gt=0.0)

    def raw_proportions(self, values, observed, drawn, prior) -> Tensor:
        if not bool(observed.any()):
            return prior
        return softmax(fill_unobserved(values, observed), self.temperature)
