"""`DataflexGRPOTrainer`: TRL 1.16's ``GRPOTrainer`` with a data strategy in the loop.

One generation batch of TRL, with what this class adds (``docs/hosts/trl.md``)::

    _prepare_inputs -> _generate_and_score_completions(inputs)
        [intake: mix + prerollout choose exactly gen_batch / G prompts, each G times]
        super(): generate, _calculate_rewards [keep the gathered rewards], advantages
        [gather advantages and lengths; strategy.decide on every rank; apply_decision]
    _compute_loss per micro-batch (the weights ride in the advantages, drops in the masks;
        with beta > 0 under a row-count loss_type, the KL term is scaled by c like them)
    _save_checkpoint / _load_optimizer_and_scheduler   [strategy and intake state]

The dataloader keeps running as TRL built it, but with the intake it is only a clock: its
rows are replaced at generation time, so its prefetch and its replay on resume do not matter.
A TRL script changes the trainer class and adds one block::

    args = DataflexGRPOConfig(..., dataflex={"strategy": "difffilter"})
    trainer = DataflexGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from dataclasses import dataclass, field

import torch
from torch.utils.data import IterableDataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.accounting import generation_metrics
from dataflex_rl.hosts.common.config import HostConfig, uses_intake
from dataflex_rl.hosts.common.intake import Intake, intake_for, read_row_domains
from dataflex_rl.hosts.common.state import load_state, save_state
from dataflex_rl.hosts.trl.batch import build_batch, trl_rewards
from dataflex_rl.hosts.trl.config import build_strategy, parse_block
from dataflex_rl.hosts.trl.loss import apply_decision

logger = logging.getLogger("dataflex_rl.hosts.trl")

#: written into every ``checkpoint-N`` folder, before TRL's own files
STATE_FILE = "dataflex_state.safetensors"


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


def check_map_style(dataset) -> None:
    """The intake indexes the training set: refuse one it cannot index.

    Raises:
        ValueError: ``dataset`` is None, an ``IterableDataset``, or lacks ``__getitem__``
            / ``__len__``.
    """
    iterable = isinstance(dataset, IterableDataset) or type(dataset).__name__ == "IterableDataset"
    indexable = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if dataset is None or iterable or not indexable:
        raise ValueError(
            "train_dataset: a strategy that mixes domains or pre-filters prompts draws rows by "
            "index at generation time, so it needs a map-style dataset (datasets.Dataset or a "
            f"torch Dataset with __getitem__ and __len__), got {type(dataset).__name__}. "
            "Load it without streaming=True, or use a select/reweight-only strategy"
        )


class DataflexGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus a dataflex `Strategy`.

    Args:
        *args, **kwargs: GRPOTrainer's.
        dataflex: the ``dataflex`` block (mapping or YAML path), when ``args`` is not a
            `DataflexGRPOConfig` or leaves it unset. Giving it both ways is an error.

    The block and the strategy are checked before GRPOTrainer builds anything (unknown names,
    a ``loss_type`` the host cannot renormalize, a group strategy under batch-normalized
    advantages, ...); the strategy is built for real once the training set is known.
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
        probe = build_strategy(self.dataflex, grpo_args, None, early=True)
        row_domains = None
        if uses_intake(probe):
            train_dataset = bound.get("train_dataset")
            check_map_style(train_dataset)
            row_domains = read_row_domains(
                train_dataset, self.dataflex.domain_key, train_dataset, logger
            )
        self.strategy = None
        self.intake: Intake | None = None
        self.decision_log = None
        self._dataflex_step = 0  # decisions made: one per generation batch
        self._dataflex_rewards = None  # the gathered [N, F] rewards of this generation
        self._dataflex_kl_scale = 1.0  # c of the generation the loss now reads (beta x c)
        super().__init__(*args, **kwargs)
        self._setup_strategy(row_domains)

    # ------------------------------------------------------------------ set-up
    def _setup_strategy(self, row_domains: list[str] | None) -> None:
        """Build the strategy on TRL's final args; ``row_domains`` (read before the model
        was prepared) is None unless the strategy mixes or pre-filters."""
        domains = None
        if row_domains is not None:
            domains, self.intake = intake_for(self.dataflex, row_domains)
        self.strategy = build_strategy(self.dataflex, self.args, domains)
        self.decision_log = self._open_decision_log(domains)
        logger.info(
            "dataflex: strategy %r (%s)%s",
            self.strategy.spec.name,
            ", ".join(self.strategy.parts) or "no mechanism",
            f"; intake over domains {list(domains)}" if domains else "",
        )

    def _open_decision_log(self, domains):
        """A `DecisionLog` on the main process when ``dataflex.decision_log.enabled``."""
        c = self.dataflex.decision_log
        if not c.enabled or not self.accelerator.is_main_process:
            return None
        from dataflex_rl.hosts.common.decision_log import DecisionLog

        log = DecisionLog.from_config(
            c,
            self.args.output_dir,
            strategy=self.strategy,
            domains=domains,
            host="trl",
            seed=self.dataflex.seed,
            settings={"loss_type": self.args.loss_type},
        )
        logger.info("dataflex: decision log in %s", log.folder)
        return log

    # ------------------------------------------------------------------ hooks
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dataflex_rewards = rewards  # gathered [N, F]; read once by the hook below
        return rewards

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation: TRL's own path, untouched
            return super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        step = self._dataflex_step
        pending: dict[str, float] = {}
        drawn = None
        if self.intake is not None:
            inputs, drawn, pending = self._intake(inputs, step)
        self._dataflex_rewards = None
        self._dataflex_kl_scale = 1.0
        t1 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        t2 = time.perf_counter()
        metrics = self._decide_and_apply(out, len(inputs), step, drawn, pending, t2 - t1)
        metrics["dataflex/host_time_ms"] = (t1 - t0 + time.perf_counter() - t2) * 1e3
        train = self._metrics["train"]
        for key, value in metrics.items():
            train[key].append(float(value))
        return out

    # ------------------------------------------------------------------ intake
    def _intake(self, inputs: list[dict], step: int):
        """Replace the dataloader's rows by the strategy's draw: exactly N / G prompts over
        all ranks, each G times in a row; this rank keeps its slice of the N rows.

        Returns:
            (this rank's rows, (global rows [N], global domain ids [N]), draw metrics).
        """
        n = len(inputs)
        P = self.accelerator.num_processes
        G = self.num_generations
        rows, doms, metrics = self.intake.draw(n * P // G, self.strategy, step)
        rows_global = torch.tensor(rows, dtype=torch.int64).repeat_interleave(G)
        doms_global = torch.tensor(doms, dtype=torch.int64).repeat_interleave(G)
        p = self.accelerator.process_index
        local = rows_global[p * n : (p + 1) * n].tolist()
        unique = sorted(set(local))
        keys = list(inputs[0]) if inputs else None
        ds = self.train_dataset
        if isinstance(getattr(ds, "column_names", None), list):
            cols = ds[unique]  # one columnar read
            fetched = [{k: cols[k][i] for k in cols} for i in range(len(unique))]
        else:
            fetched = [ds[i] for i in unique]
        by_row = {r: f for r, f in zip(unique, fetched)}
        # a fresh dict per completion: TRL writes rollout fields into its inputs
        new_inputs = [
            {k: v for k, v in by_row[r].items() if keys is None or k in keys} for r in local
        ]
        return new_inputs, (rows_global, doms_global), metrics

    # ------------------------------------------------------------------ select / reweight
    def _decide_and_apply(self, out, n, step, drawn, pending, gen_seconds) -> dict[str, float]:
        """Build the global batch, decide (identically on every rank), apply to this rank."""
        acc = self.accelerator
        mask = out["completion_mask"]
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        local = torch.stack([out["advantages"].float(), loss_mask.sum(1).float()], 1)
        both = acc.gather(local).cpu()  # one collective: [N, 2]
        advantages, lengths = both[:, 0], both[:, 1].round().to(torch.int64)
        token_mask = old_logps = None
        if "old_log_probs" in self.strategy.reads:
            token_mask, old_logps = self._gather_token_fields(out, loss_mask)
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
            domains=self.intake.domains if drawn is not None else None,
            domain_ids=drawn[1] if drawn is not None else None,
            prompt_keys=drawn[0].tolist() if drawn is not None else None,
            response_mask=token_mask,
            old_log_probs=old_logps,
        )
        target = self.strategy.proportions  # what this batch was drawn at
        decision = self.strategy.decide(batch)
        self._dataflex_step += 1
        metrics = {**decision.metrics, **pending}  # the draw's figures, as on verl
        if self.decision_log is not None:
            self.decision_log.record(batch, decision, target=target, metrics=pending)
        if "prerollout" in self.strategy.parts:
            metrics.update(
                generation_metrics(
                    batch, pending.get("dataflex/prerollout/tokens_saved_est"), gen_seconds
                )
            )
        if "select" in self.strategy.parts or "reweight" in self.strategy.parts:
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
        """TRL's loss; with ``beta > 0`` under a row-count ``loss_type`` after a drop, with
        ``beta x c`` (c = N / R, `apply_decision`), so the KL term of the rows left is
        averaged over them, as the policy term is (every micro-batch of the generation)."""
        scale = self._dataflex_kl_scale
        if scale == 1.0 or self.beta == 0.0 or not self.model.training:
            return super()._compute_loss(model, inputs)
        beta = self.beta
        self.beta = beta * scale
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self.beta = beta

    def _gather_token_fields(self, out, loss_mask):
        """([N, T] loss mask, [N, T] old log-probs), padded across ranks and gathered.

        TRL computes old log-probs only off-policy; otherwise they are computed here, with
        the model that generated (one forward pass without gradients).
        """
        old = out.get("old_per_token_logps")
        if old is None:
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
            with (
                torch.no_grad(),
                disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
            ):
                old, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    ids,
                    attn,
                    out["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
        acc = self.accelerator
        mask = acc.gather(acc.pad_across_processes(loss_mask.int(), dim=1)).cpu().bool()
        logps = acc.gather(acc.pad_across_processes(old.float(), dim=1)).cpu()
        return mask, torch.where(mask, logps, torch.zeros_like(logps))

    # ------------------------------------------------------------------ checkpoints
    def dataflex_state_dict(self) -> dict:
        return {
            "format": 1,
            "decisions": self._dataflex_step,
            "strategy": self.strategy.state_dict(),
            "intake": None if self.intake is None else self.intake.state_dict(),
        }

    def load_dataflex_state_dict(self, state: dict) -> None:
        self.strategy.load_state_dict(state["strategy"])
        self._dataflex_step = int(state["decisions"])
        if self.intake is not None:
            if state.get("intake") is None:
                raise ValueError(
                    "dataflex: the checkpoint has no intake state, but the strategy mixes "
                    "or pre-filters"
                )
            self.intake.load_state_dict(state["intake"])

    def _save_checkpoint(self, model, trial):
        if self.args.should_save:  # before TRL's files: trainer_state.json comes last
            folder = os.path.join(
                self._get_output_dir(trial=trial),
                f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}",
            )
            save_state(os.path.join(folder, STATE_FILE), self.dataflex_state_dict())
            if self.decision_log is not None:  # the log never lags a checkpoint
                self.decision_log.flush()
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            logger.warning(
                "dataflex: resuming from %s without %s; the strategy starts fresh",
                checkpoint,
                STATE_FILE,
            )
            return
        self.load_dataflex_state_dict(load_state(path))
        if self.decision_log is not None:  # drop steps logged after the checkpoint
            self.decision_log.truncate(self._dataflex_step)
        logger.info("dataflex: restored strategy state from %s", path)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.decision_log is not None:
                self.decision_log.close()
