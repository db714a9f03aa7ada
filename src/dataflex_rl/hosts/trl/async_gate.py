"""The dataflex step inside TRL 1.16's ``AsyncGRPOTrainer``: a gate on its rollout queue.

``AsyncGRPOTrainer`` trains on `RolloutSample`s its rollout worker pushes onto a queue, one
completion at a time (``RolloutQueueDataset`` pulls them). `GroupGate` stands between the
worker's queue and that dataset: it buffers samples by group (``group_id``) until a group holds
``num_generations`` samples, takes whole groups as `Driver.step`'s stream (``source``: the
update's ``n`` groups, then each refill round's), records each group's staleness (the trainer's
policy version minus the sample's), decides on the assembled groups and hands on only the
samples that stay in the loss, their advantages times the strategy's weights. Admission
(``past: drop``) and TRL's own ``max_staleness`` drop a stale group whole before the strategy
sees it. Needs no TRL: samples are handled as dataclasses (``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.hosts.common.config import acts_on_loss
from dataflex_rl.hosts.common.driver import ADMISSION, ASYNC, Driver
from dataflex_rl.hosts.common.step import Generation, concat_batches, take_rows
from dataflex_rl.hosts.trl.batch import build_batch

#: the host's own figures (`GroupGate`), beside the driver's ``dataflex/`` keys
TRL_ASYNC = "dataflex/trl_async/"


class _Group:
    """One complete group off the queue: its samples, the policy version that generated it
    and its staleness when the gate took it."""

    __slots__ = ("samples", "version", "staleness")

    def __init__(self, samples: list, version: int, staleness: int) -> None:
        self.samples = samples
        self.version = version
        self.staleness = staleness


class GroupGate:
    """A queue for ``RolloutQueueDataset`` (``get(timeout)``, ``qsize()``) that yields the
    samples of decided groups.

    Args:
        inner: the rollout worker's queue (``rollout_buffer``).
        driver: the host's `Driver` (its strategy decides; ``decisions`` is the step clock).
        group_size: TRL's ``num_generations``.
        groups_per_update: n, the groups of one optimizer step (per_device_train_batch_size x
            gradient_accumulation_steps x processes / num_generations).
        version: the trainer's live policy version (``trainer.model_version``).
        sink: the trainer's metric sink (``trainer._metrics['train']``: key -> list).
        check_health: the worker's ``check_health`` (called while the queue is empty).
        stale_after_s, poll_s: its argument, and how long one wait on the queue lasts.
        max_staleness: TRL's ``args.max_staleness`` (a group past it is dropped whole, as
            ``RolloutQueueDataset`` would drop its samples one by one).
        admission: the strategy's ``admission.max_staleness`` (``past: drop``), or None.
    """

    def __init__(
        self,
        inner: Any,
        driver: Driver,
        *,
        group_size: int,
        groups_per_update: int,
        version: Callable[[], int],
        sink: dict,
        check_health: Callable[[float], None] | None = None,
        stale_after_s: float = 300.0,
        poll_s: float = 5.0,
        max_staleness: int | None = None,
        admission: int | None = None,
    ) -> None:
        self.inner = inner
        self.driver = driver
        self.G = int(group_size)
        self.n = int(groups_per_update)
        self.version = version
        self.sink = sink
        self.check_health = check_health
        self.stale_after_s = stale_after_s
        self.poll_s = poll_s
        self.max_staleness = max_staleness
        self.admission = admission
        self.acts = acts_on_loss(driver.strategy.spec)
        self.pending: dict[int, list] = {}  # group id -> its samples so far
        self.closed: set[int] = set()  # group ids already complete
        self.ready: deque = deque()  # decided samples, in order
        self._dropped = 0  # groups admission dropped since the last update
        self._dropped_trl = 0  # groups past TRL's max_staleness since the last update
        self._waited = 0.0  # seconds this update waited on the worker's queue

    # ------------------------------------------------------------------ the queue
    def get(self, timeout: float | None = None):
        """The next sample of a decided update (runs a `Driver.step` when none is left)."""
        while not self.ready:
            self._update()
        return self.ready.popleft()

    def qsize(self) -> int:
        return int(self.inner.qsize()) + len(self.ready)

    # ------------------------------------------------------------------ groups
    def _sample(self):
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    return self.inner.get(timeout=self.poll_s)
                except queue.Empty:
                    if self.check_health is not None:
                        self.check_health(self.stale_after_s)
        finally:
            self._waited += time.perf_counter() - t0

    def _next_group(self) -> _Group:
        """The next complete group that is not past a staleness limit (those are dropped)."""
        while True:
            s = self._sample()
            gid = int(s.group_id)
            if gid in self.closed:
                raise RuntimeError(
                    f"dataflex: group {gid} got a sample after its {self.G} (num_generations) "
                    "were in: a conversation forked into several rows, which the dataflex "
                    "async host does not assemble"
                )
            got = self.pending.setdefault(gid, [])
            got.append(s)
            if len(got) < self.G:
                continue
            del self.pending[gid]
            self.closed.add(gid)
            version = int(got[0].model_version)
            age = max(int(self.version()) - min(int(x.model_version) for x in got), 0)
            if self.max_staleness is not None and age > self.max_staleness:
                self._dropped_trl += 1
                continue
            if self.admission is not None and age > self.admission:
                self._dropped += 1
                continue
            return _Group(got, version, age)

    def _source(self, k: int) -> tuple[list, None]:
        return [self._next_group() for _ in range(k)], None

    # ------------------------------------------------------------------ one update
    def _update(self) -> None:
        """One `Driver.step` over the next groups; its kept samples go to ``ready``."""
        t0 = time.perf_counter()
        self._waited = 0.0
        driver = self.driver
        out = driver.step(_AsyncStep(self), self.n, driver.decisions, source=self._source)
        samples: Sequence = out.rows
        batch: RolloutBatch = out.batch
        metrics = dict(out.metrics)
        st = batch.staleness.to(torch.float64)
        metrics[ASYNC + "staleness_mean"] = float(st.mean()) if st.numel() else 0.0
        metrics[ASYNC + "staleness_max"] = float(st.max()) if st.numel() else 0.0
        if self.admission is not None:
            metrics[ADMISSION + "dropped"] = float(self._dropped)
        metrics[TRL_ASYNC + "dropped_past_max_staleness"] = float(self._dropped_trl)
        self._dropped = self._dropped_trl = 0
        kept = list(samples)
        if self.acts:
            kept, figures = apply_decision_async(samples, out.decision, batch)
            metrics.update(figures)
        metrics[TRL_ASYNC + "samples_passed"] = float(len(kept))
        # the gate's own time: the waits on the worker's queue are TRL's perf/rollout_wait_s
        metrics["dataflex/host_time_ms"] = (time.perf_counter() - t0 - self._waited) * 1e3
        for key, value in metrics.items():
            self.sink[key].append(float(value))
        self.ready.extend(kept)


class _AsyncStep:
    """`StepHost` of the gate: the groups are generated already; ``generate`` scores them
    into a `RolloutBatch`, ``assemble`` takes the chosen rows out of them."""

    def __init__(self, gate: GroupGate) -> None:
        self.gate = gate

    @property
    def group_size(self) -> int:
        return self.gate.G

    def generate(self, items, domain_ids, round, counts=None) -> Generation:
        if counts is not None:  # refused up front (check_async)
            raise ValueError("dataflex: AsyncGRPOTrainer gives num_generations per prompt")
        samples = [s for g in items for s in g.samples]
        batch = build_batch(
            rewards=torch.tensor(
                [float(s.metrics.get("reward", float("nan"))) for s in samples], dtype=torch.float32
            ),
            advantages=torch.tensor([float(s.advantage) for s in samples], dtype=torch.float32),
            lengths=torch.tensor(
                [int(s.completion_mask.sum()) for s in samples], dtype=torch.int64
            ).reshape(-1),
            group_size=self.gate.G,
            step=self.gate.driver.decisions,
            prompt_keys=[str(s.prompt) for s in samples],
            staleness=torch.tensor(
                [g.staleness for g in items for _ in g.samples], dtype=torch.int64
            ).reshape(-1),
        )
        tokens = float(batch.response_lengths.sum())
        return Generation(batch, samples, tokens=tokens)

    def assemble(self, generations, rows, group_ids, items, domain_ids):
        first = generations[0]
        if len(generations) == 1 and torch.equal(rows, torch.arange(first.batch.batch_size)):
            return first.rows, first.batch
        every = [s for g in generations for s in g.rows]
        whole = concat_batches([g.batch for g in generations])
        return [every[i] for i in rows.tolist()], take_rows(whole, rows, group_ids)


def apply_decision_async(samples: Sequence, decision, batch: RolloutBatch) -> tuple[list, dict]:
    """The samples that stay in the loss, each a copy with ``advantage`` = (the decision's
    recomputed advantage or the worker's) x its weight (exactly 0 at weight 0), and the
    figures. A row leaves (is not handed to TRL) when the decision takes it out of the
    denominator (``renormalize``: the dropped rows) or its reward is not finite; AsyncGRPO's
    loss is a token mean over what it is given, so leaving = removing."""
    if decision.per_token:  # refused up front (check_async)
        raise ValueError("dataflex: AsyncGRPOTrainer takes one advantage per sample")
    N = len(samples)
    lengths = batch.response_length
    valid = ~batch.invalid_mask
    stays = valid
    if decision.renormalizes:
        stays = decision.loss_rows & (lengths > 0) & valid
    base = (  # the worker's own values, as it wrote them (float64), unless recomputed
        torch.tensor([float(s.advantage) for s in samples], dtype=torch.float64)
        if decision.advantages_per_response is None
        else decision.advantages_per_response.to(torch.float64)
    )
    w = decision.weights_per_response.to(torch.float64)
    adv = torch.where(w > 0, base * w, torch.zeros_like(base))
    kept = [
        dataclasses.replace(s, advantage=float(a))
        for s, a, keep in zip(samples, adv.tolist(), stays.tolist())
        if keep
    ]
    n_stay = int(stays.sum())
    return kept, {
        "dataflex/trl/loss_rows_fraction": n_stay / N if N else 0.0,
        "dataflex/trl/loss_tokens": float(lengths[stays].sum()),
    }
