"""The ``dataflex`` trainer modes: verl 0.9.x's PPO trainers with a data strategy in the loop.

``dataflex`` is verl's sync trainer (`PPOTrainerSync`), ``dataflex_colocate_async`` and
``dataflex_separate_async`` its asynchronous ones (`PPOTrainerColocateAsync`,
`PPOTrainerSeparateAsync`), each with the same hooks (`DataflexHooks`;
docs/hosts/verl.md#what-happens-in-a-step): ``_next_train_batch`` draws from the intake
(every batch verl submits: the step's, the asynchronous warm-up and every refill),
``_compute_advantage`` decides on the groups the replay buffer handed over for an update
and writes back, ``_save_checkpoint`` / ``_load_checkpoint`` save and restore the driver.
Registered by `dataflex_rl.hosts.verl.plugin`; the mode is switched to verl's own
(`TRAINER_MODES`) before the replay buffer is built (verl reads the mode's name there and in
its checkpoints).
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
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
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
    ASYNC_MODES,
    PER_RESPONSE_ESTIMATORS,
    REFILL_LIMITATION,
    REFILL_LIMITATION_ASYNC,
    admission_overrides,
    check,
    host_settings,
    parse_host_config,
    refill_overrides,
)

logger = logging.getLogger("dataflex_rl.hosts.verl")

TRAINER_MODE = "dataflex"  # the sync one; every mode: `TRAINER_MODES`
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


class DataflexHooks:
    """A dataflex `Strategy` (the ``dataflex`` block) inside one of verl's v1 trainers (the
    class it is mixed into, `VERL_MODE`), run by a `Driver`: checked before anything
    starts, built once the training set is loaded.

    Strategy steps count updates from 0: ``(global_steps - 1) x parameter_sync_step +``
    the update's index within the step (sync and colocate_async: one update a step). In the
    asynchronous modes each trained response's ``staleness`` is the policy versions between
    the oldest weights that generated it and the weights it updates (verl's
    ``min_global_steps`` tag: ``global_steps - 1 - min_global_steps``, verl's
    ``trajectory_staleness_worst``)."""

    #: the verl mode this trainer extends (`TRAINER_MODES`)
    VERL_MODE = "sync"

    def __init__(self, config: DictConfig) -> None:
        block = config.get("dataflex", None)
        block = OmegaConf.to_container(block, resolve=True) if block is not None else None
        self.dataflex = parse_host_config(block)
        view = host_view(config)
        self._host = host_settings(view, self.VERL_MODE)
        self._spec = check(self.dataflex, view, self.VERL_MODE)  # fail before workers start
        overrides = refill_overrides(self._spec, view)  # refill: verl's own filter_groups
        if overrides:
            if self.VERL_MODE in ASYNC_MODES:
                logger.warning(
                    REFILL_LIMITATION_ASYNC,
                    self._spec.name,
                    self.VERL_MODE,
                    self._spec.refill.max_rounds,
                )
            else:
                logger.warning(REFILL_LIMITATION, self._spec.name, self._spec.refill.max_rounds)
        admitted = admission_overrides(self._spec, self.VERL_MODE)
        if admitted:
            logger.info(
                "dataflex: admission max_staleness %d, past: drop -> verl's %s",
                self._spec.admission.max_staleness,
                ", ".join(f"{k}={v}" for k, v in admitted.items()),
            )
        overrides.update(admitted)
        if overrides:
            with open_dict(config):
                for key, value in overrides.items():
                    OmegaConf.update(config, key, value, force_add=True)
        self.driver: Driver | None = None
        self._prompts: dict[str, tuple[int, int, int]] = {}  # uid -> (row, domain, step)
        self._gen_mark: tuple[int, float] = (-1, 0.0)  # (global step, gen seconds so far)
        super().__init__(config)

    @property
    def asynchronous(self) -> bool:
        return self.VERL_MODE in ASYNC_MODES

    # ------------------------------------------------------------------ set-up
    def _build_replay_buffer(self):
        # verl read its mode's settings under this trainer's own name (none there): it tests
        # trainer_mode == "sync" in five places and reads trainer.v1.<mode> for the buffer,
        # parameter_sync_step and checkpoints
        self.trainer_mode = self.VERL_MODE
        mode_config = self.config.trainer.v1.get(self.VERL_MODE, {}) or {}
        self.parameter_sync_step = int(mode_config.get("parameter_sync_step", 1))
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

    def prepare_step(self) -> dict:
        # verl submits the step's batch before its updates set local_trigger_step: the draw
        # belongs to the step's first update, not to the previous step's last
        self.local_trigger_step = 0
        return super().prepare_step()

    def _strategy_step(self) -> int:
        """Strategy steps count updates from 0 like the engine's; verl's global steps from 1,
        each ``parameter_sync_step`` updates (``local_trigger_step``: the one running)."""
        sync = int(getattr(self, "parameter_sync_step", 1) or 1)
        local = int(getattr(self, "local_trigger_step", 0) or 0)
        return max(int(self.global_steps) - 1, 0) * sync + local

    def _staleness(self, tags: list[dict]) -> list[int] | None:
        """Per trajectory, policy versions between its oldest generating weights and the
        weights this update trains (asynchronous modes; None in sync). verl's server records
        the weights' version (``global_steps`` of their last sync) as ``min_global_steps``."""
        if not self.asynchronous:
            return None
        now = int(self.global_steps) - 1  # the weights before this step's updates
        out = []
        for t in tags:
            version = t.get("min_global_steps", t.get("max_global_steps"))
            out.append(0 if version is None else max(now - int(version), 0))
        return out

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
            staleness=self._staleness(batch.tags),
        )
        decision, decided = self.driver.decide(rb, self._generation_seconds())
        metrics.update(decided)
        self._forget_prompts(step, uids)
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

    def _forget_prompts(self, step: int, decided: list[str]) -> None:
        """Drop intake records no decision needs again: sync, those older than the previous
        step (e.g. groups DAPO evicted); asynchronous, the groups just decided (the others
        may wait in the buffer for any number of updates)."""
        if self.asynchronous:
            for u in set(decided):
                self._prompts.pop(u, None)
            if self._prompts:  # and those verl evicted (stale, zero-variance, failed)
                waiting = _waiting_uids()
                self._prompts = {u: v for u, v in self._prompts.items() if u in waiting}
            return
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
        if self.asynchronous and self.driver.intake is not None:
            # the groups waiting in TransferQueue (verl saves it in asynchronous modes) were
            # drawn by the intake: their rows and domains, for the decisions after a resume
            _save_prompts(folder, self._prompts)
        super()._save_checkpoint()  # writes latest_checkpointed_iteration.txt last

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        folder = self._resumed_folder() if self.global_steps > 0 else None
        self.driver.restore(folder, max(int(self.global_steps), 0) * self.parameter_sync_step)
        if folder is not None and self.asynchronous and self.driver.intake is not None:
            self._prompts.update(_load_prompts(folder))

    def _resumed_folder(self) -> str | None:
        """The ``global_step_N`` folder verl's `_load_checkpoint` resumed from."""
        t = self.config.trainer
        if t.resume_mode == "auto":
            return find_latest_ckpt_path(os.path.abspath(t.default_local_dir))
        if t.resume_mode == "resume_path" and t.resume_from_path:
            return os.path.abspath(t.resume_from_path)
        return None


