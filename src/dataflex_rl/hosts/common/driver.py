"""The host driver: a data strategy's lifecycle (check, build, draw, decide, record, save,
restore), the same in every host; a host only translates its tensors into a `RolloutBatch`
and the `Decision` back into its loss (docs/architecture.md). Knows no framework.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch, clean_rewards
from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rollouts import (
    ROLLOUTS,
    balanced_subset,
    check_sequential,
    sequential_counts,
    uniform_pools,
)
from dataflex_rl.core.spec import RolloutsSpec, StrategySpec
from dataflex_rl.core.strategy import Decision, Strategy
from dataflex_rl.hosts.common.accounting import PREFIX, generation_metrics
from dataflex_rl.hosts.common.config import HostConfig, HostSettings
from dataflex_rl.hosts.common.draw import add_counts
from dataflex_rl.hosts.common.intake import Intake, intake_for
from dataflex_rl.hosts.common.pipeline import GenerationQueue
from dataflex_rl.hosts.common.refill import REFILL, run_refill, zero_variance
from dataflex_rl.hosts.common.sampler import interleave
from dataflex_rl.hosts.common.state import load_state, save_state
from dataflex_rl.hosts.common.step import (
    AUDIT,
    Generation,
    StepHost,
    StepResult,
    assemble_groups,
    concat_batches,
    group_rows,
    take_rows,
)

if TYPE_CHECKING:  # decision logs need pyarrow (the tasks extra): imported when one is opened
    from dataflex_rl.hosts.common.decision_log import DecisionLog

#: the asynchronous-training metric prefixes (`Driver.step` with a queue; its admission)
ASYNC = "dataflex/async/"
ADMISSION = "dataflex/admission/"
#: the driver's state file in each checkpoint folder of a host (verl, TRL)
STATE_FILE = "dataflex_state.safetensors"


class Driver:
    """One strategy inside one host: draws, decisions, the decision log and their state.

    ``intake`` None: the strategy neither mixes nor pre-filters (the host keeps its data
    order); ``log`` None: decisions are not logged; ``decisions`` counts decisions made so
    far (TRL's step clock; kept in the state).
    """

    def __init__(
        self,
        strategy: Strategy,
        intake: Intake | None = None,
        log: DecisionLog | None = None,
        *,
        host: str = "engine",
    ) -> None:
        layer = strategy.feature_layer
        if layer is not None and (intake is None or intake.features is None):
            name = strategy.spec.prerollout.actuator.name
            raise ConfigError(
                f"prerollout.actuator: {name!r} reads the policy's prompt representation "
                f"(hidden states after {layer} layers), which the {host} host does not "
                "provide; use it in the embedded engine, or greso/thompson here"
            )
        self.strategy = strategy
        self.intake = intake
        self.log = log
        self.logger = logging.getLogger(f"dataflex_rl.hosts.{host}")
        self.decisions = 0
        # (step, proportions drawn at, draw metrics summed over the step's draws) until decided
        self._drawn: tuple[int, Tensor, dict[str, float]] | None = None
        # (step, metrics) of that step's audit outcomes until decided (logged with it)
        self._audit: tuple[int, dict[str, float]] | None = None
        # warning categories already shown (a strategy's warning shows once per run)
        self._warned: set[type] = set()

    @classmethod
    def for_dataset(
        cls,
        block: HostConfig,
        spec: StrategySpec,
        host: HostSettings,
        row_domains: Sequence[str] | None,
        run_dir: str | Path,
        *,
        log_decisions: bool = True,
        settings: dict[str, Any] | None = None,
        features: Any = None,
    ) -> Driver:
        """The driver of a host that trains on its own dataset (verl, TRL).

        Args:
            spec: the block's strategy, checked for this host (`check_block`).
            row_domains: the domain of every training row (`read_row_domains`); None when the
                strategy neither mixes nor pre-filters.
            run_dir: the run's output folder (a relative ``decision_log.dir`` is under it).
            log_decisions: whether this process writes the decision log (TRL: the main one).
            settings: host settings recorded in the decision log.
            features: `Intake`'s ``features`` (None: the host has none).
        """
        domains = intake = None
        if row_domains is not None:
            domains, intake = intake_for(block, row_domains, features)
        strategy = Strategy(
            spec,
            domains=domains,
            advantage_estimator=host.advantage_estimator,
            available_fields=host.fields,
            norm_adv_by_std=host.norm_adv_by_std,
            adv_eps=host.adv_eps,
        )
        log = None
        if block.decision_log.enabled and log_decisions:
            from dataflex_rl.hosts.common.decision_log import DecisionLog

            log = DecisionLog.from_config(
                block.decision_log,
                run_dir,
                strategy=strategy,
                domains=domains,
                host=host.name,
                seed=block.seed,
                settings=settings,
            )
        driver = cls(strategy, intake, log, host=host.name)
        if log is not None:
            driver.logger.info("dataflex: decision log in %s", log.folder)
        driver.logger.info(
            "dataflex: strategy %r (%s)%s",
            strategy.spec.name,
            ", ".join(strategy.parts) or "no mechanism",
            f"; intake over domains {list(domains)}" if domains else "",
        )
        return driver

    # ------------------------------------------------------------------ each step
    def step(
        self,
        host: StepHost,
        n: int,
        step: int,
        *,
        given: tuple[list, list[int] | None] | None = None,
        granule: int = 1,
        queue: GenerationQueue | None = None,
        source: Callable[[int], tuple[list, list[int] | None]] | None = None,
    ) -> StepResult:
        """One step's data lifecycle, the same on every host (`dataflex_rl.hosts.common.step`):
        draw ``n`` prompts (pre-rollout skips and audits happen in the draw), generate them,
        refill rounds until the step holds ``n`` kept groups, generate the audited prompts
        (the skip policy observes them), assemble the groups the update trains on
        (`assemble_groups`), then decide on them while observing every generated group
        (`Strategy.decide`), and log the step.

        Args:
            host: the host's generation and row layout (`StepHost`).
            n: prompts (groups) per step.
            step: the training step (the draws' and the decision's clock).
            given: (items, domain ids or None) the host's own prompts for the step, when
                the driver has no intake (the strategy neither mixes, pre-filters nor
                refills: the host keeps its data order).
            granule: each refill round draws, and each ``until_signal`` round generates, a
                multiple of this many prompts (a host whose processes must generate equal
                shares).
            queue: asynchronous training (`GenerationQueue`, staleness k >= 1): the step
                generates until the queue holds (k + 1) x ``n`` groups (with the policy of
                this step) and trains on the ``n`` that finished first (`_step_async`).
            source: a host whose groups come from its own stream, generated before the step
                sees them (TRL's ``AsyncGRPOTrainer``: groups buffered from its rollout queue):
                ``source(k)`` -> (k items, domain ids or None), the step's first ``n`` and each
                refill round's; the host's ``generate`` then only scores what it was given.
        """
        if queue is not None:
            return self._step_async(host, n, step, queue)
        if source is not None:
            items, domain_ids = source(n)
            self._drawn = (step, None, {})  # the step's figures (refill) gather here
        elif self.intake is not None:
            items, domain_ids, _ = self.draw(n, step)
        elif given is not None:
            items, domain_ids = given
        else:
            raise ValueError("Driver.step: without an intake the host gives the prompts")
        budget = self.strategy.rollouts
        if budget is not None and self.intake is None:
            raise ValueError("Driver.step: per-prompt budgets (rollouts) draw from an intake")
        counts = None
        if budget is not None and budget.mode == "allocate":
            keys = [i if self.intake.key is None else self.intake.key(i) for i in items]
            counts = self.strategy.response_counts(keys, domain_ids, len(items) * host.group_size)
        elif budget is not None and budget.mode == "sequential":
            check_sequential(budget, host.group_size)
            counts = torch.full((len(items),), budget.first, dtype=torch.int64)
        first = _generated(host, items, domain_ids, 0, counts)
        generations = [first]
        taken: list[int] = []
        kept: list[Tensor] = []
        if self.strategy.refill_rounds:
            if self.intake is None and source is None:
                raise ValueError("Driver.step: refill rounds draw from an intake")

            def draw(k: int) -> tuple[list, list[int]]:  # interleaved: a round cut short
                if source is not None:  # the stream's next groups, as they come
                    return source(k)
                got, doms, _ = self.draw(k, step)  # leaves out every domain alike
                order = interleave(torch.tensor(doms, dtype=torch.int64)).tolist()
                return [got[i] for i in order], [doms[i] for i in order]

            def generate(got: list, doms: list[int], rnd: int) -> RolloutBatch:
                generations.append(_generated(host, got, doms, rnd))
                return generations[-1].batch

            _, taken, kept, refill = run_refill(
                self.strategy, draw, n, first.batch, generate, granule
            )
            if self._drawn is not None and self._drawn[0] == step:
                self._drawn[2].update(refill)
        pooled = None
        if budget is not None:
            pools, rows, group_ids, pooled, figures = _budget_rounds(host, first, budget, granule)
            generations += pools
            if self._drawn is not None and self._drawn[0] == step:
                self._drawn[2].update(figures)
        audit = None
        audited, audited_domains = self.take_audited(step)
        if audited:
            audit = _generated(host, audited, audited_domains, AUDIT)
            self.observe_audit(audit.batch)
        groups = None
        if pooled is not None:  # the pools' rows, the first generation's prompts
            items, domain_ids = first.items, first.domain_ids
        elif len(generations) == 1:
            groups = torch.arange(first.batch.num_groups)
            rows = torch.arange(first.batch.batch_size)
            group_ids = first.batch.group_ids
            items, domain_ids = first.items, first.domain_ids
        else:
            groups = assemble_groups(kept, taken)  # the selector's masks of the rounds
            rows, group_ids = group_rows([g.batch for g in generations], groups)
            every = [i for g in generations for i in g.items]
            items = [every[i] for i in groups.tolist()]
            if first.domain_ids is not None:
                doms = [d for g in generations for d in g.domain_ids]
                domain_ids = [doms[i] for i in groups.tolist()]
        rows_out, batch = host.assemble(generations, rows, group_ids, items, domain_ids)
        if self.strategy.refill_rounds and self._drawn is not None and self._drawn[0] == step:
            # generated, observed, not trained on: dropped groups a refill group replaced and
            # refill groups past the last one needed (the decision log's ``discarded``)
            present = sum(int((g.batch.group_size > 0).sum()) for g in generations)
            self._drawn[2][REFILL + "discarded"] = float(
                present - int((batch.group_size > 0).sum())
            )
        if pooled is not None:  # every response, one group per prompt
            observed, logged = pooled, None
        elif len(generations) == 1:
            observed = logged = None
        else:
            logged = [g.batch for g in generations]
            observed = concat_batches(logged)
        decision, metrics = self._decide(
            batch, sum(g.seconds for g in generations), observed, logged, groups
        )
        return StepResult(rows_out, batch, decision, metrics, generations, groups, audit)

    def _step_async(self, host: StepHost, n: int, step: int, queue: GenerationQueue) -> StepResult:
        """`step` under asynchronous training: draw and generate whole batches of ``n``
        until the queue holds (k + 1) x ``n`` groups (each generated by this step's policy:
        version ``step``; prompts admission dropped come first), generate the audited
        prompts, then assemble the ``n`` groups that finished first (`GenerationQueue.take`,
        with the strategy's ``admission``), their ``staleness`` step - version, decide on
        them and observe them (late signals: a group is observed when it is trained on)."""
        if self.intake is None:
            raise ValueError("Driver.step: asynchronous training draws from an intake")
        if self.strategy.rollouts is not None:
            raise ValueError(
                "Driver.step: per-prompt budgets under asynchronous training are refused "
                "before the run (asynchronous.staleness)"
            )
        refill = self.strategy.refill_rounds
        domains = self.intake.domains
        D = len(domains)
        adm = self.strategy.spec.admission
        limits = None if adm is None else torch.tensor(adm.limits(domains), dtype=torch.int64)
        paused = None
        if adm is not None and adm.past == "pace":
            paused = queue.stale_domains(step, limits)
        generated: list[Generation] = []

        def fill(size: int, paused: Tensor | None) -> None:
            while queue.groups < size:
                again, queue.requeue = queue.requeue[:n], queue.requeue[n:]
                items, domain_ids = [i for i, _ in again], [d for _, d in again]
                if len(items) < n and not (paused is not None and bool(paused.all())):
                    got, doms, _ = self.draw(n - len(items), step, paused)
                    items, domain_ids = items + got, domain_ids + doms
                if not items:
                    return
                gen = _generated(host, items, domain_ids, 0)
                generated.append(gen)
                queue.push(gen, step, self.strategy.groups_kept(gen.batch) if refill else None)

        fill((queue.depth + 1) * n, paused)
        if queue.groups < n:  # every domain paused: the update still needs n groups
            fill(n, None)
        audit = None
        audited, audited_domains = self.take_audited(step)
        if audited:
            audit = _generated(host, audited, audited_domains, AUDIT)
            self.observe_audit(audit.batch)
        past = adm.past if adm is not None else "drop"
        picks, dropped, discarded = queue.take(n, step, limits, past)
        rounds = 0
        while len(picks) < n and rounds < refill:  # asynchronous refill: generate on
            rounds += 1
            fill(queue.groups + n, paused)
            more = queue.take(n - len(picks), step, limits, past)
            picks, dropped, discarded = picks + more[0], dropped + more[1], discarded + more[2]
        queue.requeue += [(q.generation.items[g], q.generation.domain_ids[g]) for q, g in dropped]
        owners: list = []
        for q, _ in picks + discarded:
            if all(q is not o for o in owners):
                owners.append(q)
        offsets = torch.tensor([0] + [o.generation.batch.num_groups for o in owners[:-1]])
        where = {id(o): off for o, off in zip(owners, offsets.cumsum(0).tolist())}
        groups = torch.tensor([where[id(q)] + g for q, g in picks], dtype=torch.int64)
        batches = [o.generation.batch for o in owners]
        rows, group_ids = group_rows(batches, groups)
        items = [q.generation.items[g] for q, g in picks]
        domain_ids = [q.generation.domain_ids[g] for q, g in picks]
        rows_out, batch = host.assemble(
            [o.generation for o in owners], rows, group_ids, items, domain_ids
        )
        age = torch.tensor([step - q.version for q, _ in picks], dtype=torch.int64)
        # the decision's step (a host may hand back a queued generation's own batch whole)
        batch = batch.replace(step=step, staleness=age[batch.group_ids])
        queue.drop_done()
        counts = queue.count(torch.tensor(domain_ids, dtype=torch.int64), step, D)
        figures = _async_figures(
            queue, batch, generated, age, counts, self.intake.target(self.strategy), domains, step
        )
        if adm is not None:
            figures[ADMISSION + "dropped"] = float(len(dropped))
            figures[ADMISSION + "requeued"] = float(len(queue.requeue))
            figures[ADMISSION + "paused_domains"] = 0.0 if paused is None else float(paused.sum())
        observed = None
        if discarded:  # refill: the groups the selector dropped are observed too
            gone = torch.tensor([where[id(q)] + g for q, g in discarded], dtype=torch.int64)
            rows_d, ids_d = group_rows(batches, gone)
            dropped_batch = take_rows(concat_batches(batches), rows_d, ids_d)
            dropped_batch = dropped_batch.replace(
                step=batch.step,
                staleness=torch.tensor([step - q.version for q, _ in discarded])[ids_d],
            )
            observed = concat_batches([batch, dropped_batch])
        if refill:
            figures.update(
                {
                    REFILL + "rounds": float(rounds),
                    REFILL + "groups_kept": float(len(picks)),
                    REFILL + "missing": float(max(n - len(picks), 0)),
                    REFILL + "full": float(len(picks) >= n),
                    REFILL + "discarded": float(len(discarded)),
                }
            )
        decision, metrics = self._decide(batch, sum(g.seconds for g in generated), observed)
        metrics.update(figures)
        return StepResult(rows_out, batch, decision, metrics, generated, None, audit)

    @property
    def pending(self) -> dict[str, float]:
        """The draw figures of the step drawn and not yet decided (counts summed over its
        draws; empty when there is none): what `decide` adds to that step's metrics."""
        return {} if self._drawn is None else dict(self._drawn[2])

    def draw(
        self, n: int, step: int, paused: Tensor | None = None
    ) -> tuple[list, list[int], dict[str, float]]:
        """``n`` prompts for ``step`` from the intake: (items, their domain ids, metrics);
        ``paused``: [D] bool domains left out (admission's pacing), their share owed.

        A host may draw several times for one step (verl's refills): what `decide` reports
        for the step adds their counts up (`add_counts`).
        """
        target = self.intake.target(self.strategy)
        items, domain_ids, metrics = self.intake.draw(n, self.strategy, step, paused)
        before = self._drawn[2] if self._drawn is not None and self._drawn[0] == step else {}
        self._drawn = (step, target, add_counts(dict(before), metrics))
        return items, domain_ids, metrics

    def take_audited(self, step: int) -> tuple[list, list[int]]:
        """(items, domain ids) of the prompts every draw of ``step`` audited, refill rounds
        included (`Intake.take_audited`): skipped, to be generated anyway and not trained on
        (`observe_audit`); call once the step's draws are done. Empty without an intake."""
        return ([], []) if self.intake is None else self.intake.take_audited(step)

    def observe_audit(self, batch: RolloutBatch) -> dict[str, float]:
        """The audited prompts' outcomes (call before `decide` of the same step): the skip
        policy learns from them, nothing is decided. Returns ``audit_groups`` and
        ``audit_informative`` (false skips)."""
        metrics = self.strategy.observe_audit(batch)
        self._audit = (batch.step, metrics)
        return metrics

    def decide(
        self, batch: RolloutBatch, generate_seconds: float | None = None
    ) -> tuple[Decision, dict[str, float]]:
        """Decide on a step's batch (its ``step`` names the draws it came from) and record it
        in the decision log, for a host that runs its own step (verl: its ``filter_groups``
        refill); `step` decides for every other host. ``generate_seconds`` (None: not
        measured) feeds the seconds saved estimate. Returns (the `Decision`, its metrics
        with the step's draw figures, ``dataflex/strategy_warnings`` and, with pre-rollout,
        `generation_metrics`; with the batch's ``staleness``, asynchronous training's
        ``dataflex/async/staleness_mean`` / ``_max`` over its groups)."""
        decision, metrics = self._decide(batch, generate_seconds)
        if batch.staleness is not None:
            metrics.update(staleness_figures(batch))
        return decision, metrics

    def _decide(
        self,
        batch: RolloutBatch,
        generate_seconds: float | None,
        observed: RolloutBatch | None = None,
        generations: list[RolloutBatch] | None = None,
        groups: Tensor | None = None,
    ) -> tuple[Decision, dict[str, float]]:
        """`decide`, observing ``observed`` (`Strategy.decide`); ``generations`` / ``groups``:
        the step's generated batches and the generated group each of ``batch``'s is, for the
        decision log (the groups not in ``batch`` are logged as ``discarded``)."""
        drawn = self._drawn if self._drawn is not None and self._drawn[0] == batch.step else None
        self._drawn = None
        target, draw_metrics = (None, {}) if drawn is None else drawn[1:]
        if self._audit is not None and self._audit[0] == batch.step:
            draw_metrics = {**draw_metrics, **self._audit[1]}
        self._audit = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision = self.strategy.decide(batch, observed)
        self.decisions += 1
        metrics = {**decision.metrics, **draw_metrics}
        metrics["dataflex/strategy_warnings"] = float(len(caught))
        for w in caught:  # each kind once per run, counted every step
            if w.category not in self._warned:
                self._warned.add(w.category)
                warnings.warn(
                    f"{w.message} (shown once per run; counted in the metric "
                    "dataflex/strategy_warnings)",
                    w.category,
                    stacklevel=3,
                )
        if self.log is not None:
            rounds, discarded = (
                (None, ()) if generations is None else _sources(batch, generations, groups)
            )
            self.log.record(
                batch,
                decision,
                target=target,
                metrics=draw_metrics,
                rounds=rounds,
                discarded=discarded,
            )
        if "prerollout" in self.strategy.parts:
            saved = draw_metrics.get(PREFIX + "tokens_saved_est")
            metrics.update(generation_metrics(batch, saved, generate_seconds))
        return decision, metrics

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "format": 1,
            "decisions": self.decisions,
            "strategy": self.strategy.state_dict(),
            "intake": None if self.intake is None else self.intake.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.strategy.load_state_dict(state["strategy"])
        self.decisions = int(state["decisions"])
        if self.intake is not None:
            if state.get("intake") is None:
                raise ValueError(
                    "dataflex: the checkpoint has no intake state, but the strategy mixes "
                    "or pre-filters"
                )
            self.intake.load_state_dict(state["intake"])

    def checkpoint(self) -> dict:
        """The state to save with a host checkpoint, once the decision log is flushed (the
        log never lags a checkpoint)."""
        if self.log is not None:
            self.log.flush()
        return self.state_dict()

    def resume(self, state: dict | None, step: int | None = None) -> None:
        """Continue from a checkpoint: restore ``state`` (None: the strategy starts fresh)
        and drop the decision log's steps from ``step`` on (default: the decisions made
        before the checkpoint), which a run that went on past it had logged."""
        if state is not None:
            self.load_state_dict(state)
        if self.log is not None:
            self.log.truncate(self.decisions if step is None else step)

    def save(self, folder: str | Path) -> Path:
        """`checkpoint` as `STATE_FILE` in a host's checkpoint folder (call it before the
        host writes the file that marks its checkpoint complete)."""
        return save_state(Path(folder) / STATE_FILE, self.checkpoint())

    def restore(self, folder: str | Path | None, step: int | None = None) -> None:
        """`resume` from the state file in a host's checkpoint folder (None: no checkpoint,
        a fresh start). A folder without one resumes with a fresh strategy, with a warning."""
        path = None if folder is None else Path(folder) / STATE_FILE
        if path is not None and not path.exists():
            self.logger.warning(
                "dataflex: resuming from %s without %s; the strategy starts fresh",
                folder,
                STATE_FILE,
            )
            path = None
        self.resume(None if path is None else load_state(path), step)
        if path is not None:
            self.logger.info("dataflex: restored strategy state from %s", path)

    def close(self) -> None:
        """Write what the decision log holds."""
        if self.log is not None:
            self.log.close()


def _sources(
    batch: RolloutBatch, generations: list[RolloutBatch], groups: Tensor | None
) -> tuple[Tensor, list[tuple[int, RolloutBatch, Tensor]]]:
    """([G] the generation of each of ``batch``'s groups, and per generation (round, it, [its
    G] bool: its groups ``batch`` does not hold)) for `DecisionLog.record`; ``groups``:
    `Driver.decide`'s."""
    sizes = torch.tensor([g.num_groups for g in generations], dtype=torch.int64)
    total = int(sizes.sum())
    G = batch.num_groups
    src = torch.arange(G) if groups is None else groups.to(torch.int64).cpu()
    if src.shape != (G,) or (G and (int(src.min()) < 0 or int(src.max()) >= total)):
        raise ValueError(
            f"decide: groups must give each of the batch's {G} groups one of the step's "
            f"{total} generated groups, got {tuple(src.shape)} values"
        )
    round_of = torch.repeat_interleave(torch.arange(len(generations)), sizes)
    left = torch.ones(total, dtype=torch.bool)
    left[src] = False
    parts = left.split(sizes.tolist())
    return round_of[src], [(r, g, w) for r, (g, w) in enumerate(zip(generations, parts))]


def _generated(
    host: StepHost,
    items: list,
    domain_ids: list[int] | None,
    rnd: int,
    counts: Tensor | None = None,
) -> Generation:
    """``host.generate`` of ``items``, which the `Generation` then carries."""
    gen = (
        host.generate(items, domain_ids, rnd)
        if counts is None
        else host.generate(items, domain_ids, rnd, counts)
    )
    gen.items, gen.domain_ids = list(items), None if domain_ids is None else list(domain_ids)
    return gen


def _budget_rounds(
    host: StepHost, first: Generation, budget: RolloutsSpec, granule: int = 1
) -> tuple[list[Generation], Tensor, Tensor, RolloutBatch, dict[str, float]]:
    """A per-prompt budget's rounds after the step's first generation (``until_signal``:
    the prompts whose pooled responses all score alike, again, until they hold two outcomes
    or ``max_rounds`` ran, each round rounded up to a multiple of ``granule`` prompts by
    repeating its first ones; ``sequential``: ``per_round`` more to the prompts whose
    responses all score alike, fewest first, until the step's ``group_size`` x prompts
    responses are spent or ``max_rounds`` ran (`sequential_counts`); ``allocate``: none) and
    what the step trains on: (the rounds' generations, the assembled rows and group ids
    (`StepHost.assemble`; ``until_signal``: a balanced subset of ``group_size`` per prompt,
    `balanced_subset`; ``allocate`` and ``sequential``: every response), every response
    pooled by prompt (what the strategy observes), and the ``dataflex/rollouts/``
    figures)."""
    P = first.batch.num_groups
    items, doms = first.items, first.domain_ids
    generations: list[Generation] = []
    pool = [first.batch.group_ids]
    rounds = 0
    resampled = torch.zeros(P, dtype=torch.bool)
    present = first.batch.group_size > 0

    def without_signal() -> Tensor:  # [P] the prompts whose responses so far all agree
        every = [first, *generations]
        rewards = torch.cat([clean_rewards(g.batch) for g in every])
        active = torch.cat([g.batch.active_mask for g in every])
        return uniform_pools(rewards, active, torch.cat(pool), P) & present

    def generate(idx: Tensor, counts: Tensor | None) -> None:  # round ``rounds``
        sub = idx.tolist()
        gen = _generated(
            host,
            [items[i] for i in sub],
            None if doms is None else [doms[i] for i in sub],
            rounds,
            counts,
        )
        generations.append(gen)
        pool.append(idx[gen.batch.group_ids])

    if budget.mode == "sequential":
        n = first.batch.group_size.to(torch.int64).clone()  # responses each prompt has
        remaining = int(present.sum()) * host.group_size - int(n.sum())
        while rounds < budget.max_rounds and remaining > 0:
            need = without_signal()
            give = sequential_counts(n, need, budget.per_round, remaining)
            idx = give.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            rounds += 1
            resampled |= need
            generate(idx, give[idx])
            n += give
            remaining -= int(give.sum())
    if budget.mode == "until_signal":
        while rounds < budget.max_rounds:
            need = without_signal()
            idx = need.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            rounds += 1
            resampled |= need
            short = -idx.numel() % granule  # equal shares per process: repeat the first ones
            generate(torch.cat([idx, idx.repeat(short // idx.numel() + 1)[:short]]), None)
    every = [first, *generations]
    whole = concat_batches([g.batch for g in every])
    of_row = torch.cat(pool)
    order = torch.sort(of_row, stable=True).indices  # pooled by prompt, in round order
    pooled = take_rows(whole, order, of_row[order])
    if budget.mode == "until_signal":
        pick = balanced_subset(clean_rewards(whole), whole.active_mask, of_row, P, host.group_size)
        idx = pick.nonzero().squeeze(1)
        rows = idx[torch.sort(of_row[idx], stable=True).indices]
    else:  # every response, pooled by prompt in round order
        rows = order
    group_ids = of_row[rows]
    sizes = pooled.group_size[first.batch.group_size > 0].to(torch.float64)
    zero_first, present = zero_variance(first.batch)
    figures = {
        ROLLOUTS + "rounds": float(rounds),
        ROLLOUTS + "prompts_resampled": float(resampled.sum()),
        ROLLOUTS + "generated": float(pooled.active_mask.sum()),
        ROLLOUTS + "trained": float(rows.numel()),
        ROLLOUTS + "per_prompt_mean": float(sizes.mean()) if sizes.numel() else 0.0,
        ROLLOUTS + "per_prompt_min": float(sizes.min()) if sizes.numel() else 0.0,
        ROLLOUTS + "per_prompt_max": float(sizes.max()) if sizes.numel() else 0.0,
        ROLLOUTS + "zero_variance_first": zero_first / max(present, 1),
        ROLLOUTS + "zero_variance_pooled": (
            int(((pooled.group_std == 0) & (pooled.group_size > 0)).sum()) / max(present, 1)
        ),
    }
    return generations, rows, group_ids, pooled, figures


def staleness_figures(batch: RolloutBatch) -> dict[str, float]:
    """``dataflex/async/staleness_mean`` / ``_max`` over the batch's groups (a group's
    staleness: its most stale response's; padding rows left out), for a host whose asynchronous
    step is its own (verl)."""
    act = ~batch.is_padding if batch.is_padding is not None else None
    st, gid = batch.staleness, batch.group_ids
    if act is not None:
        st, gid = st[act], gid[act]
    if st.numel() == 0:
        return {ASYNC + "staleness_mean": 0.0, ASYNC + "staleness_max": 0.0}
    per_group = torch.full((batch.num_groups,), -1, dtype=torch.int64)
    per_group = per_group.scatter_reduce(0, gid, st, "amax")
    per_group = per_group[per_group >= 0]
    return {
        ASYNC + "staleness_mean": float(per_group.float().mean()),
        ASYNC + "staleness_max": float(per_group.max()),
    }


def _async_figures(
    queue: GenerationQueue,
    batch: RolloutBatch,
    generated: list[Generation],
    age: Tensor,
    counts: Tensor,
    target: Tensor,
    domains: Sequence[str],
    step: int,
) -> dict[str, float]:
    """An asynchronous step's ``dataflex/async/`` figures: staleness of the trained groups,
    the queue, the trained groups' mean response length and solve rate against the groups
    generated this step, and each domain's share of the groups trained on so far against its
    target, with the steps since it last had one trained on (starvation)."""
    out = {
        ASYNC + "staleness_mean": float(age.float().mean()) if age.numel() else 0.0,
        ASYNC + "staleness_max": float(age.max()) if age.numel() else 0.0,
        ASYNC + "queued_groups": float(queue.groups),
        ASYNC + "batches_generated": float(len(generated)),
    }

    def length_and_solve(b: RolloutBatch) -> tuple[float, float]:
        act = b.active_mask
        n = max(int(act.sum()), 1)
        return (
            float((b.response_length * act).sum()) / n,
            float(((clean_rewards(b) > 0.5) & act).sum()) / n,
        )

    out[ASYNC + "trained_length"], out[ASYNC + "trained_solve_rate"] = length_and_solve(batch)
    if generated:
        every = concat_batches([g.batch for g in generated])
        out[ASYNC + "generated_length"], out[ASYNC + "generated_solve_rate"] = length_and_solve(
            every
        )
    total = max(int(queue.admitted.sum()), 1)
    for d, name in enumerate(domains):
        key = f"{ASYNC}domain/{metric_domain(name)}/"
        out[key + "share_total"] = float(queue.admitted[d]) / total
        out[key + "target"] = float(target[d])
        out[key + "trained"] = float(counts[d])
        last = int(queue.last[d])
        out[key + "starved_steps"] = float(step - last if last >= 0 else step + 1)
    return out
