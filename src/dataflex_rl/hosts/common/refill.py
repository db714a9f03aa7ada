"""Refill (dynamic sampling, DAPO): replace the groups a strategy's selector drops.

After a step's first generation, the host scores the groups and asks the selector which it
keeps (`Strategy.groups_kept`). Each refill round draws as many new prompts as kept groups are
missing through the driver's intake (so the mix proportions and the pre-rollout skip policy
apply to them as to any draw), the host generates and scores them, and the loop goes on
until the step holds ``n`` kept groups or ``refill.max_rounds`` rounds ran; the step then
trains on what it has, and the metrics say how short it is. The host decides once, on every
group it generated in the step (dropped groups included: the prompt history and the mixing
signals see every outcome, and replaying the decision log re-keeps the same groups).

Needs no host library; the host passes its generation as a function.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from dataflex_rl.core.batch import RolloutBatch

REFILL = "dataflex/refill/"

#: a host's generation for a refill round: (items, their domain ids, round >= 1) -> the
#: round's scored `RolloutBatch` (its groups are the items, in order)
Generate = Callable[[list, list[int], int], RolloutBatch]


def zero_variance(batch: RolloutBatch) -> tuple[int, int]:
    """(groups whose active rewards are all equal, groups with an active response)."""
    present = batch.group_size > 0
    return int(((batch.group_std == 0) & present).sum()), int(present.sum())


def run_refill(
    strategy,
    draw: Callable[[int], tuple[list, list[int]]],
    n: int,
    first: RolloutBatch,
    generate: Generate,
    granule: int = 1,
) -> tuple[list[RolloutBatch], dict[str, float]]:
    """The refill rounds of one step.

    Args:
        strategy: the `Strategy` (``refill_rounds`` > 0; its ``groups_kept``).
        draw: ``draw(k) -> (items, domain ids)``, k new prompts from the intake (the host's
            `Driver.draw` for this step); fewer (or none) when the intake has no more.
        n: kept groups the step wants (``prompts_per_step``).
        first: the step's first generation, scored.
        generate: the host's generation of a round (`Generate`).
        granule: each round draws a multiple of this many prompts (a host whose processes
            must generate equal shares); the rounds may then keep more than ``n`` groups, and
            the host trains on the first ``n``.

    Returns:
        (the refill rounds' batches, in order; metrics under ``dataflex/refill/``):
        ``rounds`` (refill rounds run), ``prompts_drawn`` (their prompts), ``groups_kept``
        (kept groups over all rounds, at most ``n``), ``missing`` (``n`` minus that),
        ``full`` (1 when the step reached ``n`` kept groups), ``groups_generated`` (groups
        generated in the step), ``overgeneration`` (that / ``n``), ``zero_variance_before``
        (zero-variance share of the first generation's groups) and ``zero_variance_after``
        (share of the step's ``n`` slots without a kept group that has signal).
    """
    kept_first = strategy.groups_kept(first)
    kept = int(kept_first.sum())
    signal = int((kept_first & (first.group_std > 0)).sum())
    zero, groups = zero_variance(first)
    batches: list[RolloutBatch] = []
    drawn = 0
    while kept < n and len(batches) < strategy.refill_rounds:
        want = math.ceil((n - kept) / granule) * granule
        items, domain_ids = draw(want)
        if not items:
            break
        batch = generate(items, domain_ids, len(batches) + 1)
        batches.append(batch)
        drawn += len(items)
        k = strategy.groups_kept(batch)
        kept += int(k.sum())
        signal += int((k & (batch.group_std > 0)).sum())
        groups += int((batch.group_size > 0).sum())
    metrics = {
        REFILL + "rounds": float(len(batches)),
        REFILL + "prompts_drawn": float(drawn),
        REFILL + "groups_kept": float(min(kept, n)),
        REFILL + "missing": float(max(n - kept, 0)),
        REFILL + "full": float(kept >= n),
        REFILL + "groups_generated": float(groups),
        REFILL + "overgeneration": groups / n if n else 0.0,
        REFILL + "zero_variance_before": zero / max(int((first.group_size > 0).sum()), 1),
        REFILL + "zero_variance_after": 1.0 - min(signal, n) / n if n else 0.0,
    }
    return batches, metrics


def first_kept_groups(kept_per_group: torch.Tensor, n: int) -> torch.Tensor:
    """[G] bool: the first ``n`` kept groups in order (what a host that over-drew trains
    on)."""
    return kept_per_group & (kept_per_group.cumsum(0) <= n)
