"""One engine step's rollout as data: the strategy's `RolloutBatch` (with the engine's GRPO
advantages) and the step's reward and generation-cost figures (docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dataflex_rl.core.advantages import group_advantages
from dataflex_rl.core.batch import TENSOR_FIELDS, RolloutBatch
from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.hosts.engine.config import GRPOConfig
from dataflex_rl.hosts.engine.sampler import Rollout

#: RolloutBatch fields the engine fills
ENGINE_FIELDS = (*TENSOR_FIELDS, "prompt_keys", "step")


def grpo_batch(
    rollout: Rollout,
    rewards: torch.Tensor,
    problems: Sequence,
    domain_idx: Sequence[int],
    domains: Sequence[str],
    step: int,
    grpo: GRPOConfig,
) -> RolloutBatch:
    """The rollout of ``problems`` (G responses each, scored ``rewards`` [B]) as the batch the
    strategy decides on, with GRPO advantages per response and per token; one micro-batch."""
    group_ids = rollout.prompt_index
    # every group holds grpo.group_size >= 2 responses, so every group has a baseline
    adv = group_advantages(
        rewards.to(torch.float32),
        group_ids,
        len(problems),
        norm_by_std=grpo.norm_adv_by_std,
        eps=grpo.adv_eps,
    )
    mask = rollout.response_mask
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=group_ids,
        domain_ids=torch.tensor(list(domain_idx), dtype=torch.int64)[group_ids],
        domains=tuple(domains),
        advantages=adv[:, None] * mask,  # for the loss
        old_log_probs=rollout.old_log_probs,
        prompt_keys=tuple(problems[i].key for i in group_ids.tolist()),
        step=step,
        # one outcome advantage per response: decisions read these B values exactly
        response_advantages=adv,
        response_lengths=mask.sum(1),
        entropies=rollout.entropies,
        micro_batch_ids=torch.zeros(len(group_ids), dtype=torch.int64),
    )


def reward_metrics(
    rewards: torch.Tensor, domain_idx: Sequence[int], rollout: Rollout, domains: Sequence[str]
) -> dict[str, float]:
    """The step's mean reward (overall and per domain), response length, truncated share and
    generated tokens."""
    d_rows = torch.tensor(list(domain_idx), dtype=torch.int64)[rollout.prompt_index]
    D = len(domains)
    n = torch.bincount(d_rows, minlength=D)
    s = torch.zeros(D).index_add_(0, d_rows, rewards)
    out = {
        "train/reward": float(rewards.mean()),
        "train/response_length": float(rollout.response_mask.sum(1).float().mean()),
        "train/truncated_fraction": float((~rollout.finished).float().mean()),
        "engine/tokens_generated": float(rollout.num_tokens),
    }
    for d, name in enumerate(domains):
        if int(n[d]):
            out[f"train/{metric_domain(name)}/reward"] = float(s[d] / n[d])
    return out


def zero_variance_metrics(batch: RolloutBatch) -> dict[str, float]:
    """The response tokens of zero-variance groups (an oracle skip policy's saving) and the
    number of groups with signal."""
    present = batch.group_size > 0
    zero = (batch.group_std == 0) & present
    tokens = torch.zeros(batch.num_groups, dtype=torch.float64).index_add_(
        0, batch.group_ids, (batch.response_length * batch.active_mask).to(torch.float64)
    )
    return {
        "engine/tokens_zero_variance": float(tokens[zero].sum()),
        "engine/groups_effective": float((present & ~zero).sum()),
    }
