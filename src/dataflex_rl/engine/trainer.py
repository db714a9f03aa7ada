"""The embedded GRPO loop. One step, top to bottom (DESIGN §5)::

    prerollout (strategy.filter_prompts) -> mix (DomainSampler at strategy.proportions)
      -> generation (G samples per prompt, shared prefill) -> reward (verifiers)
      -> GRPO advantages -> RolloutBatch -> strategy.decide (select, reweight, mix signals)
      -> clipped policy loss with the decision's weights and mask -> SGD or AdamW, gradient clipping

Each mechanism acts for real: prerollout changes which prompts are generated, mix changes which
domains are sampled, select removes responses from the loss (weight 0, and from the denominator
when ``renormalize``), reweight scales their per-token losses.
"""

from __future__ import annotations

import copy
import hashlib
import time
import warnings
from typing import Any

import torch

from dataflex_rl.core.advantages import group_advantages
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.core.proportions import normalize_proportions
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.engine.config import EngineConfig, default_difficulty
from dataflex_rl.engine.evaluation import evaluate
from dataflex_rl.engine.loss import (
    kl_k3,
    masked_token_mean,
    policy_loss,
    response_log_probs,
)
from dataflex_rl.engine.noise import row_keys
from dataflex_rl.engine.policy import (
    Policy,
    context_length,
    extend_vocabulary,
    load_policy,
    parameter_hash,
)
from dataflex_rl.engine.sampler import Rollout, sample_groups
from dataflex_rl.engine.taskio import (
    build_tasks,
    dataset_identity,
    domain_names,
    fit_to_context,
    load_file_tasks,
    score,
    taskset_charset,
    train_charset,
    unknown_characters,
)
from dataflex_rl.engine.warmstart import policy_manifest, split_differences
from dataflex_rl.hosts.common.accounting import generation_metrics
from dataflex_rl.hosts.common.draw import draw_batch
from dataflex_rl.hosts.common.sampler import DomainSampler

#: RolloutBatch fields the engine fills
ENGINE_FIELDS = (
    "rewards",
    "response_mask",
    "group_ids",
    "domain_ids",
    "advantages",
    "old_log_probs",
    "prompt_keys",
    "is_padding",
    "step",
    "response_advantages",
    "response_lengths",
)


def tasks_from_config(config: EngineConfig):
    """The `TaskSet` described by ``config.tasks``: generated, or loaded from files.

    Raises:
        ConfigError: a domain's settings have too few distinct prompts for the splits; for
            files, see `load_file_tasks`.
    """
    t = config.tasks
    if t.source == "files":
        return load_file_tasks(t)
    difficulty = default_difficulty(t.domains) if t.difficulty is None else t.difficulty
    return build_tasks(
        t.domains,
        t.seed,
        train_size=t.train_size,
        eval_size=t.eval_size,
        eval_seed=t.eval_seed,
        difficulty=difficulty,
        warm_size=t.warm_size,
    )


