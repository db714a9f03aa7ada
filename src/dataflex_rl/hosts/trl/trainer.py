"""`DataflexGRPOTrainer`: TRL 1.16's ``GRPOTrainer`` with a data strategy in the loop.

Hooks (docs/hosts/trl.md#what-happens-in-a-generation-batch): ``_generate_and_score_completions``
draws (intake), refills, decides and applies the decision; ``_compute_loss`` scales the KL
term; ``_save_checkpoint`` / ``_load_optimizer_and_scheduler`` save and restore the driver.
A TRL script changes the trainer class and adds one block::

    args = DataflexGRPOConfig(..., dataflex={"strategy": "difffilter"})
    trainer = DataflexGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import time
from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.config import HostConfig, acts_on_loss, uses_intake
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import read_row_domains
from dataflex_rl.hosts.trl.batch import build_batch, dataset_rows, refill_domains, trl_rewards
from dataflex_rl.hosts.trl.config import check, host_settings, parse_block
from dataflex_rl.hosts.trl.loss import apply_decision
from dataflex_rl.hosts.trl.refill import cat_rows, check_refillable, cpu_rows, slot_rows, take
from dataflex_rl.hosts.trl.tensors import (
    ROW_KEY,
    check_micro_batch,
    gather_token_fields,
    predicted_micro_batches,
    prompt_features,
)

logger = logging.getLogger("dataflex_rl.hosts.trl")


@dataclass
class DataflexGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the ``dataflex`` block, checked when the config is built."""

    dataflex: dict | str | None = field(
        default=None,
        metadata={
            "help": "The dataflex block (strategy, domain_key, ...; the verl host's schema): a "
            "mapping or the path of a YAML file holding it. None: the 'baseline' strategy."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_block(self.dataflex)  # errors now, naming the key; the trainer parses it again


def _bound_args(args: tuple, kwargs: dict) -> dict:
    """GRPOTrainer's positional/keyword arguments by name (``args``, ``train_dataset``, ...)."""
    sig = inspect.signature(GRPOTrainer.__init__)
    return sig.bind(None, *args, **kwargs).arguments


class DataflexGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus a dataflex `Strategy`, run by a `Driver`.

    ``dataflex``: the block (mapping or YAML path), when ``args`` is not a
    `DataflexGRPOConfig` or leaves it unset (not both). It is checked before GRPOTrainer
    builds anything; the strategy is built once the training set is known.
    """

    def __init__(self, *args, dataflex: dict | str | HostConfig | None = None, **kwargs) -> None:
        bound = _bound_args(args, kwargs)
        grpo_args = bound.get("args")
        in_args = getattr(grpo_args, "dataflex", None)
        if dataflex is not None and in_args is not None:
            raise ConfigError(
                "dataflex: given both to DataflexGRPOTrainer(dataflex=...) and in "
                "args.dataflex; pass the block once"
            )
        self.dataflex = parse_block(dataflex if dataflex is not None else in_args)
        # fail before the model and the datasets are prepared: every check that needs only
        # the block, the args and the training set (args None: TRL's defaults, by getattr)
        spec = check(self.dataflex, grpo_args)
        row_domains = None
        train_dataset = bound.get("train_dataset")
        if uses_intake(spec) or spec.refill is not None and self.dataflex.domain_key:
            row_domains = read_row_domains(
                train_dataset, self.dataflex.domain_key, train_dataset, logger
            )
        elif spec.refill is not None:  # refills are drawn by the intake: one domain unless named
            row_domains = refill_domains(train_dataset)
        self.driver: Driver | None = None
        self._dataflex_rewards = None  # the gathered [N, F] rewards of this generation
        self._dataflex_kl_scale = 1.0  # c of the generation the loss now reads (beta x c)
        self._dataflex_micro = None  # [n] predicted micro-batch of this rank's rows
        super().__init__(*args, **kwargs)
        self.driver = Driver.for_dataset(
            self.dataflex,
            spec,
            host_settings(self.args),
            row_domains,
            self.args.output_dir,
            log_decisions=self.accelerator.is_main_process,
            settings={"loss_type": self.args.loss_type},
            features=lambda rows, layer: prompt_features(self, rows, layer),
        )

    # ------------------------------------------------------------------ hooks
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dataflex_rewards = rewards  # gathered [N, F]; read once by the hook below
        return rewards

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation: TRL's own path, untouched
            return super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        step = self.driver.decisions
        drawn = None
        if self.driver.intake is not None:
            inputs, drawn = self._intake(inputs, step)
        self._dataflex_rewards = None
        self._dataflex_kl_scale = 1.0
        t1 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        sources = None
        if self.driver.strategy.refill_rounds:
            out, drawn, sources = self._refill(out, inputs, step, drawn)
        t2 = time.perf_counter()
        metrics = self._decide_and_apply(out, len(inputs), step, drawn, t2 - t1, sources)
        metrics["dataflex/host_time_ms"] = (t1 - t0 + time.perf_counter() - t2) * 1e3
        train = self._metrics["train"]
        for key, value in metrics.items():
            train[key].append(float(value))
        return out

    # ------------------------------------------------------------------ intake
    def _intake(self, inputs: list[dict], step: int):
        """Replace the dataloader's rows by the strategy's draw of N / G prompts, each G times:
        (this rank's slice of the N rows, (global rows [N], global domain ids [N]))."""
        n, G = len(inputs), self.num_generations
        rows, doms, _ = self.driver.draw(n * self.accelerator.num_processes // G, step)
        rows_global = torch.tensor(rows, dtype=torch.int64).repeat_interleave(G)
        doms_global = torch.tensor(doms, dtype=torch.int64).repeat_interleave(G)
        p = self.accelerator.process_index
        local = rows_global[p * n : (p + 1) * n].tolist()
        keys = list(inputs[0]) if inputs else None
        return dataset_rows(self.train_dataset, local, keys), (rows_global, doms_global)

    # ------------------------------------------------------------------ refill
    def _round_batch(self, out, rewards, step, drawn):
        """The global `RolloutBatch` of one generation round (what the selector reads)."""
        acc = self.accelerator
        mask = out["completion_mask"]
        local = torch.stack([out["advantages"].float(), mask.sum(1).float()], 1)
        both = acc.gather(local).cpu()
        return build_batch(
            rewards=trl_rewards(rewards, self.reward_weights),
            advantages=both[:, 0],
            lengths=both[:, 1].round().to(torch.int64),
            group_size=self.num_generations,
            step=step,
            domains=self.driver.intake.domains,
            domain_ids=drawn[1],
            prompt_keys=drawn[0].tolist(),
        )

    def _refill(self, out, inputs, step, drawn):
        """Refill rounds (`Driver.refill`, `dataflex_rl.hosts.trl.refill`): (this rank's rows
        of the assembled generation batch, (its global rows, domain ids), [N / G] the step's
        generated group each of its groups is, for the decision log; None without rounds)."""
        check_refillable(out)
        acc = self.accelerator
        P, p, G = acc.num_processes, acc.process_index, self.num_generations
        n = len(inputs)
        first_rewards = self._dataflex_rewards
        first = self._round_batch(out, first_rewards, step, drawn)
        keys = list(inputs[0]) if inputs else None
        rounds: list[tuple] = []

        def generate(items: list, doms: list[int], _round: int):
            rows_g = torch.tensor(items, dtype=torch.int64).repeat_interleave(G)
            doms_g = torch.tensor(doms, dtype=torch.int64).repeat_interleave(G)
            m = rows_g.shape[0] // P
            local_rows = rows_g[p * m : (p + 1) * m].tolist()
            self._dataflex_rewards = None
            o = super(DataflexGRPOTrainer, self)._generate_and_score_completions(
                dataset_rows(self.train_dataset, local_rows, keys)
            )
            check_refillable(o)
            batch = self._round_batch(o, self._dataflex_rewards, step, (rows_g, doms_g))
            rounds.append((o, self._dataflex_rewards.cpu(), rows_g, doms_g, batch))
            return batch

        strategy = self.driver.strategy
        _, taken, _ = self.driver.refill(
            n * P // G, step, first, generate, granule=P // math.gcd(G, P)
        )
        self._dataflex_rewards = first_rewards
        if not rounds:
            return out, drawn, None
        pad = getattr(self.processing_class, "pad_token_id", None) or 0

        def global_rows(o: dict) -> dict:
            return cat_rows(gather_object([cpu_rows(o)]), pad)

        used = [torch.arange(t * G) for t in taken]
        table = cat_rows(
            [global_rows(out)]
            + [take(global_rows(r[0]), u) for r, u in zip(rounds, used, strict=True)],
            pad,
        )
        kept_refill = torch.cat(
            [strategy.groups_kept(r[4])[:t] for r, t in zip(rounds, taken, strict=True)]
        )
        index = slot_rows(strategy.groups_kept(first), kept_refill, G)
        rewards = torch.cat([first_rewards.cpu()] + [r[1][u] for r, u in zip(rounds, used)])
        rows = torch.cat([drawn[0]] + [r[2][u] for r, u in zip(rounds, used)])
        doms = torch.cat([drawn[1]] + [r[3][u] for r, u in zip(rounds, used)])
        mine = take(table, index[p * n : (p + 1) * n])
        device = out["advantages"].device
        new = {k: v.to(device) for k, v in mine.items()}
        items = out.get("num_items_in_batch")
        new["num_items_in_batch"] = torch.tensor(
            int(table["completion_mask"].index_select(0, index).sum()),
            dtype=items.dtype if isinstance(items, torch.Tensor) else torch.int64,
            device=device,
        )
        self._dataflex_rewards = rewards.index_select(0, index).to(first_rewards.device)
        # only a step's last round is cut short: the used groups lead the generated ones
        sources = index[::G] // G
        return new, (rows.index_select(0, index), doms.index_select(0, index)), sources

    # ------------------------------------------------------------------ select / reweight
    def _decide_and_apply(self, out, n, step, drawn, gen_seconds, sources=None) -> dict[str, float]:
        """Build the global batch, decide (identically on every rank), apply to this rank
        (``sources``: `_refill`'s, for the decision log)."""
        acc = self.accelerator
        mask = out["completion_mask"]
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        local = torch.stack([out["advantages"].float(), loss_mask.sum(1).float()], 1)
        both = acc.gather(local).cpu()  # one collective: [N, 2]
        advantages, lengths = both[:, 0], both[:, 1].round().to(torch.int64)
        token_mask = old_logps = entropies = micro = None
        strategy = self.driver.strategy
        if {"old_log_probs", "entropies"} & strategy.reads:
            token_mask, old_logps, entropies = gather_token_fields(
                self, out, loss_mask, entropies="entropies" in strategy.reads
            )
        if "micro_batch_ids" in strategy.requires:  # after TRL's shuffle, which rows meet
            local = predicted_micro_batches(self, n)
            self._dataflex_micro = local
            out[ROW_KEY] = torch.arange(n, device=mask.device)
            micro = acc.gather(local.to(acc.device)).cpu()
        rewards = self._dataflex_rewards
        if rewards is None:
            raise RuntimeError(
                "dataflex: GRPOTrainer did not call _calculate_rewards for this generation "
                "(a rollout path this host does not know)"
            )
        self._dataflex_rewards = None
        batch = build_batch(
            rewards=trl_rewards(rewards, self.reward_weights),
            advantages=advantages,
            lengths=lengths,
            group_size=self.num_generations,
            step=step,
            domains=self.driver.intake.domains if drawn is not None else None,
            domain_ids=drawn[1] if drawn is not None else None,
            prompt_keys=drawn[0].tolist() if drawn is not None else None,
            response_mask=token_mask,
            old_log_probs=old_logps if "old_log_probs" in strategy.reads else None,
            entropies=entropies,
            micro_batch_ids=micro,
        )
        decision, metrics = self.driver.decide(batch, gen_seconds, groups=sources)
        if acts_on_loss(strategy.spec):
            p = acc.process_index
            metrics.update(
                apply_decision(
                    out,
                    decision,
                    rows=slice(p * n, (p + 1) * n),
                    loss_type=self.args.loss_type,
                    lengths=lengths,
                    invalid=batch.invalid_mask,
                )
            )
            # row-count losses average the kept rows' KL over N rows: beta x c keeps it
            self._dataflex_kl_scale = metrics["dataflex/trl/advantage_scale"]
        return metrics

    def _compute_loss(self, model, inputs):
        """TRL's loss, with ``beta x c`` after a drop under a row-count ``loss_type``
        (`apply_decision`), so the KL term is averaged over the rows left."""
        if ROW_KEY in inputs and self.model.training:
            check_micro_batch(
                inputs, self._dataflex_micro, self._step % self.args.steps_per_generation
            )
        scale = self._dataflex_kl_scale
        if scale == 1.0 or self.beta == 0.0 or not self.model.training:
            return super()._compute_loss(model, inputs)
        beta = self.beta
        self.beta = beta * scale
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self.beta = beta

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        if self.args.should_save:  # before TRL's files: trainer_state.json comes last
            folder = os.path.join(
                self._get_output_dir(trial=trial),
                f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}",
            )
            self.driver.save(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        self.driver.restore(checkpoint)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            self.driver.close()
