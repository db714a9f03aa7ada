"""Refill (dynamic sampling, DAPO): replace the groups a strategy's selector drops.

Each round draws as many prompts as kept groups are missing through the driver's intake,
the host generates and scores them, until the step holds ``n`` kept groups or
``refill.max_rounds`` ran. `Driver.step` runs the rounds, assembles the groups the update
trains on and observes every group generated (`dataflex_rl.hosts.common.step`). Needs no host
library.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch

REFILL = "dataflex/refill/"

#: a generation for a refill round: (items, their domain ids, round >= 1) -> the round's
#: scored `RolloutBatch` (its groups are the items, in order)
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
) -> tuple[list[RolloutBatch], list[int], list[Tensor], dict[str, float]]:
    """The refill rounds of one step.

        Each round draws ``n - kept`` prompts (with ``refill.overdraw``: ``ceil(missing x
        generated / kept)``, at most ``n``), rounded up to a multiple of ``granule``. A round that
        fills the step is used up to its ``n``-th kept group (`Driver.step` reports the groups
    generated and not trained on as ``dataflex/refill/discarded``).

        Args:
            strategy: the `Strategy` (``refill_rounds`` > 0; its ``groups_kept``).
            draw: ``draw(k) -> (items, domain ids)``, k new prompts from the intake (the host's
                `Driver.draw` for this step); fewer (or none) when the intake has no more.
            n: kept groups the step wants (``prompts_per_step``).
            first: the step's first generation, scored.
            generate: the host's generation of a round (`Generate`).
            granule: each round draws a multiple of this many prompts (a host whose processes
                must generate equal shares).

        Returns:
            (the refill rounds' batches, in order; how many leading groups of each the step
            trains on; the ``dataflex/refill/`` metrics, docs/metrics.md).
    """
    kept_first = strategy.groups_kept(first)
    masks = [kept_first]
    kept = int(kept_first.sum())
    signal = int((kept_first & (first.group_std > 0)).sum())
    zero, groups = zero_variance(first)
    batches: list[RolloutBatch] = []
    taken: list[int] = []
    drawn = 0
    while kept < n and len(batches) < strategy.refill_rounds:
        missing = n - kept
        want = missing
        if strategy.refill_overdraw:
            want = min(math.ceil(missing * groups / kept), n) if kept else n
        items, domain_ids = draw(math.ceil(want / granule) * granule)
        if not items:
            break
        batch = generate(items, domain_ids, len(batches) + 1)
        k = strategy.groups_kept(batch)
        masks.append(k)
        use = int(k.shape[0])
        if int(k.sum()) >= missing:  # the missing-th kept group ends what the step uses
            use = int((k.cumsum(0) == missing).nonzero()[0]) + 1
            k = k[:use]
        batches.append(batch)
        taken.append(use)
        drawn += len(items)
        present = batch.group_size > 0
        kept += int(k.sum())
        signal += int((k & (batch.group_std[:use] > 0)).sum())
        groups += int(present.sum())
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
    return batches, taken, masks, metrics
