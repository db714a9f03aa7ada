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
from dataflex_rl.hosts.common.step import Generation
from dataflex_rl.hosts.trl.batch import (
    build_batch,
    dataset_rows,
    group_advantages_trl,
    refill_domains,
    trl_rewards,
)
from dataflex_rl.hosts.trl.config import check, host_settings, parse_block
from dataflex_rl.hosts.trl.loss import apply_decision
from dataflex_rl.hosts.trl.refill import cat_rows, check_refillable, cpu_rows, take
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


class DriverCheckpoints:
    """A TRL trainer's `Driver` saved and restored with its checkpoints (the strategy's state
    before TRL's files, since trainer_state.json comes last) and closed when training ends;
    mixed in before the TRL trainer class."""

    def _save_checkpoint(self, model, trial):
        if self.args.should_save:
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


class DataflexGRPOTrainer(DriverCheckpoints, GRPOTrainer):
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
        draws = spec.refill is not None or spec.rollouts is not None  # through the intake
        if uses_intake(spec) or draws and self.dataflex.domain_key:
            row_domains = read_row_domains(
                train_dataset, self.dataflex.domain_key, train_dataset, logger
            )
        elif draws:  # refill and per-prompt budgets draw by the intake: one domain unless named
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
        driver = self.driver
        acc = self.accelerator
        P, G, n = acc.num_processes, self.num_generations, len(inputs)
        self._dataflex_kl_scale = 1.0
        out = driver.step(
            _TRLStep(self, inputs),
            n * P // G,
            driver.decisions,
            given=None if driver.intake is not None else (inputs, None),
            granule=P // math.gcd(G, P),
        )
        metrics = dict(out.metrics)
        rows = out.rows.out
        if acts_on_loss(driver.strategy.spec):
            p = acc.process_index
            metrics.update(
                apply_decision(
                    rows,
                    out.decision,
                    rows=slice(p * n, (p + 1) * n),
                    loss_type=self.args.loss_type,
                    lengths=out.batch.response_length,
                    invalid=out.batch.invalid_mask,
                )
            )
            # row-count losses average the kept rows' KL over N rows: beta x c keeps it
            self._dataflex_kl_scale = metrics["dataflex/trl/advantage_scale"]
        seconds = sum(g.seconds for g in out.generations)
        metrics["dataflex/host_time_ms"] = (time.perf_counter() - t0 - seconds) * 1e3
        train = self._metrics["train"]
        for key, value in metrics.items():
            train[key].append(float(value))
        return rows

    def _batch_of(self, out, rewards, step, drawn, micro: bool):
        """The global `RolloutBatch` of a generation output ``out`` (this rank's rows; its
        gathered [N, F] ``rewards``; ``drawn``: (global rows [N], domain ids [N]) or None):
        advantages and loss lengths gathered, the token fields the strategy reads, and with
        ``micro`` the loss micro-batch of each row as TRL will shuffle them."""
        acc = self.accelerator
        mask = out["completion_mask"]
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        local = torch.stack([out["advantages"].float(), loss_mask.sum(1).float()], 1)
        both = acc.gather(local).cpu()  # one collective: [N, 2]
        token_mask = old_logps = entropies = micro_ids = None
        strategy = self.driver.strategy
        if {"old_log_probs", "entropies"} & strategy.reads:
            token_mask, old_logps, entropies = gather_token_fields(
                self, out, loss_mask, entropies="entropies" in strategy.reads
            )
        if micro and "micro_batch_ids" in strategy.requires:  # after TRL's shuffle
            n = mask.shape[0]
            mine = predicted_micro_batches(self, n)
            self._dataflex_micro = mine
            out[ROW_KEY] = torch.arange(n, device=mask.device)
            micro_ids = acc.gather(mine.to(acc.device)).cpu()
        if rewards is None:
            raise RuntimeError(
                "dataflex: GRPOTrainer did not call _calculate_rewards for this generation "
                "(a rollout path this host does not know)"
            )
        return build_batch(
            rewards=trl_rewards(rewards, self.reward_weights),
            advantages=both[:, 0],
            lengths=both[:, 1].round().to(torch.int64),
            group_size=self.num_generations,
            step=step,
            domains=self.driver.intake.domains if drawn is not None else None,
            domain_ids=drawn[1] if drawn is not None else None,
            prompt_keys=drawn[0].tolist() if drawn is not None else None,
            response_mask=token_mask,
            old_log_probs=old_logps if "old_log_probs" in strategy.reads else None,
            entropies=entropies,
            micro_batch_ids=micro_ids,
        )

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


