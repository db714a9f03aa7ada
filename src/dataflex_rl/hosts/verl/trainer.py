"""The ``dataflex`` trainer mode: verl 0.9.x's sync PPO trainer with a data strategy in the loop.

Hooks (docs/hosts/verl.md#what-happens-in-a-step): ``_next_train_batch`` draws from the
intake, ``_compute_advantage`` decides and writes back, ``_save_checkpoint`` /
``_load_checkpoint`` save and restore the driver. Registered under
``trainer.v1.trainer_mode=dataflex`` by `dataflex_rl.hosts.verl.plugin`; the mode is
switched to ``"sync"`` before the replay buffer is built (verl treats others as async).
"""

from __future__ import annotations

import logging
import os
import time
import uuid

import numpy as np
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
from verl.utils.dataset.rl_dataset import collate_fn
from verl.workers.utils.padding import response_to_nested

from dataflex_rl.hosts.common.config import acts_on_loss, uses_intake
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import read_row_domains
from dataflex_rl.hosts.verl.batch import build_batch, writeback
from dataflex_rl.hosts.verl.config import (
    PER_RESPONSE_ESTIMATORS,
    REFILL_LIMITATION,
    check,
    host_settings,
    parse_host_config,
    refill_overrides,
)

logger = logging.getLogger("dataflex_rl.hosts.verl")

TRAINER_MODE = "dataflex"
#: verl settings the strategy checks read
_VIEW_KEYS = (
    "trainer.use_v1",
    "algorithm.adv_estimator",
    "algorithm.norm_adv_by_std_in_grpo",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "algorithm.rollout_correction.bypass_mode",
    "algorithm.filter_groups",
)


def host_view(config: DictConfig) -> dict:
    """The few verl settings the checks read, as plain nested dicts."""
    view: dict = {}
    for dotted in _VIEW_KEYS:
        value = OmegaConf.select(config, dotted, default=None)
        if value is None:
            continue
        if isinstance(value, DictConfig):
            value = OmegaConf.to_container(value, resolve=True)
        node = view
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return view


