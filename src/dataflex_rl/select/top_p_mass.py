"""Keep the fewest groups that carry a share ``p`` of the batch's score mass (top-p by mass)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import segment_max


def group_masses(scores: Tensor, batch: RolloutBatch) -> Tensor:
    """[G] float64: each group's score (broadcast to its rows) read on its active rows; 0 for
    a group without an active response."""
    G = batch.num_groups
    active = batch.active_mask
    s = scores.to(torch.float64)
    return segment_max(torch.where(active, s, -torch.inf), batch.group_ids, G, 0.0).where(
        batch.group_size > 0, 0.0
    )


def top_p_groups(mass: Tensor, p: float) -> Tensor:
    """[G] bool: the fewest groups whose mass reaches ``p`` of the total, taken in decreasing
    mass, equal masses in increasing group id. A group is kept when the mass of the groups
    before it in that order is below ``p`` x total (so the kept prefix is the shortest whose
    sum reaches it); a group of mass 0 is never kept. The total is the last partial sum of the
    same float64 running sum, so ``p: 1`` keeps exactly the groups of positive mass."""
    G = mass.shape[0]
    keep = torch.zeros(G, dtype=torch.bool)
    if G == 0:
        return keep
    order = torch.sort(-mass, stable=True).indices  # descending; ties: lower group id first
    m = mass.index_select(0, order)
    running = m.cumsum(0)
    before = torch.cat([running.new_zeros(1), running[:-1]])
    threshold = p * float(running[-1])
    keep[order] = (before < threshold) & (m > 0)
    return keep


@SELECTORS.register("top_p_mass")
@dataclass
class TopPMass(Selector):
    """``top_p_mass`` (preset ``ragen_snr``): the fewest groups holding ``p`` of the score mass.

    A group's mass is its group-level score (the default scorer ``reward_variance``: the
    unbiased variance of its rewards, RAGEN-2's reward variance). Groups are taken in
    decreasing mass, equal masses in increasing group id (hosts number groups in the order
    they come), until the kept mass reaches ``p`` x the batch's total mass: a group is kept
    when the groups before it hold less than that. Whole groups are kept or dropped; the
    advantages are not recomputed (a kept group is kept whole).

    Edges: a group of mass 0 (all rewards equal, a single response) is never kept, even at
    ``p: 1`` (which keeps exactly the groups of positive mass), and a batch whose total mass
    is 0 keeps nothing: the step's update is empty (`StrategyWarning`, ``all_dropped``), as
    the paper authors' filter drops an all-zero-variance batch. A group without an active
    response (padding, invalid rewards) has mass 0. Masses are summed in float64; a score
    below 0 or not finite on an active row is an error.

    The kept set depends on the other groups of the batch, so it is refused with ``refill``
    (refilling counts the groups a selector keeps from their own outcomes), as
    ``top_fraction`` is. The paper authors' implementations also take a small
    ``selection_eps`` off the target mass; here the target is exactly ``p`` x total.

    Stateless (nothing to checkpoint). In the decision log: ``keep`` (whole groups),
    ``weight`` 1 or 0, ``decision_advantage`` null; replay re-decides it exactly from the
    logged rewards.
    """

    accepts: ClassVar[frozenset[str]] = frozenset({"group"})
    group_based: ClassVar[bool] = True
    default_scorer: ClassVar[str | None] = "reward_variance"
    paper: ClassVar[str] = (
        "Wang et al. 2026, RAGEN-2: Reasoning Collapse in Agentic RL (arXiv 2604.06268), "
        "SNR-aware filtering"
    )
    p: float = param(
        0.9, "share of the batch's total score mass the kept groups reach", gt=0.0, le=1.0
    )

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        if batch.batch_size == 0:
            return torch.zeros(0, dtype=torch.bool)
        active = batch.active_mask
        s = scores.to(torch.float64)
        bad = active & ~(torch.isfinite(s) & (s >= 0))
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise ValueError(
                f"top_p_mass: a group's mass must be finite and >= 0; group "
                f"{int(batch.group_ids[i])} has score {float(s[i])} (use a scorer of "
                "non-negative group scores such as reward_variance)"
            )
        kept = top_p_groups(group_masses(s, batch), self.p)
        return kept.index_select(0, batch.group_ids) & active