@dataclass
class _Rows:
    """A generation's rows on this rank: TRL's output, its gathered [N, F] rewards and the
    global (dataset rows [N], domain ids [N]) drawn (None: the dataloader's own rows)."""

    out: dict
    rewards: torch.Tensor
    drawn: tuple[torch.Tensor, torch.Tensor] | None


class _TRLStep:
    """The TRL host's part of `Driver.step` for one generation batch: TRL's own generation
    and scoring of this rank's share of the prompts, and the layout of its rows."""

    def __init__(self, trainer: DataflexGRPOTrainer, inputs: list[dict]) -> None:
        self.trainer = trainer
        self.keys = list(inputs[0]) if inputs else None
        self.step = trainer.driver.decisions

    @property
    def group_size(self) -> int:
        return self.trainer.num_generations

    def generate(self, items, domain_ids, round, counts=None):
        if counts is not None:  # refused up front (check_host_fit)
            raise ValueError("dataflex: TRL generates num_generations per prompt")
        tr = self.trainer
        acc = tr.accelerator
        strategy = tr.driver.strategy
        refills = strategy.refill_rounds > 0 or strategy.rollouts is not None
        drawn = None
        local = items  # no intake: the dataloader's rows, as they are
        if tr.driver.intake is not None:  # dataset rows: every rank generates its share
            G, P, p = tr.num_generations, acc.num_processes, acc.process_index
            rows = torch.tensor(items, dtype=torch.int64).repeat_interleave(G)
            doms = torch.tensor(domain_ids, dtype=torch.int64).repeat_interleave(G)
            m = rows.shape[0] // P
            local = dataset_rows(tr.train_dataset, rows[p * m : (p + 1) * m].tolist(), self.keys)
            drawn = (rows, doms)
        t0 = time.perf_counter()
        tr._dataflex_rewards = None
        out = GRPOTrainer._generate_and_score_completions(tr, local)
        seconds = time.perf_counter() - t0
        rewards, tr._dataflex_rewards = tr._dataflex_rewards, None
        if refills:
            check_refillable(out)
        batch = tr._batch_of(out, rewards, self.step, drawn, micro=not refills)
        return Generation(batch, _Rows(out, rewards, drawn), seconds=seconds)

    def assemble(self, generations, rows, group_ids, items, domain_ids):
        first = generations[0]
        if len(generations) == 1 and torch.equal(rows, torch.arange(first.batch.batch_size)):
            return first.rows, first.batch
        tr = self.trainer
        acc = tr.accelerator
        P, p = acc.num_processes, acc.process_index
        n = first.rows.out["completion_mask"].shape[0]
        if rows.numel() != P * n:
            raise RuntimeError(
                f"dataflex: the step assembled {rows.numel()} completions, but TRL's "
                f"generation batch holds {P * n} (a prompt's completions left too few scored)"
            )
        pad = getattr(tr.processing_class, "pad_token_id", None) or 0
        every = [g.rows for g in generations]
        table = cat_rows([cat_rows(gather_object([cpu_rows(r.out)]), pad) for r in every], pad)
        mine = take(table, rows[p * n : (p + 1) * n])
        device = first.rows.out["advantages"].device
        out = {k: v.to(device) for k, v in mine.items()}
        total = first.rows.out.get("num_items_in_batch")
        out["num_items_in_batch"] = torch.tensor(
            int(table["completion_mask"].index_select(0, rows).sum()),
            dtype=total.dtype if isinstance(total, torch.Tensor) else torch.int64,
            device=device,
        )
        rewards = torch.cat([r.rewards.cpu() for r in every]).index_select(0, rows)
        if tr.driver.strategy.rollouts is not None:  # groups mix rounds: TRL's advantages anew
            out["advantages"] = group_advantages_trl(
                trl_rewards(rewards, tr.reward_weights), group_ids, tr.scale_rewards != "none"
            )[p * n : (p + 1) * n].to(device)
        rewards = rewards.to(first.rows.rewards.device)
        drawn = tuple(torch.cat([r.drawn[i] for r in every]).index_select(0, rows) for i in (0, 1))
        batch = tr._batch_of(out, rewards, self.step, drawn, micro=True)
        return _Rows(out, rewards, drawn), batch