def derive_seed(seed: int, stream: str) -> int:
    """An independent 31-bit seed for one named randomness stream of a run."""
    digest = hashlib.sha256(f"{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & ((1 << 31) - 1)


class EmbeddedTrainer:
    """GRPO on one CPU process with a data strategy in the loop (the embedded engine's trainer;
    not TRL's ``GRPOTrainer``).

    Args:
        config: the run's `EngineConfig`.
        strategy: a `Strategy`, or anything `Strategy` accepts (preset name, YAML path, mapping).
        seed: seed of generation, data order and prerollout randomness (overrides
            ``config.seed`` when given).
        taskset: a prebuilt task set (default: built from ``config.tasks``).
        policy: a preloaded `Policy` (default: ``load_policy(config.policy)``); with
            ``tasks.source: files`` a character vocabulary is extended in place.

    With ``tasks.source: files``, before anything is trained: a character vocabulary is
    extended with the training data's characters (`extend_vocabulary`), prompts that leave no
    room for a response in the model's context are dropped (`fit_to_context`), and the
    dataset's identity (paths and content hashes) is kept for the checkpoints;
    ``data_report`` says what was added, dropped and unknown.

    Warns:
        UserWarning: the policy's bootstrap MANIFEST records another task split than
            ``config.tasks`` (held-out prompts may have been seen in its warm start).
    """

    def __init__(
        self,
        config: EngineConfig,
        strategy: Any = None,
        *,
        seed: int | None = None,
        taskset=None,
        policy: Policy | None = None,
    ) -> None:
        torch.set_num_threads(config.threads)
        self.config = config
        self.seed = config.seed if seed is None else seed
        self.taskset = taskset if taskset is not None else tasks_from_config(config)
        self.domains = domain_names(self.taskset)
        self.policy = policy if policy is not None else load_policy(config.policy)
        self.dataset = dataset_identity(config.tasks) if taskset is None else None
        self.data_report: dict[str, Any] | None = None
        if config.tasks.source == "files":
            self._fit_data()
        else:
            self._check_vocabulary()
            self._check_bootstrap_split()
        g = config.grpo
        self.ref_model = None
        if g.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
        spec = config.strategy if strategy is None else strategy
        self.strategy = (
            spec
            if isinstance(spec, Strategy)
            else Strategy(
                spec,
                domains=self.domains,
                advantage_estimator="grpo",
                available_fields=ENGINE_FIELDS,
                norm_adv_by_std=g.norm_adv_by_std,
            )
        )
        pools = [len(self.taskset.train[d]) for d in self.domains]
        self.sampler = DomainSampler(pools, self.domains, seed=derive_seed(self.seed, "data"))
        D = len(self.domains)
        self.static_proportions = (
            normalize_proportions(config.tasks.proportions, self.domains, "tasks.proportions")
            if config.tasks.proportions is not None
            else torch.full((D,), 1.0 / D, dtype=torch.float64)
        )
        # sampling noise is keyed by (seed, noise stream, step, prompt, sample): common random
        # numbers across strategies run with one seed (engine/noise.py)
        self.noise_base = derive_seed(self.seed, f"rollout:{config.noise_stream}")
        self.gen_prerollout = torch.Generator().manual_seed(derive_seed(self.seed, "prerollout"))
        o = config.optim
        params = self.policy.model.parameters()
        self.optimizer = (
            torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
            if o.name == "sgd"
            else torch.optim.AdamW(
                params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay
            )
        )
        self.step = 0
        self._warned: set[type] = set()
        self.decision_log = None  # a DecisionLog when the run logs decisions (engine/run.py)
        self._target = None  # proportions of the current batch (for the log)

    def _check_vocabulary(self) -> None:
        tok = self.policy.tokenizer
        if hasattr(tok, "chars"):
            missing = sorted(set(taskset_charset(self.taskset)) - set(tok.chars))
            if missing:
                raise ConfigError(
                    f"policy {self.policy.source!r}: its character vocabulary lacks {missing} "
                    f"used by domains {list(self.domains)}; bootstrap a policy for these "
                    "domains ('dataflex-rl bootstrap')"
                )

    def _fit_data(self) -> None:
        """A loaded dataset: extend a character vocabulary, drop prompts that do not fit the
        context, count held-out text the vocabulary lacks; one warning per finding."""
        g = self.config.grpo
        added = extend_vocabulary(self.policy, train_charset(self.taskset))
        tok = self.policy.tokenizer
        self.taskset, report = fit_to_context(
            self.taskset, tok.encode, context_length(self.policy), g.max_new_tokens
        )
        report["vocabulary_added"] = "".join(added)
        report["eval_unknown_characters"] = unknown_characters(self.taskset, tok)
        self.data_report = report
        for split, per_domain in report["dropped"].items():
            if any(per_domain.values()):
                warnings.warn(
                    f"tasks.{split}: dropped prompts too long for the policy's context of "
                    f"{context_length(self.policy)} tokens with grpo.max_new_tokens="
                    f"{g.max_new_tokens}: {_counts(per_domain)}",
                    UserWarning,
                    stacklevel=3,
                )
        long = report["long_answers"]["train"]
        if any(long.values()):
            warnings.warn(
                f"tasks.train: ground truths longer than grpo.max_new_tokens={g.max_new_tokens}"
                f" tokens (only an equivalent shorter answer can score): {_counts(long)}",
                UserWarning,
                stacklevel=3,
            )
        for d, found in report["eval_unknown_characters"].items():
            warnings.warn(
                f"tasks.eval: {found['prompts']} held-out prompts and {found['answers']} "
                f"answers of domain {d!r} use characters not in the training data "
                f"({found['chars']!r}); they are encoded as <unk>, and such an answer cannot "
                "be generated",
                UserWarning,
                stacklevel=3,
            )

    def _check_bootstrap_split(self) -> None:
        """Warn when the policy was warm-started beside another task split than ``tasks``.

        The held-out, training and warm-start splits depend on every ``tasks`` setting in
        `TASK_SPLIT_KEYS`; with other values, held-out prompts may be warm-start prompts.
        """
        manifest = policy_manifest(self.policy.source)
        if manifest is None:
            return
        differ = split_differences(manifest, self.config.tasks)
        if differ:
            what = "; ".join(
                f"tasks.{k}: {ours!r} (bootstrap: {theirs!r})"
                for k, (ours, theirs) in differ.items()
            )
            warnings.warn(
                f"policy {self.policy.source!r} was warm-started beside another task "
                f"split: {what}. Held-out prompts may have been seen in the warm "
                "start; set these tasks settings to the bootstrap's (its "
                "MANIFEST.json, bootstrap_args)",
                UserWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """Run one GRPO step; returns its metrics (``step`` is the step just taken)."""
        t0 = time.perf_counter()
        step = self.step
        problems, domain_idx, metrics = self._draw_prompts(step)
        metrics["step"] = step
        if not problems:
            metrics.update({"engine/empty_step": 1.0, "time/step_s": time.perf_counter() - t0})
            self.step += 1
            return metrics
        rollout, rewards, t_gen, t_rew = self._rollout(problems, step)
        G = self.config.grpo.group_size
        batch = self._batch(rollout, rewards, problems, domain_idx, step)
        t1 = time.perf_counter()
        decision = self._decide(batch, metrics)
        t_strat = time.perf_counter() - t1
        metrics.update(decision.metrics)
        if self.decision_log is not None:
            self.decision_log.record(batch, decision, target=self._target, metrics=metrics)
        advantages = decision.advantages if decision.advantages is not None else batch.advantages
        mask = decision.loss_mask if decision.renormalize else rollout.response_mask
        t2 = time.perf_counter()
        metrics.update(
            self._update(
                rollout, advantages, decision.weights_per_token, mask, decision.loss_mask, step
            )
        )
        metrics.update(self._reward_metrics(rewards, domain_idx, G, rollout))
        if "prerollout" in self.strategy.parts:
            metrics.update(
                generation_metrics(
                    batch, metrics.get("dataflex/prerollout/tokens_saved_est"), t_gen
                )
            )
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

    def _decide(self, batch: RolloutBatch, metrics: dict[str, float]):
        """``strategy.decide``; its warnings are counted per step and shown once per run."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision = self.strategy.decide(batch)
        metrics["engine/strategy_warnings"] = float(len(caught))
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

    def _draw_prompts(self, step: int) -> tuple[list, list[int], dict[str, float]]:
        """Prerollout and mix: the problems to generate this step and their domain ids.

        `draw_batch` with ``exact=False``: the domain sampler draws ``prompts_per_step``
        prompts at the strategy's proportions; with pre-rollout, rounds of
        ``candidate_factor`` x the missing prompts per domain until the skip policy has kept
        enough, for at most ``max_draw_rounds`` rounds (then the batch stays short).
        """
        props = self.strategy.proportions
        props = self.static_proportions if props is None else props
        self._target = props  # what this step's batch is drawn at (decision log)
        t = self.config.tasks
        drawn, metrics = draw_batch(
            self.sampler,
            lambda d, i: self.taskset.train[self.domains[d]][i].key,
            props,
            self.config.grpo.prompts_per_step,
            self.strategy,
            step,
            self.gen_prerollout,
            t.candidate_factor,
            t.max_draw_rounds,
            exact=False,
        )
        if "prerollout" in self.strategy.parts:
            metrics["engine/prompts_skipped"] = metrics["dataflex/prerollout/candidates"] - len(
                drawn
            )
        metrics["engine/prompts_generated"] = float(len(drawn))
        problems = [self.taskset.train[self.domains[d]][i] for d, i in drawn]
        return problems, [d for d, _ in drawn], metrics

    def _rollout(self, problems: list, step: int) -> tuple[Rollout, torch.Tensor, float, float]:
        """Generate G responses per problem (keyed noise) and score them."""
        g = self.config.grpo
        tok = self.policy.tokenizer
        t0 = time.perf_counter()
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        keys = row_keys(self.noise_base, step, [p.key for p in problems], g.group_size)
        rollout = sample_groups(
            self.policy.model,
            ids,
            g.group_size,
            g.max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=g.temperature,
            noise_keys=keys,
        )
        t1 = time.perf_counter()
        texts = [tok.decode(row) for row in rollout.response_ids.tolist()]
        per_row = [problems[i] for i in rollout.prompt_index.tolist()]
        rewards = score(self.taskset, per_row, texts)
        return rollout, rewards, t1 - t0, time.perf_counter() - t1

    def _batch(
        self,
        rollout: Rollout,
        rewards: torch.Tensor,
        problems: list,
        domain_idx: list[int],
        step: int,
    ) -> RolloutBatch:
        g = self.config.grpo
        group_ids = rollout.prompt_index
        # every group holds grpo.group_size >= 2 responses (EngineConfig refuses fewer), so
        # no group lacks a baseline: what a one-response group would get never applies here
        adv = group_advantages(
            rewards.to(torch.float32),
            group_ids,
            len(problems),
            norm_by_std=g.norm_adv_by_std,
            eps=g.adv_eps,
        )
        mask = rollout.response_mask
        return RolloutBatch(
            rewards=rewards,
            response_mask=mask,
            group_ids=group_ids,
            domain_ids=torch.tensor(domain_idx, dtype=torch.int64)[group_ids],
            domains=self.domains,
            advantages=adv[:, None] * mask,  # for the loss
            old_log_probs=rollout.old_log_probs,
            prompt_keys=tuple(problems[i].key for i in group_ids.tolist()),
            step=step,
            # outcome advantages are one value per response: decisions read these B values
            # (exact, not a mean over the row) and no [B, T] tensor
            response_advantages=adv,
            response_lengths=mask.sum(1),
        )

    def _update(
        self,
        rollout: Rollout,
        advantages: torch.Tensor,
        weights: torch.Tensor,
        mask: torch.Tensor,
        kept_mask: torch.Tensor,
        step: int,
    ) -> dict[str, float]:
        """Policy-gradient update on the rows that can have a gradient.

        Rows whose weighted advantage is 0 on every token give no policy gradient, so they are
        left out of the forward pass. With ``loss_agg: token-mean`` they still count in the
        token-mean denominator (as in verl); with ``informative-token-mean`` only the tokens
        of rows with a gradient do. With a KL term, every kept row takes part.
        """
        g, o = self.config.grpo, self.config.optim
        signal = (advantages * weights != 0) & mask
        informative = signal.any(1)
        rows = informative | (kept_mask.any(1) if self.ref_model is not None else False)
        num_tokens = mask.sum() if g.loss_agg == "token-mean" else mask[informative].sum()
        lr = o.lr * min(1.0, (step + 1) / o.warmup_steps) if o.warmup_steps else o.lr
        out = {
            "engine/rows_in_loss_fraction": float(rows.float().mean()),
            "engine/loss_tokens": float(num_tokens),
            "optim/lr": lr,
            "engine/empty_update": float(not bool(rows.any())),
        }
        if not bool(rows.any()):
            # nothing can have a gradient: no optimizer step (AdamW would still move the
            # parameters through its moments)
            out.update({"loss/policy": 0.0, "loss/total": 0.0, "optim/grad_norm": 0.0})
            return out
        idx = rows.nonzero().squeeze(1)
        T = int(rollout.response_mask[idx].sum(1).max())
        sub = {
            "resp": rollout.response_ids[idx, :T],
            "rmask": rollout.response_mask[idx, :T],
            "old": rollout.old_log_probs[idx, :T],
            "adv": advantages[idx, :T],
            "w": weights[idx, :T],
            "mask": mask[idx, :T],
            "kept": kept_mask[idx, :T],
        }
        pidx = rollout.prompt_index[idx]
        p_ids, p_mask = rollout.prompt_ids[pidx], rollout.prompt_mask[pidx]
        ref_logp = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logp = response_log_probs(
                    self.ref_model, p_ids, p_mask, sub["resp"], sub["rmask"], g.temperature
                )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.policy.model.train()
        for _ in range(g.ppo_epochs):
            logp = response_log_probs(
                self.policy.model, p_ids, p_mask, sub["resp"], sub["rmask"], g.temperature
            )
            loss, pg = policy_loss(
                logp,
                sub["old"],
                sub["adv"],
                sub["mask"],
                sub["w"],
                g.clip_low,
                g.clip_high,
                g.clip_ratio_c,
                num_tokens=num_tokens,
            )
            total = loss
            if ref_logp is not None:
                kl = masked_token_mean(
                    kl_k3(logp, ref_logp), sub["kept"], num_tokens=kept_mask.sum()
                )
                total = loss + g.kl_coef * kl
                out["loss/kl"] = float(kl.detach())
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            norm = torch.nn.utils.clip_grad_norm_(
                self.policy.model.parameters(), o.grad_clip if o.grad_clip > 0 else float("inf")
            )
            self.optimizer.step()
        self.policy.model.eval()
        out.update(
            {
                "loss/policy": float(loss.detach()),
                "loss/total": float(total.detach()),
                "optim/grad_norm": float(norm),
                **{f"loss/{k}": v for k, v in pg.items()},
            }
        )
        return out

    def _reward_metrics(
        self, rewards: torch.Tensor, domain_idx: list[int], G: int, rollout: Rollout
    ) -> dict[str, float]:
        d_rows = torch.tensor(domain_idx, dtype=torch.int64).repeat_interleave(G)
        D = len(self.domains)
        n = torch.bincount(d_rows, minlength=D)
        s = torch.zeros(D).index_add_(0, d_rows, rewards)
        out = {
            "train/reward": float(rewards.mean()),
            "train/response_length": float(rollout.response_mask.sum(1).float().mean()),
            "train/truncated_fraction": float((~rollout.finished).float().mean()),
            "engine/tokens_generated": float(rollout.num_tokens),
        }
        for d, name in enumerate(self.domains):
            if int(n[d]):
                out[f"train/{metric_domain(name)}/reward"] = float(s[d] / n[d])
        return out

    # ------------------------------------------------------------------ evaluation and state
    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy per domain, greedy and sampled.

        The sampled accuracy's noise is keyed by the seed alone, not by ``noise_stream``: the
        held-out measurement is the instrument every arm of a seed shares (an A/A arm differs
        from its baseline in training noise only, as two strategies do).
        """
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

    def _check_same_data(self, state: dict[str, Any]) -> None:
        """Refuse a checkpoint taken on other data files or another character vocabulary."""
        theirs = state.get("dataset")
        if theirs is not None and self.dataset is not None and theirs != self.dataset:
            changed = [
                f"{now['path']} (sha256 {then['sha256'][:12]} at the checkpoint, "
                f"{now['sha256'][:12]} now)"
                for role in ("train", "eval")
                for then, now in zip(theirs.get(role, []), self.dataset.get(role, []))
                if then != now
            ] or ["the list of files"]
            raise ValueError(
                "cannot resume: the dataset changed since the checkpoint: "
                f"{'; '.join(changed)}. Restore the data or start a new run (another --out)"
            )
        vocab = list(getattr(self.policy.tokenizer, "chars", [])) or None
        if state.get("vocabulary", vocab) != vocab:
            raise ValueError(
                "cannot resume: the policy's character vocabulary differs from the checkpoint's"
            )

    def parameter_hash(self) -> str:
        """sha256 of the current policy parameters."""
        return parameter_hash(self.policy.model)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: model, optimizer, strategy, sampler, RNGs."""
        from dataflex_rl.engine.checkpoint import global_rng_state

        return {
            "step": self.step,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "model": self.policy.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "strategy": self.strategy.state_dict(),
            "sampler": self.sampler.state_dict(),
            "rng": {"prerollout": self.gen_prerollout.get_state(), "global": global_rng_state()},
            "parameter_sha256": self.parameter_hash(),
            "dataset": self.dataset,
            "vocabulary": list(getattr(self.policy.tokenizer, "chars", [])) or None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output (same config, strategy and seed)."""
        from dataflex_rl.engine.checkpoint import set_global_rng_state

        if state["seed"] != self.seed:
            raise ValueError(f"checkpoint has seed {state['seed']}, this run {self.seed}")
        # settings that change the trajectory must match (steps, outputs and logging may not)
        free = {"steps", "out", "log", "decision_log", "strategy", "strategies", "seed", "eval"}
        now = self.config.to_dict()
        changed = sorted(k for k in now if k not in free and now[k] != state["config"].get(k))
        if changed:
            raise ValueError(
                f"cannot resume: the config differs from the checkpoint's in {', '.join(changed)}"
            )
        self._check_same_data(state)
        self.policy.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        self.sampler.load_state_dict(state["sampler"])
        self.gen_prerollout.set_state(state["rng"]["prerollout"])
        set_global_rng_state(state["rng"]["global"])
        self.step = int(state["step"])
        if self.parameter_hash() != state["parameter_sha256"]:
            raise ValueError("checkpoint parameters do not match their recorded hash")


def _counts(per_domain: dict[str, int]) -> str:
    """``"math 3, logic 1"`` for the non-zero counts."""
    return ", ".join(f"{d} {n}" for d, n in per_domain.items() if n)
