"""The embedded GRPO loop: the strategy runs through a `Driver` (draw, decide), as on every
host; this module generates, scores and learns (docs/architecture.md, one training step)."""

from __future__ import annotations

import time
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dataflex_rl.core.batch import group_domain
from dataflex_rl.core.proportions import normalize_proportions
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rollouts import check_sequential
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.pipeline import GenerationQueue
from dataflex_rl.hosts.common.representation import prompt_representation
from dataflex_rl.hosts.engine.batch import (
    ENGINE_FIELDS,
    reward_metrics,
    zero_variance_metrics,
)
from dataflex_rl.hosts.engine.checkpoint import (
    global_rng_state,
    seed_global_rngs,
    set_global_rng_state,
)
from dataflex_rl.hosts.engine.config import EngineConfig
from dataflex_rl.hosts.engine.data import (
    check_generated,
    check_same_data,
    fit_loaded,
    tasks_from_config,
    vocabulary,
)
from dataflex_rl.hosts.engine.evaluation import evaluate
from dataflex_rl.hosts.engine.generation import (
    EngineGeneration,
    decode_generation,
    encode_generation,
)
from dataflex_rl.hosts.engine.noise import derive_seed
from dataflex_rl.hosts.engine.policy import Policy, load_policy, parameter_hash
from dataflex_rl.hosts.engine.taskio import dataset_identity
from dataflex_rl.hosts.engine.update import Learner

if TYPE_CHECKING:  # decision logs need pyarrow (the tasks extra): imported when one is opened
    from dataflex_rl.hosts.common.decision_log import DecisionLog


