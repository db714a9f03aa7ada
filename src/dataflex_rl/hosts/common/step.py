"""One training step's data lifecycle, written once for every host (`Driver.step`).

draw -> pre-rollout skip and audit -> generate -> refill rounds -> assemble the groups the
update trains on -> observe every generated group -> decide -> log. A host supplies two
things (`StepHost`): how it generates and scores a list of prompts, and how it takes chosen
groups out of its generations' rows (a layout primitive: which groups, and in what order,
is decided here). Its update then trains on (`StepResult.rows`, `StepResult.decision`).

**Observe vs decide** (docs/concepts.md#observe-and-decide): what the strategy *learns from*
(the prompt history, mixing signals and drawn counts, the skip policy) is every group the
step generated, the groups the selector dropped and the refill groups past the last one the
step needs included; what it *decides on* (select, tokens, reweight: the loss) is the
assembled batch (`assemble_groups`). Audited prompts are observed by the skip policy alone
(`Strategy.observe_audit`). Needs no host library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.strategy import Decision

#: the ``round`` a host's `StepHost.generate` gets for the prompts a step audits (skipped,
#: generated anyway, observed by the skip policy, not trained on)
AUDIT = -1


@dataclass
class Generation:
    """What a host generated and scored for a list of prompts (one round of a step).

    Attributes:
        batch: the strategy's view of it (every process's rows: one group per prompt, in the
            order of the prompts given).
        rows: the host's own rows of it (anything its `StepHost.assemble` takes).
        tokens: response tokens generated (the round's generation cost).
        seconds: seconds spent generating (the saved-time estimate reads it).
        score_seconds: seconds spent scoring (reported only).
        items, domain_ids: the prompts generated and their domain ids (set by the driver).
    """

    batch: RolloutBatch
    rows: Any = None
    tokens: float = 0.0
    seconds: float = 0.0
    score_seconds: float = 0.0
    items: list = field(default_factory=list)
    domain_ids: list[int] | None = None


class StepHost(Protocol):
    """What a host writes for `Driver.step`: generation and the layout of its rows.

    ``group_size``: the responses a prompt gets (G; what ``rollouts.mode: allocate``
    shares out, G x prompts in all, and the size of ``until_signal``'s balanced subsets).
    """

    group_size: int

    def generate(
        self,
        items: list,
        domain_ids: list[int] | None,
        round: int,
        counts: Tensor | None = None,
    ) -> Generation:
        """Generate and score ``items`` (0: the step's first generation, r >= 1: refill or
        ``until_signal`` round r, `AUDIT`: audited prompts); ``counts`` [len(items)] the
        responses each item gets (None: ``group_size`` each; only with ``rollouts.mode:
        allocate``: a host that cannot generate uneven groups refuses that mode up front).
        Returns the `Generation` (its ``batch`` holds one group per item, in order; a
        prompt generated again in the step gets new samples)."""
        ...

    def assemble(
        self,
        generations: Sequence[Generation],
        rows: Tensor,
        group_ids: Tensor,
        items: list,
        domain_ids: list[int] | None,
    ) -> tuple[Any, RolloutBatch]:
        """The rows the update trains on and the `RolloutBatch` the strategy decides on:
        ``rows`` [R] indexes the step's generated responses (its generations' batch rows, in
        order), ``group_ids`` [R] the assembled group of each (0..n-1, each group's rows
        together, groups in order; a group may mix rounds); ``items`` / ``domain_ids``: the
        n groups' prompts. The host recomputes each assembled group's advantages as it
        computes them. With one generation and ``rows`` all of its rows in order, the
        generation's rows as they are."""
        ...


@dataclass
class StepResult:
    """One step's outcome (`Driver.step`).

    Attributes:
        rows, batch: the assembled rows and the batch decided on (`StepHost.assemble`).
        decision: the strategy's `Decision` on ``batch``.
        metrics: the strategy's and the driver's figures for the step (draws, refill,
            audits, decision, ``dataflex/strategy_warnings``).
        generations: the step's generations: the first, then each refill round's.
        groups: [n] the generated group each of ``batch``'s groups is (`assemble_groups`).
        audit: the audited prompts' generation (None: none audited).
    """

    rows: Any
    batch: RolloutBatch
    decision: Decision
    metrics: dict[str, float]
    generations: list[Generation]
    groups: Tensor
    audit: Generation | None = None

    @property
    def tokens(self) -> float:
        """Tokens generated for training (first generation and refill rounds)."""
        return float(sum(g.tokens for g in self.generations))

    @property
    def audit_tokens(self) -> float:
        return 0.0 if self.audit is None else float(self.audit.tokens)

    @property
    def prompts_generated(self) -> int:
        """Prompts generated for training (first generation and refill rounds)."""
        return sum(g.batch.num_groups for g in self.generations)


def assemble_groups(kept: Sequence[Tensor], taken: Sequence[int]) -> Tensor:
    """[n] the step's assembled groups, as indices into its generated groups (the
    generations' groups in order).

    ``kept``: for each generation, [its G] bool the groups its selector keeps
    (`Strategy.groups_kept`); ``taken``: for each refill round, how many of its leading
    groups the step uses (`run_refill`). The rule: slot g of the first generation holds its
    group when kept; the k-th dropped slot takes the k-th kept refill group, in round order,
    while there are any; refill groups left over once every dropped slot is filled (a first
    generation cut short by pre-rollout skips) follow in order; slots left without a refill
    keep their dropped group. So the step trains on max(first G, kept) groups, every refill
    group it holds is kept, and without refill rounds the assembly is the first generation.
    """
    first = kept[0]
    S = first.shape[0]
    group = torch.arange(S)
    sizes = [int(k.shape[0]) for k in kept]
    offsets = torch.tensor([0, *sizes]).cumsum(0).tolist()
    refills = [
        offsets[r] + k[:use].nonzero().squeeze(1)
        for r, (k, use) in enumerate(zip(kept[1:], taken, strict=True), start=1)
    ]
    fill = torch.cat(refills) if refills else torch.zeros(0, dtype=torch.int64)
    dropped = (~first).nonzero().squeeze(1)
    k = min(dropped.numel(), fill.numel())
    group[dropped[:k]] = fill[:k]
    return torch.cat([group, fill[k:]])


def group_rows(batches: Sequence[RolloutBatch], groups: Tensor) -> tuple[Tensor, Tensor]:
    """(rows [R], group_ids [R]) of `StepHost.assemble` for whole generated groups: the rows
    of ``groups`` (distinct indices over the ``batches``' groups in order) in that order,
    each group's rows in row order, as indices over the batches' rows in order."""
    offsets = torch.tensor([0] + [b.num_groups for b in batches[:-1]]).cumsum(0).tolist()
    gid = torch.cat([b.group_ids + o for b, o in zip(batches, offsets)])
    total = sum(b.num_groups for b in batches)
    pos = torch.full((total,), -1, dtype=torch.int64)
    pos[groups] = torch.arange(groups.numel())
    of_row = pos[gid]
    idx = (of_row >= 0).nonzero().squeeze(1)
    rows = idx[torch.sort(of_row[idx], stable=True).indices]
    return rows, of_row[rows]


def take_rows(batch: RolloutBatch, rows: Tensor, group_ids: Tensor) -> RolloutBatch:
    """The rows ``rows`` of ``batch`` as a batch whose groups are ``group_ids`` (dense); each
    row keeps its fields as they are (its advantages too), micro-batch ids are dropped."""

    def pick(name: str):
        v = getattr(batch, name)
        return None if v is None else v[rows]

    keys = batch.prompt_keys
    return RolloutBatch(
        rewards=batch.rewards[rows],
        response_mask=batch.response_mask[rows],
        group_ids=group_ids,
        domain_ids=pick("domain_ids"),
        domains=batch.domains,
        advantages=pick("advantages"),
        old_log_probs=pick("old_log_probs"),
        prompt_keys=None if keys is None else tuple(keys[i] for i in rows.tolist()),
        is_padding=pick("is_padding"),
        step=batch.step,
        response_advantages=pick("response_advantages"),
        response_lengths=pick("response_lengths"),
        entropies=pick("entropies"),
        staleness=pick("staleness"),
    )


def concat_batches(batches: Sequence[RolloutBatch]) -> RolloutBatch:
    """One `RolloutBatch` of several of one step (its generations), groups in order; token
    fields right-padded to the widest; an optional field is kept only when every batch has
    it (micro-batch ids never: they describe one generation's layout)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    T = max(int(b.response_mask.shape[1]) for b in batches)

    def pad(t: Tensor) -> Tensor:
        return torch.nn.functional.pad(t, (0, T - t.shape[1]))

    def joined(name: str, token: bool = False):
        values = [getattr(b, name) for b in batches]
        if any(v is None for v in values):
            return None
        return torch.cat([pad(v) if token else v for v in values])

    offsets = torch.tensor([0] + [b.num_groups for b in batches[:-1]]).cumsum(0).tolist()
    keys = [b.prompt_keys for b in batches]
    return RolloutBatch(
        rewards=torch.cat([b.rewards for b in batches]),
        response_mask=joined("response_mask", True),
        group_ids=torch.cat([b.group_ids + o for b, o in zip(batches, offsets)]),
        domain_ids=joined("domain_ids"),
        domains=first.domains,
        advantages=joined("advantages", True),
        old_log_probs=joined("old_log_probs", True),
        prompt_keys=None if any(k is None for k in keys) else sum(keys, ()),
        is_padding=(
            None
            if all(b.is_padding is None for b in batches)
            else torch.cat(
                [
                    b.is_padding
                    if b.is_padding is not None
                    else torch.zeros(b.batch_size, dtype=torch.bool)
                    for b in batches
                ]
            )
        ),
        step=first.step,
        response_advantages=joined("response_advantages"),
        response_lengths=joined("response_lengths"),
        entropies=joined("entropies", True),
        staleness=joined("staleness"),
    )
