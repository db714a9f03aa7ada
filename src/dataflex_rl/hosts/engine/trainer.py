"""The embedded GRPO loop: the strategy runs through a `Driver` (draw, decide), as on every
host; this module generates, scores and learns (docs/architecture.md, one training step)."""

from __future__ import annotations

import time
import warnings
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.proportions import normalize_proportions
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.representation import prompt_representation
from dataflex_rl.hosts.engine.batch import (
    ENGINE_FIELDS,
    grpo_batch,
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
from dataflex_rl.hosts.engine.noise import derive_seed, row_keys
from dataflex_rl.hosts.engine.policy import Policy, load_policy, parameter_hash
from dataflex_rl.hosts.engine.sampler import Rollout, concat_rollouts, first_groups, sample_groups
from dataflex_rl.hosts.engine.taskio import dataset_identity, score
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
        self.learner = Learner(self.policy.model, g, config.optim)
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
        # common random numbers across strategies run with one seed (engine/noise.py)
        self.noise_base = derive_seed(self.seed, f"rollout:{config.sampling_stream}")
        self.step = 0
        #: generation cost so far, in tokens (`engine/generation_cost_tokens_total`)
        self.cost_tokens = 0.0
        self._warned: set[type] = set()

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

    def train_step(self) -> dict[str, float]:
        """Run one GRPO step (draw, generate and score, refill rounds, decide, learn); returns
        its metrics (``step`` is the step just taken)."""
        t0 = time.perf_counter()
        step = self.step
        problems, domain_idx, metrics = self.driver.draw(self.config.grpo.prompts_per_step, step)
        metrics["step"] = step
        if "prerollout" in self.driver.strategy.parts:
            candidates = metrics["dataflex/prerollout/candidates"]
            metrics["engine/prompts_skipped"] = candidates - len(problems)
        metrics["engine/prompts_generated"] = float(len(problems))
        probe_tokens = metrics.get("dataflex/prerollout/probe_tokens", 0.0)
        rollout, rewards, t_gen, t_rew = self._rollout(problems, step)
        g = self.config.grpo
        batch = grpo_batch(rollout, rewards, problems, domain_idx, self.domains, step, g)
        generated = float(rollout.num_tokens)
        if self.driver.strategy.refill_rounds:
            (rollout, rewards, problems, domain_idx, batch, generated, t_more) = self._refill(
                step, rollout, rewards, problems, domain_idx, batch, metrics
            )
            t_gen, t_rew = t_gen + t_more[0], t_rew + t_more[1]
            # the refill draws' probe passes too (their counts add up in the driver)
            probe_tokens = self.driver.pending.get("dataflex/prerollout/probe_tokens", 0.0)
        audit_tokens = self._audit(step, metrics)  # every draw's audits, refill rounds' too
        cost = generated + audit_tokens + probe_tokens  # the step's cost (docs/metrics.md)
        self.cost_tokens += cost
        metrics["engine/generation_cost_tokens"] = cost
        metrics["engine/generation_cost_tokens_total"] = self.cost_tokens
        metrics.update(zero_variance_metrics(batch))
        t1 = time.perf_counter()
        decision = self._decide(batch, t_gen, metrics)
        t_strat = time.perf_counter() - t1
        advantages = decision.advantages if decision.advantages is not None else batch.advantages
        t2 = time.perf_counter()
        metrics.update(self.learner.learn(rollout, advantages, decision, step))
        metrics.update(reward_metrics(rewards, domain_idx, rollout, self.domains))
        metrics["engine/tokens_generated"] = generated  # refill groups not trained on too
        metrics.update(
            {
                "time/generate_s": t_gen,
                "time/reward_s": t_rew,
                "time/strategy_s": t_strat,
                "time/update_s": time.perf_counter() - t2,
                "time/step_s": time.perf_counter() - t0,
            }
        )
        self.step += 1
        return metrics

    def _refill(self, step, rollout, rewards, problems, domain_idx, batch, metrics):
        """Refill rounds (`Driver.refill`): the step's rollout, rewards, problems, domain ids
        and batch over every round (but groups past the last needed one), the generated tokens
        of every round, and the rounds' (generate, reward) seconds."""
        g = self.config.grpo
        rounds: list[tuple] = []
        seconds = [0.0, 0.0]
        before = list(problems)

        def generate(items: list, doms: list[int], _round: int) -> RolloutBatch:
            r, rew, t_gen, t_rew = self._rollout(items, step, before=before)
            seconds[0] += t_gen
            seconds[1] += t_rew
            rounds.append((r, rew, items, doms))
            before.extend(items)
            return grpo_batch(r, rew, items, doms, self.domains, step, g)

        _, taken, refill = self.driver.refill(g.prompts_per_step, step, batch, generate)
        metrics.update(refill)
        tokens = float(rollout.num_tokens) + sum(float(r.num_tokens) for r, *_ in rounds)
        if not rounds:
            return rollout, rewards, problems, domain_idx, batch, tokens, seconds
        parts, rews = [rollout], [rewards]
        problems, domain_idx = list(problems), list(domain_idx)
        for (r, rew, items, doms), use in zip(rounds, taken):
            parts.append(first_groups(r, use))
            rews.append(rew[: use * g.group_size])
            problems += items[:use]
            domain_idx += doms[:use]
        rollout = concat_rollouts(parts, self.policy.tokenizer.pad_id)
        rewards = torch.cat(rews)
        batch = grpo_batch(rollout, rewards, problems, domain_idx, self.domains, step, g)
        metrics["engine/prompts_generated"] = float(len(before))
        return rollout, rewards, problems, domain_idx, batch, tokens, seconds

    def _audit(self, step: int, metrics: dict) -> float:
        """Generate the prompts the step's draws audited, refill rounds' included (skipped,
        generated anyway, not trained on) and let the skip policy learn from them; returns
        their generated tokens."""
        items, domain_idx = self.driver.take_audited(step)
        if not items:
            return 0.0
        rollout, rewards, _, _ = self._rollout(items, step)
        batch = grpo_batch(
            rollout, rewards, items, domain_idx, self.domains, step, self.config.grpo
        )
        metrics.update(self.driver.observe_audit(batch))
        metrics["engine/tokens_audit"] = float(rollout.num_tokens)
        return float(rollout.num_tokens)

    def _decide(self, batch: RolloutBatch, generate_seconds: float, metrics: dict):
        """The driver's decision (its metrics into ``metrics``); the strategy's warnings are
        counted per step and shown once per run."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision, decided = self.driver.decide(batch, generate_seconds)
        metrics["engine/strategy_warnings"] = float(len(caught))
        metrics.update(decided)
        for w in caught:
            if w.category not in self._warned:
                self._warned.add(w.category)
                warnings.warn(
                    f"{w.message} (shown once per run; counted in the metric "
                    "engine/strategy_warnings)",
                    w.category,
                    stacklevel=3,
                )
        return decision

    def _rollout(
        self, problems: list, step: int, before: list = ()
    ) -> tuple[Rollout, torch.Tensor, float, float]:
        """Generate G responses per problem (keyed noise) and score them. ``before``: the
        problems generated earlier in the step (refill rounds): a prompt drawn again gets
        the noise of its next occurrence."""
        g = self.config.grpo
        tok = self.policy.tokenizer
        t0 = time.perf_counter()
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        keys = row_keys(self.noise_base, step, [p.key for p in [*before, *problems]], g.group_size)[
            len(before) * g.group_size :
        ]
        rollout = sample_groups(
            self.policy.model,
            ids,
            g.group_size,
            g.max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=g.temperature,
            noise_keys=keys,
            entropies="entropies" in self.driver.strategy.reads,
        )
        t1 = time.perf_counter()
        texts = [tok.decode(row) for row in rollout.response_ids.tolist()]
        per_row = [problems[i] for i in rollout.prompt_index.tolist()]
        rewards = score(self.taskset, per_row, texts)
        return rollout, rewards, t1 - t0, time.perf_counter() - t1

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
        set_global_rng_state(state["rng"])
        if self.parameter_hash() != state["parameter_sha256"]:
            raise ValueError("checkpoint parameters do not match their recorded hash")
