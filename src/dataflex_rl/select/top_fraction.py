"""Keep the top fraction of responses (or groups) by score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import lexsort, round_half_up, segment_count, segment_moments


@SELECTORS.register("top_fraction")
@dataclass
class TopFraction(Selector):
    """``top_fraction`` (preset ``topk``): keep the ``fraction`` of responses scoring highest.

    The count is ``fraction`` of the active responses, rounded half up.

    With ``by_group`` whole groups are ranked by their mean response score and the top
    ``fraction`` of groups kept.

    Ties: scores are compared in float64 (``advantage_magnitude`` is float64, group means come
    from `segment_moments`, so equal tokens or a constant group give exactly equal scores) and
    equal scores go to the lower index (row index, or group id with ``by_group``): the kept set
    is deterministic and never depends on float rounding or sort instability.
    """

    default_scorer: ClassVar[str | None] = "advantage_magnitude"
    fraction: float = param(0.5, "fraction of responses (or groups) kept", gt=0.0, le=1.0)
    by_group: bool = param(False, "rank whole groups by mean score instead of responses")

    @property
    def group_based(self) -> bool:  # type: ignore[override]
        return self.by_group

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        active = batch.active_mask
        if self.by_group:
            G = batch.num_groups
            n = segment_count(active, batch.group_ids, G)
            mean, _, _ = segment_moments(scores, batch.group_ids, G, active)  # float64
            return self._top(mean, n > 0).index_select(0, batch.group_ids)
        return self._top(scores.to(torch.float64), active)

    def _top(self, score: Tensor, eligible: Tensor) -> Tensor:
        k = int(
            round_half_up(torch.tensor(self.fraction * int(eligible.sum()), dtype=torch.float64))
        )
        # descending by score, eligible first, ties by index (stable sorts)
        key = torch.where(eligible, -score, torch.full_like(score, float("inf")))
        order = lexsort(key, (~eligible).to(torch.int8))
        keep = torch.zeros_like(eligible)
        keep[order[:k]] = True
        return keep & eligible
