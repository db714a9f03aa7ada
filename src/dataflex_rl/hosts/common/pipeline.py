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
from typing import Any

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
    kept: Tensor | None = None  # [G] bool the groups a refilling selector keeps (None: all)


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
        #: (item, domain id) of the prompts admission dropped, drawn again first
        self.requeue: list[tuple] = []
        #: [D] groups trained on per domain so far, and the last step each had one (-1: never)
        self.admitted = torch.zeros(0, dtype=torch.int64)
        self.last = torch.zeros(0, dtype=torch.int64)

    @property
    def groups(self) -> int:
        """Queued groups not yet taken."""
        return sum(int((~q.taken).sum()) for q in self.batches)

    def push(self, generation: Generation, version: int, kept: Tensor | None = None) -> Queued:
        """Queue a generated batch of policy ``version``; its groups' finish times follow
        their longest response; ``kept``: [G] the groups a refilling selector keeps."""
        b = generation.batch
        longest = segment_max(
            (b.response_length * b.active_mask).to(torch.float64),
            b.group_ids,
            b.num_groups,
            empty=0.0,
        )
        finish = self.clock + self.depth * longest.clamp(max=self.max_tokens) / self.max_tokens
        taken = torch.zeros(finish.shape, dtype=torch.bool)
        q = Queued(generation, int(version), self.clock, finish, taken, kept)
        self.batches.append(q)
        self.clock += 1
        return q

    def _free(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The queued groups not taken, in (batch, group) order: ([F] finish, [F] owner
        batch index, [F] group, [F] version, [F] domain id (0 without domains), [F] kept by
        a refilling selector)."""
        finish = torch.cat([q.finish for q in self.batches])
        free = ~torch.cat([q.taken for q in self.batches])
        owner = torch.cat(
            [torch.full_like(q.taken, i, dtype=torch.int64) for i, q in enumerate(self.batches)]
        )
        group = torch.cat([torch.arange(q.taken.numel()) for q in self.batches])
        version = torch.cat(
            [torch.full_like(q.taken, q.version, dtype=torch.int64) for q in self.batches]
        )
        dom = torch.cat(
            [
                torch.tensor(q.generation.domain_ids or [0] * q.taken.numel(), dtype=torch.int64)
                for q in self.batches
            ]
        )
        kept = torch.cat(
            [torch.ones_like(q.taken) if q.kept is None else q.kept for q in self.batches]
        )
        idx = free.nonzero().squeeze(1)
        return finish[idx], owner[idx], group[idx], version[idx], dom[idx], kept[idx]

    def stale_domains(self, step: int, limits: Tensor) -> Tensor:
        """[D] bool: the domains with a queued group past its limit at ``step`` (staleness
        step - version > ``limits`` [D])."""
        out = torch.zeros(limits.shape[0], dtype=torch.bool)
        if self.batches:
            _, _, _, version, dom, _ = self._free()
            stale = (step - version) > limits[dom]
            out[dom[stale]] = True
        return out

    def take(
        self,
        n: int,
        step: int | None = None,
        limits: Tensor | None = None,
        past: str = "drop",
    ) -> tuple[list[tuple[Queued, int]], list[tuple[Queued, int]], list[tuple[Queued, int]]]:
        """(taken, dropped, discarded): the (batch, group) of the ``n`` queued groups that
        finished first (ties: the earlier batch, then the group's order), marked taken, in
        that order. With ``limits`` ([D] per domain; admission) a group whose staleness at
        ``step`` exceeds its domain's limit is, with ``past`` ``drop``, dropped (marked
        taken, returned as dropped; every such group in the queue), with ``pace`` taken
        before the others. Groups a refilling selector drops (``kept`` at `push`) that
        finished before the ``n``-th kept one are discarded (marked taken: observed, not
        trained on)."""
        if not self.batches:
            return [], [], []
        finish, owner, group, version, dom, kept = self._free()
        order = torch.sort(finish, stable=True).indices  # (batch, group) order breaks ties
        drop = torch.zeros(0, dtype=torch.int64)
        if limits is not None:
            stale = ((step - version) > limits[dom])[order]
            if past == "drop":
                drop, order = order[stale], order[~stale]
            else:  # pace: the stale ones first, each side in finish order
                order = torch.cat([order[stale], order[~stale]])
        k = kept[order]
        cum = k.cumsum(0)
        cut = int((cum >= n).nonzero()[0]) + 1 if n > 0 and int(cum[-1:].sum()) >= n else len(order)
        if n == 0:
            cut = 0
        head = order[:cut]
        pick, gone = head[k[:cut]], head[~k[:cut]]

        def pairs(idx: Tensor) -> list[tuple[Queued, int]]:
            out = [(self.batches[i], g) for i, g in zip(owner[idx].tolist(), group[idx].tolist())]
            for q, g in out:
                q.taken[g] = True
            return out

        return pairs(pick), pairs(drop), pairs(gone)

    def count(self, domain_ids: Tensor, step: int, num_domains: int) -> Tensor:
        """Count the groups trained on at ``step`` (``domain_ids`` [n]); returns [D] their
        count per domain."""
        if self.admitted.numel() != num_domains:
            self.admitted = torch.zeros(num_domains, dtype=torch.int64)
            self.last = torch.full((num_domains,), -1, dtype=torch.int64)
        counts = torch.bincount(domain_ids, minlength=num_domains)
        self.admitted += counts
        self.last = torch.where(counts > 0, torch.full_like(self.last, step), self.last)
        return counts

    def drop_done(self) -> None:
        """Forget the batches whose every group is taken."""
        self.batches = [q for q in self.batches if not bool(q.taken.all())]

    # ------------------------------------------------------------------ state
    def state_dict(
        self, encode: Callable[[Generation], dict], encode_item: Callable[[Any], Any]
    ) -> dict:
        """The queue, its generations written by the host's ``encode`` (its rows, items)
        and the prompts to draw again by ``encode_item``."""
        return {
            "depth": self.depth,
            "clock": self.clock,
            "requeue": [[encode_item(i), int(d)] for i, d in self.requeue],
            "admitted": self.admitted.clone(),
            "last": self.last.clone(),
            "batches": [
                {
                    "version": q.version,
                    "clock": q.clock,
                    "finish": q.finish.clone(),
                    "taken": q.taken.clone(),
                    "kept": None if q.kept is None else q.kept.clone(),
                    "tokens": float(q.generation.tokens),
                    "seconds": float(q.generation.seconds),
                    "score_seconds": float(q.generation.score_seconds),
                    "domain_ids": list(q.generation.domain_ids or []),
                    "generation": encode(q.generation),
                }
                for q in self.batches
            ],
        }

    def load_state_dict(
        self,
        state: dict,
        decode: Callable[[dict, int, list], Generation],
        decode_item: Callable[[Any], Any],
    ) -> None:
        """Restore `state_dict` output; ``decode(encoded, version, domain_ids)`` rebuilds a
        generation (its items and domain ids set), ``decode_item`` a prompt."""
        if int(state["depth"]) != self.depth:
            raise ValueError(
                f"checkpoint queue has staleness {state['depth']}, this run {self.depth}"
            )
        self.clock = int(state["clock"])
        self.requeue = [(decode_item(i), int(d)) for i, d in state["requeue"]]
        self.admitted = state["admitted"].to(torch.int64).clone()
        self.last = state["last"].to(torch.int64).clone()
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
                    None if b["kept"] is None else b["kept"].clone().to(torch.bool),
                )
            )
