"""Keep the top fraction of valid tokens by a token-level score (the policy's entropy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SELECTORS, Selector
from dataflex_rl.core.batch import RolloutBatch, token_mask
from dataflex_rl.core.config import param
from dataflex_rl.core.segment import segment_quantile

SCOPES = ("batch", "micro_batch")


@SELECTORS.register("top_tokens")
@dataclass
class TopTokens(Selector):
    """``top_tokens`` (presets ``high_entropy``, ``dapo_entropy``): keep the top tokens by score.

    A token-level selector: it goes in a strategy's ``tokens`` section and acts on the
    responses its ``select`` section kept. The score is the policy's entropy by default
    (``token_entropy``); the tokens not kept get no policy gradient. A valid token (a
    response token of an active row that ``select`` kept) is kept when its score is >= the
    (1 - ``fraction``)-quantile of the scores of the valid tokens in its pool,
    the quantile linearly interpolated as ``torch.quantile`` does (`segment_quantile`).
    Tokens tied at the threshold are all kept, so a pool of many equal scores may keep more
    than ``fraction`` of its tokens; ``fraction: 1`` keeps every valid token. A response
    with no kept token is dropped. ``renormalize`` defaults to false, as TRL's
    ``top_entropy_quantile``: the tokens not kept stay in the loss's denominator with
    weight 0; with ``renormalize: true`` the loss is averaged over the kept tokens only.

    The pool (``scope``): ``batch``, every valid token of the step (Wang et al. 2025 take
    the top 20% of the batch); ``micro_batch``, the valid tokens of each loss micro-batch
    gathered over processes (the field ``micro_batch_ids``), which is where TRL's
    ``top_entropy_quantile`` takes its quantile (``docs/concepts.md`` says where the two
    definitions differ).
    """

    default_scorer: ClassVar[str | None] = "token_entropy"
    accepts: ClassVar[frozenset[str]] = frozenset({"token"})
    level: ClassVar[str] = "token"
    renormalize_default: ClassVar[bool] = False
    paper: ClassVar[str] = (
        "Wang et al. 2025, Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive "
        "Effective Reinforcement Learning for LLM Reasoning (arXiv 2506.01939)"
    )
    fraction: float = param(0.2, "rho: fraction of the valid tokens kept", gt=0.0, le=1.0)
    scope: str = param(
        "batch",
        "pool the quantile is taken over: batch (every valid token of the step) or "
        "micro_batch (each loss micro-batch, gathered over processes)",
        choices=SCOPES,
    )

    @property
    def requires(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("micro_batch_ids",) if self.scope == "micro_batch" else ()

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        valid = token_mask(batch)
        B = valid.shape[0]
        pool = batch.micro_batch_ids if self.scope == "micro_batch" else None
        if pool is None:  # one pool: the batch (or a host whose batch is one micro-batch)
            pool = torch.zeros(B, dtype=torch.int64, device=valid.device)
        S = int(pool.max()) + 1 if B else 1
        values = scores[valid]  # row-major: the valid tokens, row by row
        pools = pool[:, None].expand(valid.shape)[valid]
        threshold = segment_quantile(values, pools, S, 1.0 - self.fraction)
        return valid & (scores >= threshold.index_select(0, pool)[:, None])