def _waiting_uids(partition: str = "train") -> set[str]:
    """The prompt groups in TransferQueue (submitted, not yet handed to an update)."""
    listing = tq.kv_list(partition) or {}
    return {k for k, tag in listing.get(partition, {}).items() if tag.get("is_prompt", False)}


#: the intake's records of the prompts waiting in TransferQueue, in an asynchronous
#: checkpoint folder (JSON: uid -> [dataset row, domain id, strategy step])
PROMPTS_FILE = "dataflex_prompts.json"


def _save_prompts(folder: str, prompts: dict[str, tuple[int, int, int]]) -> None:
    import json

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, PROMPTS_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({u: list(v) for u, v in prompts.items()}, f)
    os.replace(tmp, path)


def _load_prompts(folder: str) -> dict[str, tuple[int, int, int]]:
    import json

    path = os.path.join(folder, PROMPTS_FILE)
    if not os.path.exists(path):
        logger.warning(
            "dataflex: %s has no %s; waiting groups lose their domains", folder, PROMPTS_FILE
        )
        return {}
    with open(path) as f:
        return {u: tuple(int(x) for x in v) for u, v in json.load(f).items()}


@register_trainer("dataflex")
class DataflexTrainer(DataflexHooks, PPOTrainerSync):
    """verl's sync trainer plus a dataflex strategy (``trainer.v1.trainer_mode=dataflex``)."""

    VERL_MODE = "sync"


@register_trainer("dataflex_colocate_async")
class DataflexColocateAsyncTrainer(DataflexHooks, PPOTrainerColocateAsync):
    """verl's colocate_async trainer plus a dataflex strategy
    (``trainer.v1.trainer_mode=dataflex_colocate_async``; settings under
    ``trainer.v1.colocate_async``)."""

    VERL_MODE = "colocate_async"


@register_trainer("dataflex_separate_async")
class DataflexSeparateAsyncTrainer(DataflexHooks, PPOTrainerSeparateAsync):
    """verl's separate_async trainer plus a dataflex strategy
    (``trainer.v1.trainer_mode=dataflex_separate_async``; settings under
    ``trainer.v1.separate_async``)."""

    VERL_MODE = "separate_async"
