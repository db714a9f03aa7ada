"""Per-domain signals over a window of **steps** (stateful), the inputs of the mixers: [window, D]
ring buffers of the sum and count of a per-response value. The clock is ``batch.step``: a
retried step replaces its entry, a skipped one is a gap, not a shift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SCORERS, DomainScorer
from dataflex_rl.core.batch import RolloutBatch, clean_rewards
from dataflex_rl.core.config import param


@dataclass
class WindowedDomainScorer(DomainScorer):
    """Base: ring buffers of per-step, per-domain sums and counts."""

    window: int = param(
        10, "number of most recent steps the signal is computed over", ge=1, le=10_000
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._sums: Tensor | None = None  # [W, D] float64
        self._counts: Tensor | None = None  # [W, D] int64
        self._x: Tensor | None = None  # [W] observation index of each row, -1 empty
        self._n = 0

    def per_response(self, batch: RolloutBatch) -> Tensor:
        """[B] the value each active response contributes."""
        raise NotImplementedError

    def counted(self, batch: RolloutBatch) -> Tensor:
        """[B] bool: the responses whose value counts (default: the active ones)."""
        return batch.active_mask

    def observe(self, batch: RolloutBatch) -> None:
        D = batch.num_domains
        if self._sums is None:
            self._sums = torch.zeros(self.window, D, dtype=torch.float64)
            self._counts = torch.zeros(self.window, D, dtype=torch.int64)
            self._x = torch.full((self.window,), -1, dtype=torch.int64)
        step = batch.step
        row = step % self.window
        active = self.counted(batch)
        v = torch.where(
            active,
            self.per_response(batch).to(torch.float64),
            torch.zeros(batch.batch_size, dtype=torch.float64),
        )
        self._sums[row] = torch.zeros(D, dtype=torch.float64).index_add_(0, batch.domain_ids, v)
        self._counts[row] = torch.bincount(batch.domain_ids[active], minlength=D)
        self._x[row] = step
        self._n = max(self._n, step + 1)
        stale = (self._x >= 0) & (self._x <= self._n - 1 - self.window)  # before a gap
        if bool(stale.any()):
            self._sums[stale] = 0.0
            self._counts[stale] = 0
            self._x[stale] = -1

    def _empty(self, D: int) -> tuple[Tensor, Tensor]:
        return torch.zeros(D, dtype=torch.float64), torch.zeros(D, dtype=torch.bool)

    def values(self, num_domains: int) -> tuple[Tensor, Tensor]:
        """Windowed mean per domain; 0 and not observed where the window holds no response."""
        if self._sums is None:
            return self._empty(num_domains)
        n = self._counts.sum(0)
        return self._sums.sum(0) / n.clamp(min=1), n > 0

    def state_dict(self) -> dict:
        """A snapshot (copies): later observations do not change a saved state."""
        return {
            "n": self._n,
            **{
                k: None if v is None else v.clone()
                for k, v in (("sums", self._sums), ("counts", self._counts), ("x", self._x))
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self._n = int(state["n"])
        for k in ("sums", "counts", "x"):
            v = state[k]
            setattr(self, f"_{k}", None if v is None else v.clone())


@SCORERS.register("domain_reward")
@dataclass
class DomainReward(WindowedDomainScorer):
    """Windowed mean reward of each domain (reward_gap's signal)."""

    def per_response(self, batch: RolloutBatch) -> Tensor:
        return clean_rewards(batch)


@SCORERS.register("domain_advantage_magnitude")
@dataclass
class DomainAdvantageMagnitude(WindowedDomainScorer):
    """Windowed mean |advantage| of each domain's responses (DUMP's expected learnability).

    |A| of a response is mean |A_t| over its tokens (`scorers.policy.advantage_magnitude`).
    """

    requires: ClassVar[tuple[str, ...]] = ("advantages",)
    paper: ClassVar[str] = "Wang et al. 2025, DUMP"

    def per_response(self, batch: RolloutBatch) -> Tensor:
        from dataflex_rl.scorers.policy import advantage_magnitude

        return advantage_magnitude(batch, "domain_advantage_magnitude")

    def counted(self, batch: RolloutBatch) -> Tensor:
        """Active responses with at least one token: |A| of an empty response is undefined
        (it is not averaged in as a 0)."""
        return batch.active_mask & (batch.response_length > 0)


@SCORERS.register("learning_progress")
@dataclass
class LearningProgress(WindowedDomainScorer):
    """Learning progress: slope of each domain's per-step mean reward over the window.

    Least-squares slope against the step index, using only the steps where the domain had
    responses; |slope| by default (progress or forgetting both deserve practice),
    max(slope, 0) with ``signed``. Domains with fewer than two such steps: 0, not observed.
    """

    paper: ClassVar[str] = "Matiisen et al. 2017, Teacher-Student Curriculum Learning"
    signed: bool = param(False, "reward only improvement (max(slope, 0)) instead of |slope|")

    def per_response(self, batch: RolloutBatch) -> Tensor:
        return clean_rewards(batch)

    def values(self, num_domains: int) -> tuple[Tensor, Tensor]:
        if self._sums is None:
            return self._empty(num_domains)
        m = (self._counts > 0) & (self._x >= 0)[:, None]  # [W, D] points
        w = m.to(torch.float64)
        y = self._sums / self._counts.clamp(min=1)
        x = self._x.to(torch.float64)[:, None].expand_as(y)
        npts = w.sum(0)
        xm = (w * x).sum(0) / npts.clamp(min=1)
        ym = (w * y).sum(0) / npts.clamp(min=1)
        sxx = (w * (x - xm) ** 2).sum(0)
        sxy = (w * (x - xm) * (y - ym)).sum(0)
        ok = (npts >= 2) & (sxx > 0)
        slope = torch.where(ok, sxy / sxx.clamp(min=1e-12), torch.zeros_like(sxy))
        progress = slope.clamp(min=0) if self.signed else slope.abs()
        return progress, ok
