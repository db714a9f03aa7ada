"""The host driver: a data strategy's lifecycle (check, build, draw, decide, record, save,
restore), the same in every host; a host only translates its tensors into a `RolloutBatch`
and the `Decision` back into its loss (docs/architecture.md). Knows no framework.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import StrategySpec
from dataflex_rl.core.strategy import Decision, Strategy
from dataflex_rl.hosts.common.accounting import PREFIX, generation_metrics
from dataflex_rl.hosts.common.config import HostConfig, HostSettings
from dataflex_rl.hosts.common.draw import add_counts
from dataflex_rl.hosts.common.intake import Intake, intake_for
from dataflex_rl.hosts.common.refill import Generate, run_refill
from dataflex_rl.hosts.common.sampler import interleave
from dataflex_rl.hosts.common.state import load_state, save_state

if TYPE_CHECKING:  # decision logs need pyarrow (the tasks extra): imported when one is opened
    from dataflex_rl.hosts.common.decision_log import DecisionLog

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
        # (step, its generations: the first, then each refill round's) until decided (logged)
        self._generations: tuple[int, list[RolloutBatch]] | None = None

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
    @property
    def pending(self) -> dict[str, float]:
        """The draw figures of the step drawn and not yet decided (counts summed over its
        draws; empty when there is none): what `decide` adds to that step's metrics."""
        return {} if self._drawn is None else dict(self._drawn[2])

    def draw(self, n: int, step: int) -> tuple[list, list[int], dict[str, float]]:
        """``n`` prompts for ``step`` from the intake: (items, their domain ids, metrics).

        A host may draw several times for one step (verl's refills): what `decide` reports
        for the step adds their counts up (`add_counts`).
        """
        target = self.intake.target(self.strategy)
        items, domain_ids, metrics = self.intake.draw(n, self.strategy, step)
        before = self._drawn[2] if self._drawn is not None and self._drawn[0] == step else {}
        self._drawn = (step, target, add_counts(dict(before), metrics))
        return items, domain_ids, metrics

    def refill(
        self, n: int, step: int, first: RolloutBatch, generate: Generate, granule: int = 1
    ) -> tuple[list[RolloutBatch], list[int], dict[str, float]]:
        """Refill rounds for ``step`` (`run_refill`, drawing from the intake, each round's
        prompts in `interleave` order); the metrics also go with the step's decision. The host then decides once on every group the step
        uses."""

        def draw(k: int) -> tuple[list, list[int]]:  # interleaved: a round cut short
            items, domain_ids, _ = self.draw(k, step)  # leaves out every domain alike
            order = interleave(torch.tensor(domain_ids, dtype=torch.int64)).tolist()
            return [items[i] for i in order], [domain_ids[i] for i in order]

        batches, taken, metrics = run_refill(self.strategy, draw, n, first, generate, granule)
        if self._drawn is not None and self._drawn[0] == step:
            self._drawn[2].update(metrics)
        self._generations = (step, [first, *batches])
        return batches, taken, metrics

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
        self,
        batch: RolloutBatch,
        generate_seconds: float | None = None,
        groups: Tensor | None = None,
    ) -> tuple[Decision, dict[str, float]]:
        """Decide on a step's batch (its ``step`` names the draws it came from) and record it
        in the decision log, with every group the step's refill rounds generated and the
        batch does not hold (``discarded``); ``generate_seconds`` (None: not measured) feeds
        the seconds saved estimate. ``groups``: [G] for each group of ``batch``, its index
        among the step's generated groups (its generations' groups in order, `refill`); None:
        the first G (the engine, which trains on what it generated up to the last group it
        needs). Returns (the `Decision`, its metrics with the step's draw figures and, with
        pre-rollout, `generation_metrics`)."""
        drawn = self._drawn if self._drawn is not None and self._drawn[0] == batch.step else None
        self._drawn = None
        gens = self._generations
        self._generations = None
        gens = gens[1] if gens is not None and gens[0] == batch.step else None
        target, draw_metrics = (None, {}) if drawn is None else drawn[1:]
        if self._audit is not None and self._audit[0] == batch.step:
            draw_metrics = {**draw_metrics, **self._audit[1]}
        self._audit = None
        decision = self.strategy.decide(batch)
        self.decisions += 1
        metrics = {**decision.metrics, **draw_metrics}
        if self.log is not None:
            rounds, discarded = (None, ()) if gens is None else _sources(batch, gens, groups)
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
