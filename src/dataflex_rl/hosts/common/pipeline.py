"""Asynchronous training's queue of finished groups (`Driver.step` with a `GenerationQueue`).

The generator runs up to ``depth`` (k) batches ahead of the update: each step it generates
until the queue holds (k + 1) x n groups, each batch with the policy of that step (its
*version*). A group *finishes* at its batch's generator clock plus k x (its longest
response / the response budget): long answers finish later, as in a rollout server that
returns a group when its last response ends. The update of step s takes the n queued groups
that finished first (ties: the earlier batch, then the group's order) and trains on them;
their staleness is s - version. With k = 0 the queue holds the step's own batch only: the
synchronous step. Needs no host library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from dataflex_rl.core.segment import segment_max
from dataflex_rl.hosts.common.step import Generation


@dataclass
class Queued:
    """One generated batch in the queue: its `Generation`, the policy version (step) that
    generated it, its batch number on the generator's clock, each group's finish time and
    which of its groups are taken."""

    generation: Generation
    version: int
    clock: int
    finish: Tensor  # [G] float64
    taken: Tensor  # [G] bool


class GenerationQueue:
    """The generated groups not yet trained on (asynchronous training, ``depth`` k >= 1).

    ``max_tokens``: the response budget a finish time is measured against.
    """

    def __init__(self, depth: int, max_tokens: int) -> None:
        if depth < 1:
            raise ValueError("GenerationQueue: depth (staleness k) must be >= 1")
        self.depth = int(depth)
        self.max_tokens = int(max_tokens)
        self.batches: list[Queued] = []
        self.clock = 0  # batches generated so far

    @property
    def groups(self) -> int:
        """Queued groups not yet taken."""
        return sum(int((~q.taken).sum()) for q in self.batches)

    def push(self, generation: Generation, version: int) -> Queued:
        """Queue a generated batch of policy ``version``; its groups' finish times follow
        their longest response."""
        b = generation.batch
        longest = segment_max(
            (b.response_length * b.active_mask).to(torch.float64),
            b.group_ids,
            b.num_groups,
            empty=0.0,
        )
        finish = self.clock + self.depth * longest.clamp(max=self.max_tokens) / self.max_tokens
        taken = torch.zeros(finish.shape, dtype=torch.bool)
        q = Queued(generation, int(version), self.clock, finish, taken)
        self.batches.append(q)
        self.clock += 1
        return q

    def take(self, n: int) -> list[tuple[Queued, int]]:
        """The (batch, group) of the ``n`` queued groups that finished first (ties: the
        earlier batch, then the group's order), marked taken, in that order."""
        if not self.batches:
            return []
        finish = torch.cat([q.finish for q in self.batches])
        free = ~torch.cat([q.taken for q in self.batches])
        owner = torch.cat(
            [torch.full_like(q.taken, i, dtype=torch.int64) for i, q in enumerate(self.batches)]
        )
        group = torch.cat([torch.arange(q.taken.numel()) for q in self.batches])
        idx = free.nonzero().squeeze(1)  # in (batch, group) order: a stable sort keeps it
        idx = idx[torch.sort(finish[idx], stable=True).indices][:n]
        out = [(self.batches[i], g) for i, g in zip(owner[idx].tolist(), group[idx].tolist())]
        for q, g in out:
            q.taken[g] = True
        return out

    def drop_done(self) -> None:
        """Forget the batches whose every group is taken."""
        self.batches = [q for q in self.batches if not bool(q.taken.all())]

    # ------------------------------------------------------------------ state
    def state_dict(self, encode: Callable[[Generation], dict]) -> dict:
        """The queue, its generations written by the host's ``encode`` (its rows, items)."""
        return {
            "depth": self.depth,
            "clock": self.clock,
            "batches": [
                {
                    "version": q.version,
                    "clock": q.clock,
                    "finish": q.finish.clone(),
                    "taken": q.taken.clone(),
                    "tokens": float(q.generation.tokens),
                    "seconds": float(q.generation.seconds),
                    "score_seconds": float(q.generation.score_seconds),
                    "domain_ids": list(q.generation.domain_ids or []),
                    "generation": encode(q.generation),
                }
                for q in self.batches
            ],
        }

    def load_state_dict(self, state: dict, decode: Callable[[dict, int, list], Generation]) -> None:
        """Restore `state_dict` output; ``decode(encoded, version, domain_ids)`` rebuilds a
        generation (its items and domain ids set)."""
        if int(state["depth"]) != self.depth:
            raise ValueError(
                f"checkpoint queue has staleness {state['depth']}, this run {self.depth}"
            )
        self.clock = int(state["clock"])
        self.batches = []
        for b in state["batches"]:
            gen = decode(b["generation"], int(b["version"]), list(b["domain_ids"]))
            gen.tokens, gen.seconds = float(b["tokens"]), float(b["seconds"])
            gen.score_seconds = float(b["score_seconds"])
            self.batches.append(
                Queued(
                    gen,
                    int(b["version"]),
                    int(b["clock"]),
                    b["finish"].clone(),
                    b["taken"].clone().to(torch.bool),
                )
            )
