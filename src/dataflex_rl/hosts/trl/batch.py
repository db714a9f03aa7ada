"""TRL's gathered generation batch -> `RolloutBatch`. Needs no TRL.

A prompt's G completions are contiguous in the global order (groups ``arange(N) // G``), and
TRL's advantages are one value per completion (``response_advantages``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.advantages import group_advantages
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.hosts.trl.config import TRL_ADV_EPS


def trl_rewards(rewards_per_func: Tensor, reward_weights: Tensor) -> Tensor:
    """[N] float32 weighted sum of the [N, F] gathered rewards, NaN where every reward
    function returned None (TRL's unscorable completion: invalid for the strategy)."""
    r = rewards_per_func.detach().to("cpu", torch.float32)
    w = reward_weights.detach().to("cpu", torch.float32)
    rewards = (r * w[None, :]).nansum(1)
    return torch.where(torch.isnan(r).all(1), torch.full_like(rewards, float("nan")), rewards)


def group_advantages_trl(rewards: Tensor, group_ids: Tensor, scale: bool) -> Tensor:
    """[N] float32 advantages of TRL 1.16's ``sum_then_normalize`` over the groups
    ``group_ids`` [N] (any sizes): reward minus its group's mean, divided by the group's
    unbiased std + 1e-4 when ``scale`` (``scale_rewards`` 'group'), NaN rewards (unscorable)
    left out of the baseline and given 0, as ``GRPOTrainer._generate_and_score_completions``
    computes them for groups of ``num_generations``."""
    ok = ~torch.isnan(rewards)
    G = int(group_ids.max()) + 1 if group_ids.numel() else 0
    return group_advantages(
        torch.where(ok, rewards, 0.0),
        group_ids,
        G,
        ok,
        norm_by_std=scale,
        eps=TRL_ADV_EPS,
    )


def dataset_rows(dataset, rows: Sequence[int], keys: Sequence[str] | None) -> list[dict]:
    """The inputs of ``rows`` of a map-style dataset: a fresh dict per entry (TRL writes
    rollout fields into its inputs) with the columns ``keys`` (None: all); each distinct row
    is read once, in one columnar read when the dataset has columns."""
    unique = sorted(set(rows))
    if isinstance(getattr(dataset, "column_names", None), list):
        cols = dataset[unique]
        fetched = [{k: cols[k][i] for k in cols} for i in range(len(unique))]
    else:
        fetched = [dataset[i] for i in unique]
    by_row = dict(zip(unique, fetched))
    return [{k: v for k, v in by_row[r].items() if keys is None or k in keys} for r in rows]


def refill_domains(dataset) -> list[str]:
    """The domain of every row for an intake that only refills: the ``domain`` or
    ``data_source`` column when the dataset has one, else ``"all"`` (ValueError: not
    map-style)."""
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.hosts.common.intake import check_map_style, read_row_domains

    check_map_style(dataset)
    try:
        return read_row_domains(dataset, None, dataset)
    except ConfigError:  # no domain column: refills need none
        return ["all"] * len(dataset)


def prefix_mask(lengths: Tensor) -> Tensor:
    """[N, T] bool mask of the first ``lengths[i]`` tokens of each row (T = max length, >= 1)."""
    T = max(int(lengths.max()) if lengths.numel() else 0, 1)
    return torch.arange(T)[None, :] < lengths[:, None]


def build_batch(
    *,
    rewards: Tensor,
    advantages: Tensor,
    lengths: Tensor,
    group_size: int,
    step: int,
    domains: Sequence[str] | None = None,
    domain_ids: Tensor | None = None,
    prompt_keys: Sequence | None = None,
    response_mask: Tensor | None = None,
    old_log_probs: Tensor | None = None,
    entropies: Tensor | None = None,
    micro_batch_ids: Tensor | None = None,
    staleness: Tensor | None = None,
) -> RolloutBatch:
    """A `RolloutBatch` of the N global completions, in TRL's global row order.

    Args:
        rewards: [N] from `trl_rewards` (NaN: unscorable).
        advantages, lengths: [N] TRL's advantages and loss tokens per completion, gathered.
        group_size: G, TRL's ``num_generations``; N must be a multiple of it.
        domains, domain_ids, prompt_keys: with the dataflex intake, else None.
        response_mask: [N, T] the loss mask, padded across ranks; None: the first
            ``lengths[i]`` tokens (enough when no component reads token tensors).
        old_log_probs, entropies: [N, T] aligned with ``response_mask``, or None.
        micro_batch_ids: [N] the loss micro-batch of each row (counted over ranks), or None.
        staleness: [N] policy versions each completion lags the trainer's (asynchronous
            training: TRL's ``AsyncGRPOTrainer``), or None.
    """
    N = int(rewards.shape[0])
    if N % group_size:
        raise ValueError(f"{N} completions are not whole groups of num_generations={group_size}")
    lengths = lengths.to("cpu", torch.int64)
    mask = prefix_mask(lengths) if response_mask is None else response_mask.to("cpu").bool()
    kwargs: dict = {}
    if domain_ids is not None:
        kwargs["domains"] = tuple(domains)
        kwargs["domain_ids"] = domain_ids.to("cpu", torch.int64)
    return RolloutBatch(
        rewards=rewards.to("cpu", torch.float32),
        response_mask=mask,
        group_ids=torch.arange(N, dtype=torch.int64) // group_size,
        old_log_probs=None if old_log_probs is None else old_log_probs.to("cpu", torch.float32),
        prompt_keys=None if prompt_keys is None else tuple(prompt_keys),
        step=int(step),
        response_advantages=advantages.detach().to("cpu", torch.float32),
        response_lengths=lengths,
        entropies=None if entropies is None else entropies.to("cpu", torch.float32),
        micro_batch_ids=None if micro_batch_ids is None else micro_batch_ids.to("cpu", torch.int64),
        staleness=None if staleness is None else staleness.to("cpu", torch.int64),
        **kwargs,
    )
