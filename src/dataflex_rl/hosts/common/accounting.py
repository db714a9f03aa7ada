"""What pre-rollout skipping saved: one definition for every host.

The *plain batch* is what the host would have generated without pre-rollout: per domain, the
first ``quota`` candidates in draw order. Tokens saved are estimated from each skipped
prompt's history (mean response tokens of its remembered groups).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.hosts.common.refill import zero_variance

PREFIX = "dataflex/prerollout/"


def first_per_domain(domain_ids: Tensor, eligible: Tensor, quota: Tensor) -> Tensor:
    """[N] bool: per domain, the first ``quota[d]`` ([D] int64) ``eligible`` ([N] bool)
    candidates, in draw order (``domain_ids``: [N] int64)."""
    if domain_ids.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    D = quota.shape[0]
    onehot = torch.nn.functional.one_hot(domain_ids, D) * eligible[:, None].to(torch.int64)
    rank = onehot.cumsum(0).gather(1, domain_ids[:, None]).squeeze(1) - 1
    return eligible & (rank < quota[domain_ids])


def plain_batch(domain_ids: Tensor, quota: Tensor) -> Tensor:
    """[N] bool: the candidates the host would generate without pre-rollout."""
    return first_per_domain(domain_ids, torch.ones_like(domain_ids, dtype=torch.bool), quota)


def intake_metrics(history, keys: Sequence, plain: Tensor, generated: Tensor) -> dict:
    """Per-step counts for the candidates ``keys`` given the [N] bool ``plain`` batch and
    the ``generated`` ones: ``skipped`` (plain, not generated), ``skipped_first``,
    ``skipped_revisit``, ``replacements`` and ``tokens_saved_est`` (docs/metrics.md; from
    ``history``, the `PromptHistory`, None: no estimate)."""
    skipped = plain & ~generated
    saved = 0.0
    first = 0
    if history is not None and bool(skipped.any()):
        idx = skipped.nonzero().squeeze(1).tolist()
        o = history.outcomes([keys[i] for i in idx])
        saved = float(torch.nan_to_num(o.mean_tokens(), nan=0.0).sum())
        first = int((o.count == 0).sum())
    return {
        PREFIX + "skipped": float(skipped.sum()),
        PREFIX + "skipped_first": float(first),
        PREFIX + "skipped_revisit": float(skipped.sum()) - first,
        PREFIX + "replacements": float((generated & ~plain).sum()),
        PREFIX + "tokens_saved_est": saved,
    }


def generation_metrics(
    batch: RolloutBatch, tokens_saved: float | None, generate_seconds: float | None
) -> dict:
    """After generation: ``zero_variance_through`` and, when ``tokens_saved`` (this step's
    ``tokens_saved_est``) and ``generate_seconds`` are known, ``seconds_saved_est``."""
    zero, n = zero_variance(batch)
    out = {PREFIX + "zero_variance_through": zero / n if n else 0.0}
    if tokens_saved is not None and generate_seconds is not None:
        generated = float((batch.response_length * ~batch.is_padding).sum())
        out[PREFIX + "seconds_saved_est"] = (
            tokens_saved * generate_seconds / generated if generated > 0 else 0.0
        )
    return out