class EmbeddedTrainer:
    """GRPO on one CPU process with a data strategy in the loop (the embedded engine's trainer).

    Args:
        strategy: a `Strategy`, or anything `Strategy` accepts (default ``config.strategy``).
        seed: overrides ``config.seed``.
        taskset: a prebuilt task set (default: built from ``config.tasks``).
        policy: a preloaded `Policy` (default: ``load_policy(config.policy)``); with
            ``tasks.source: files`` a character vocabulary is extended in place.
        out_dir: where the decision log goes (None: no log).

    The global RNGs are seeded from the run's seed (identical runs, identical checkpoints);
    the tasks are checked against the policy first (`data`; ``data_report``).
    """

    def __init__(
        self,
        config: EngineConfig,
        strategy: Any = None,
        *,
        seed: int | None = None,
        taskset=None,
        policy: Policy | None = None,
        out_dir: str | Path | None = None,
    ) -> None:
        torch.set_num_threads(config.threads)
        self.config = config
        self.seed = config.seed if seed is None else seed
        seed_global_rngs(derive_seed(self.seed, "global"))
        self.taskset = taskset if taskset is not None else tasks_from_config(config)
        self.domains = tuple(self.taskset.domains)
        self.policy = policy if policy is not None else load_policy(config.policy)
        self.dataset = dataset_identity(config.tasks) if taskset is None else None
        self.data_report: dict[str, Any] | None = None
        g = config.grpo
        if config.tasks.source == "files":
            self.taskset, self.data_report = fit_loaded(self.taskset, self.policy, g.max_new_tokens)
        else:
            check_generated(self.taskset, self.policy, config)
        a = config.asynchronous
        self.learner = Learner(
            self.policy.model, g, config.optim, a.is_cap if a.staleness else None
        )
        spec = config.strategy if strategy is None else strategy
        if not isinstance(spec, Strategy):
            spec = Strategy(
                spec,
                domains=self.domains,
                advantage_estimator="grpo",
                available_fields=ENGINE_FIELDS,
                norm_adv_by_std=g.norm_adv_by_std,
                adv_eps=g.adv_eps,
            )
        self.driver = Driver(spec, self._intake(), self._decision_log(spec, out_dir))
        #: asynchronous training's queue of generated groups (None: synchronous)
        self.queue = GenerationQueue(a.staleness, g.max_new_tokens) if a.staleness else None
        if self.queue is None and self.driver.strategy.spec.admission is not None:
            raise ConfigError(
                f"strategy {self.driver.strategy.spec.name!r}: admission acts under "
                "asynchronous training, where groups wait in a queue; set "
                "asynchronous.staleness >= 1 (it is 0: every group is trained on by the "
                "policy that generated it)"
            )
        if self.driver.strategy.rollouts is not None:
            check_sequential(self.driver.strategy.rollouts, g.group_size)
        if self.queue is not None and self.driver.strategy.rollouts is not None:
            raise ConfigError(
                f"asynchronous.staleness: {a.staleness}, but strategy "
                f"{self.driver.strategy.spec.name!r} sets per-prompt budgets (rollouts), "
                "whose rounds generate within one step for that step's own prompts; the "
                "engine runs them synchronously only (set asynchronous.staleness: 0)"
            )
        # common random numbers across strategies run with one seed (engine/noise.py)
        self.noise_base = derive_seed(self.seed, f"rollout:{config.sampling_stream}")
        self.step = 0
        #: generation cost so far, in tokens (`engine/generation_cost_tokens_total`)
        self.cost_tokens = 0.0

    def _intake(self) -> Intake:
        """The training problems, drawn at the strategy's or ``tasks.proportions``; the engine
        generates the prompts the skip policy audits."""
        t, D = self.config.tasks, len(self.domains)
        static = (
            normalize_proportions(t.proportions, self.domains, "tasks.proportions")
            if t.proportions is not None
            else torch.full((D,), 1.0 / D, dtype=torch.float64)
        )
        return Intake(
            [self.taskset.train[d] for d in self.domains],
            self.domains,
            static,
            seeds=(derive_seed(self.seed, "data"), derive_seed(self.seed, "prerollout")),
            candidate_factor=t.candidate_factor,
            max_rounds=t.max_draw_rounds,
            audits=True,
            key=attrgetter("key"),
            features=self._features,
        )

    def _features(self, problems: list, layer: int) -> tuple[torch.Tensor, float]:
        """The policy's representation of ``problems`` for a skip policy that reads one."""
        tok = self.policy.tokenizer
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        return prompt_representation(self.policy.model, ids, layer, tok.pad_id)

    def _decision_log(self, strategy: Strategy, out_dir) -> DecisionLog | None:
        if out_dir is None or not self.config.decision_log.enabled:
            return None
        from dataflex_rl.hosts.common.decision_log import DecisionLog

        return DecisionLog.from_config(
            self.config.decision_log,
            out_dir,
            strategy=strategy,
            domains=self.domains,
            host="engine",
            seed=self.seed,
            settings={"prerollout_seed": derive_seed(self.seed, "prerollout")},
        )

    def generation(self, step: int) -> EngineGeneration:
        """The engine's generation and row layout for ``step`` (`Driver.step`'s host)."""
        return EngineGeneration(
            self.policy,
            self.taskset,
            self.config.grpo,
            self.domains,
            self.noise_base,
            step,
            entropies="entropies" in self.driver.strategy.reads,
        )

    def train_step(self) -> dict[str, float]:
        """Run one GRPO step: the driver's step (draw, generate and score, refill rounds,
        audits, assemble, decide: `Driver.step`) on the engine's generation, then learn;
        returns its metrics (``step`` is the step just taken)."""
        t0 = time.perf_counter()
        step = self.step
        g = self.config.grpo
        strategy = self.driver.strategy
        out = self.driver.step(self.generation(step), g.prompts_per_step, step, queue=self.queue)
        rows, batch, decision = out.rows, out.batch, out.decision
        metrics: dict[str, float] = {"step": step}
        if "prerollout" in strategy.parts:  # over the step's draws, refill rounds' too
            candidates = out.metrics["dataflex/prerollout/candidates"]
            metrics["engine/prompts_skipped"] = candidates - out.prompts_generated
        metrics["engine/prompts_generated"] = float(out.prompts_generated)
        if out.audit is not None:
            metrics["engine/tokens_audit"] = out.audit_tokens
        # the step's cost (docs/metrics.md): every generation, audits and probe passes
        probe_tokens = out.metrics.get("dataflex/prerollout/probe_tokens", 0.0)
        cost = out.tokens + out.audit_tokens + probe_tokens
        self.cost_tokens += cost
        metrics["engine/generation_cost_tokens"] = cost
        metrics["engine/generation_cost_tokens_total"] = self.cost_tokens
        metrics.update(zero_variance_metrics(batch))
        metrics.update(out.metrics)
        advantages = decision.advantages if decision.advantages is not None else batch.advantages
        t2 = time.perf_counter()
        metrics.update(self.learner.learn(rows.rollout, advantages, decision, step))
        domain_idx = group_domain(batch).tolist()
        metrics.update(reward_metrics(rows.rewards, domain_idx, rows.rollout, self.domains))
        metrics["engine/tokens_generated"] = out.tokens  # refill groups not trained on too
        metrics.update(
            {
                "time/generate_s": sum(x.seconds for x in out.generations),
                "time/reward_s": sum(x.score_seconds for x in out.generations),
                "time/strategy_s": out.metrics["dataflex/time_ms"] / 1e3,
                "time/update_s": time.perf_counter() - t2,
                "time/step_s": time.perf_counter() - t0,
            }
        )
        self.step += 1
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy per domain, greedy and sampled; the noise is keyed by the seed
        alone (not ``sampling_stream``), so every arm of a seed is measured alike."""
        e = self.config.eval
        return evaluate(
            self.policy,
            self.taskset,
            per_domain=e.per_domain,
            samples=e.samples,
            temperature=e.temperature,
            max_new_tokens=self.config.grpo.max_new_tokens,
            seed=derive_seed(self.seed, "eval"),
        )

    def parameter_hash(self) -> str:
        """sha256 of the current policy parameters."""
        return parameter_hash(self.policy.model)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (the decision log is flushed first)."""
        return {
            "step": self.step,
            "seed": self.seed,
            "generation_cost_tokens": self.cost_tokens,
            "config": self.config.to_dict(),
            "model": self.policy.model.state_dict(),
            "optimizer": self.learner.optimizer.state_dict(),
            "dataflex": self.driver.checkpoint(),
            "rng": global_rng_state(),
            # asynchronous training: the generated groups not yet trained on
            "pipeline": (
                {}
                if self.queue is None
                else self.queue.state_dict(encode_generation, attrgetter("key"))
            ),
            "parameter_sha256": self.parameter_hash(),
            "dataset": self.dataset,
            "vocabulary": vocabulary(self.policy),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict` output (same config, strategy and seed)."""
        if state["seed"] != self.seed:
            raise ValueError(f"checkpoint has seed {state['seed']}, this run {self.seed}")
        # settings that change the trajectory must match (steps, outputs and logging may not)
        free = {
            "steps",
            "generated_tokens",
            "out",
            "log",
            "decision_log",
            "strategy",
            "strategies",
            "seed",
            "eval",
        }
        now = self.config.to_dict()
        changed = sorted(k for k in now if k not in free and now[k] != state["config"].get(k))
        if changed:
            raise ValueError(
                f"cannot resume: the config differs from the checkpoint's in {', '.join(changed)}"
            )
        check_same_data(state, self.dataset, self.policy)
        self.policy.model.load_state_dict(state["model"])
        self.learner.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.cost_tokens = float(state["generation_cost_tokens"])
        self.driver.resume(state["dataflex"], self.step)
        if self.queue is not None:
            problems = {p.key: p for d in self.domains for p in self.taskset.train[d]}
            self.queue.load_state_dict(
                state["pipeline"],
                lambda data, version, doms: decode_generation(
                    data, version, doms, problems, self.domains, self.config.grpo
                ),
                problems.__getitem__,
            )
        set_global_rng_state(state["rng"])
        if self.parameter_hash() != state["parameter_sha256"]:
            raise ValueError("checkpoint parameters do not match their recorded hash")