@register_trainer(TRAINER_MODE)
class DataflexTrainer(PPOTrainerSync):
    """verl's sync trainer plus a dataflex `Strategy` (the ``dataflex`` block), run by a
    `Driver`: checked before anything starts, built once the training set is loaded."""

    def __init__(self, config: DictConfig) -> None:
        block = config.get("dataflex", None)
        block = OmegaConf.to_container(block, resolve=True) if block is not None else None
        self.dataflex = parse_host_config(block)
        view = host_view(config)
        self._host = host_settings(view)
        self._spec = check(self.dataflex, view)  # fail before workers start
        overrides = refill_overrides(self._spec, view)  # refill: verl's own filter_groups
        if overrides:
            logger.warning(REFILL_LIMITATION, self._spec.name, self._spec.refill.max_rounds)
            with open_dict(config):
                for key, value in overrides.items():
                    OmegaConf.update(config, key, value, force_add=True)
        self.driver: Driver | None = None
        self._prompts: dict[str, tuple[int, int, int]] = {}  # uid -> (row, domain, step)
        self._gen_mark: tuple[int, float] = (-1, 0.0)  # (global step, gen seconds so far)
        super().__init__(config)

    # ------------------------------------------------------------------ set-up
    def _build_replay_buffer(self):
        self.trainer_mode = "sync"  # verl tests == "sync" in five places
        buffer = super()._build_replay_buffer()
        if self.dataflex.poll_interval is not None and hasattr(buffer, "poll_interval"):
            buffer.poll_interval = self.dataflex.poll_interval
        return buffer

    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        row_domains = None
        if uses_intake(self._spec):
            table = getattr(self.train_dataset, "dataframe", None)
            row_domains = read_row_domains(
                self.train_dataset, self.dataflex.domain_key, table, logger
            )
        self.driver = Driver.for_dataset(
            self.dataflex,
            self._spec,
            self._host,
            row_domains,
            self.config.trainer.default_local_dir,
        )

    # ------------------------------------------------------------------ intake
    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        if self.driver.intake is None:
            return super()._next_train_batch(num_prompts)
        n = num_prompts or self.config.data.train_batch_size
        step = self._strategy_step()
        rows, doms, _ = self.driver.draw(n, step)  # refills (DAPO) add to this step's counts
        batch_dict = collate_fn([self.train_dataset[r] for r in rows])
        uids = [str(uuid.uuid4()) for _ in rows]
        batch_dict["uid"] = np.array(uids, dtype=object)
        self._prompts.update((u, (r, d, step)) for u, r, d in zip(uids, rows, doms))
        batch = tu.get_tensordict(batch_dict)
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        return batch

    def _strategy_step(self) -> int:
        """Strategy steps count from 0 like the engine's; verl's global steps from 1."""
        return max(int(self.global_steps) - 1, 0)

    # ------------------------------------------------------------------ select / reweight
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._compute_advantage(batch, metrics)
        t0 = time.perf_counter()
        batch = self._apply_strategy(batch, metrics)
        metrics["dataflex/host_time_ms"] = (time.perf_counter() - t0) * 1e3
        return batch

    def _apply_strategy(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Read the batch, decide, write weights/masks/advantages back; return the new meta."""
        present = set(batch.fields or ())
        optional = [f for f in ("old_log_probs", "rollout_is_weights") if f in present]
        if "entropies" in self.driver.strategy.reads:
            if "entropy" not in present:
                raise RuntimeError(
                    "dataflex: the strategy reads entropies, but verl wrote no 'entropy' "
                    "field for this batch (ppo/v1/trainer_base.py, _compute_old_log_prob "
                    "writes it when it computes old log-probs)"
                )
            optional.append("entropy")
        fields = ["uid", "response_mask", "loss_mask", "rm_scores", "advantages", *optional]
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        nested_mask = data["response_mask"]
        uids = [str(u) for u in data["uid"]]
        dense = data.exclude("uid").to_padded_tensor()
        step = self._strategy_step()
        intake = self.driver.intake
        rb, sessions = build_batch(
            keys=batch.keys,
            uids=uids,
            is_padding=[bool(t.get("is_padding", False)) for t in batch.tags],
            rm_scores=dense["rm_scores"],
            response_mask=dense["response_mask"],
            advantages=dense["advantages"],
            old_log_probs=dense.get("old_log_probs", None),
            entropies=dense.get("entropy", None),
            step=step,
            domains=intake.domains if intake is not None else None,
            domain_of_uid=(lambda u: self._submitted(u)[1]) if intake is not None else None,
            prompt_of_uid=(lambda u: self._submitted(u)[0]) if intake is not None else None,
            per_response_advantages=self._host.advantage_estimator in PER_RESPONSE_ESTIMATORS,
        )
        decision, decided = self.driver.decide(rb, self._generation_seconds())
        metrics.update(decided)
        self._forget_prompts(step)
        if not acts_on_loss(self._spec):
            return batch
        wb = writeback(
            decision,
            rb,
            sessions,
            response_mask=dense["response_mask"],
            loss_mask=dense["loss_mask"],
            advantages=dense["advantages"],
            existing_weights=dense.get("rollout_is_weights", None),
        )
        metrics["dataflex/composed_rollout_is_weights"] = float("rollout_is_weights" in present)
        fields = {k: response_to_nested(v, nested_mask) for k, v in wb.fields().items()}
        return tq.kv_batch_put(
            keys=batch.keys,
            partition_id=batch.partition_id,
            fields=TensorDict(fields, batch_size=len(batch)),
        )

    def _generation_seconds(self) -> float | None:
        """Seconds verl's ``gen`` timer spent on this batch (None outside `fit`): the part
        since the previous batch of the same step (verl accumulates it over a step)."""
        timing = getattr(self, "timing_raw", None)
        if not timing or "gen" not in timing:
            return None
        total = float(timing["gen"])
        step, before = self._gen_mark
        self._gen_mark = (self.global_steps, total)
        return total - before if step == self.global_steps else total

    def _submitted(self, uid: str) -> tuple[int, int, int]:
        """(dataset row, domain id, step) recorded when the intake submitted ``uid``."""
        try:
            return self._prompts[uid]
        except KeyError:
            raise KeyError(
                f"dataflex: prompt {uid!r} was not submitted by the dataflex intake "
                "(was it generated by another path?)"
            ) from None

    def _forget_prompts(self, step: int) -> None:
        """Drop intake records older than the previous step (e.g. groups DAPO evicted)."""
        self._prompts = {u: v for u, v in self._prompts.items() if v[2] >= step - 1}

    def fit(self, *args, **kwargs):
        try:
            return super().fit(*args, **kwargs)
        finally:
            self.driver.close()

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self) -> None:
        folder = os.path.join(
            self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
        )
        self.driver.save(folder)
        super()._save_checkpoint()  # writes latest_checkpointed_iteration.txt last

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        folder = self._resumed_folder() if self.global_steps > 0 else None
        self.driver.restore(folder, max(int(self.global_steps), 0))

    def _resumed_folder(self) -> str | None:
        """The ``global_step_N`` folder verl's `_load_checkpoint` resumed from."""
        t = self.config.trainer
        if t.resume_mode == "auto":
            return find_latest_ckpt_path(os.path.abspath(t.default_local_dir))
        if t.resume_mode == "resume_path" and t.resume_from_path:
            return os.path.abspath(t.resume_from_path)
        return None
