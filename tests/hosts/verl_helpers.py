"""Small builders for tests against real verl 0.9.1 (import only after importorskip("verl"))."""

from __future__ import annotations

import os

import torch
import transfer_queue as tq
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def verl_config(*overrides: str):
    """verl's own ``ppo_trainer`` config, composed by Hydra, with GRPO and the dataflex mode."""
    base = [
        "algorithm.adv_estimator=grpo",
        "trainer.v1.trainer_mode=dataflex",
        "critic.enable=False",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*base, *overrides])


def dataflex_trainer(*overrides: str, build: bool = True):
    """The registered trainer built from the config, with its driver built as
    `_init_dataloader` does (no dataset: no intake)."""
    trainer = get_trainer_cls("dataflex")(verl_config(*overrides))
    if build:
        trainer.driver = with_driver(trainer, None)
        trainer.global_steps = 1
    return trainer


def with_driver(trainer, row_domains):
    """The `Driver` `_init_dataloader` builds, for these training rows' domains."""
    from dataflex_rl.hosts.common.driver import Driver

    run_dir = trainer.config.trainer.default_local_dir
    return Driver.for_dataset(trainer.dataflex, trainer._spec, trainer._host, row_domains, run_dir)


def put_groups(
    rewards: list[list[float]],
    *,
    lengths: list[list[int]] | None = None,
    rollout_log_probs: bool = False,
    seed: int = 0,
) -> list[str]:
    """Finished prompt groups and their trajectories in the ``train`` partition, as verl's
    agent loop writes them (one output per session). Returns the uids."""
    g = torch.Generator().manual_seed(seed)
    uids = [f"p{seed}g{i}" for i in range(len(rewards))]
    tq.kv_batch_put(
        keys=uids,
        partition_id="train",
        tags=[{"is_prompt": True, "status": "finished", "global_steps": 1} for _ in uids],
    )
    rows, keys, tags = [], [], []
    for gi, (uid, group) in enumerate(zip(uids, rewards)):
        for s, r in enumerate(group):
            n = lengths[gi][s] if lengths else 3 + (s % 3)
            rm = torch.zeros(n)
            rm[-1] = r
            old = -torch.rand(n, generator=g)
            row = dict(
                uid=uid,
                prompts=torch.ones(4, dtype=torch.int64),
                responses=torch.ones(n, dtype=torch.int64),
                response_mask=torch.ones(n, dtype=torch.int64),
                loss_mask=torch.ones(n, dtype=torch.int64),
                rm_scores=rm,
                old_log_probs=old,
                data_source="math",
                index=gi,
            )
            if rollout_log_probs:
                row["rollout_log_probs"] = old - 0.3 * torch.rand(n, generator=g)
            rows.append(row)
            keys.append(f"{uid}_{s}_0")
            tags.append(
                {
                    "status": "success",
                    "global_steps": 1,
                    "prompt_len": 4,
                    "response_len": n,
                    "seq_len": 4 + n,
                }
            )
    tq.kv_batch_put(
        keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows), tags=tags
    )
    return uids


def sample(num_groups: int):
    """verl's own sync replay buffer picks the batch."""
    buffer = ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=8,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.05,
    )
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=num_groups)
    return batch


def read(meta, *fields: str) -> dict:
    """Padded [B, T] tensors of ``fields`` for the rows of ``meta``, in its order."""
    data = tq.kv_batch_get(
        keys=meta.keys, partition_id=meta.partition_id, select_fields=list(fields)
    )
    return {k: data[k].to_padded_tensor(0.0) if data[k].is_nested else data[k] for k in fields}
