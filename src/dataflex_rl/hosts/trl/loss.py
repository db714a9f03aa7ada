"""Make TRL's GRPO loss follow a `Decision`: weights into the advantages, drops out of the masks.

Every TRL policy loss is linear in the advantage once its sign is fixed, so a weight w >= 0
multiplied into the advantage scales that row's (or token's) policy loss by w. What remains
is each ``loss_type``'s denominator (N rows in the generation batch, R of them staying in
the loss): c = N / R for the row-count losses (`ROW_LOSSES`), ``num_items_in_batch``
recomputed for the global token losses, and ``beta x c`` for the KL term. Details and
measurements: docs/hosts/trl.md#normalization-per-loss_type.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dataflex_rl.core.strategy import Decision

#: losses whose denominator counts rows: a drop rescales the kept rows' advantages by N / R
ROW_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")
#: losses normalized by ``num_items_in_batch`` (the generation batch's loss tokens)
GLOBAL_TOKEN_LOSSES = ("dapo", "cispo", "vespo")
#: losses normalized by the micro-batch's own mask tokens
LOCAL_TOKEN_LOSSES = ("bnpo",)
#: every ``loss_type`` of trl 1.16's GRPOTrainer
LOSS_TYPES = ROW_LOSSES + GLOBAL_TOKEN_LOSSES + LOCAL_TOKEN_LOSSES


def check_loss_type(loss_type: str) -> str:
    """``loss_type`` if this host knows how to renormalize it, else a ValueError listing them."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(
            f"loss_type: {loss_type!r} is not supported by the dataflex TRL host; "
            f"supported: {', '.join(sorted(LOSS_TYPES))}"
        )
    return loss_type


def apply_decision(
    out: dict,
    decision: Decision,
    rows: slice,
    loss_type: str,
    lengths: Tensor,
    invalid: Tensor | None = None,
) -> dict[str, float]:
    """Apply a decision over the global batch to this rank's generation output, in place.

    Writes ``advantages`` (recomputed or TRL's, times the weights and c; [n, T] with token
    weights, 0 on tokens not kept; exactly 0 at weight 0), ``completion_mask`` (rows outside
    R zeroed) and ``num_items_in_batch`` (loss tokens of the rows in R, over all ranks).

    Args:
        out: this rank's ``_generate_and_score_completions`` output: ``advantages`` [n],
            ``completion_mask`` [n, T] (right-padded), ``num_items_in_batch``, optionally
            ``tool_mask`` [n, T].
        decision: `Strategy.decide` over the N global rows, in global row order; its
            [N, T'] tensors are aligned by completion position (T' may differ from T).
        rows: this rank's rows of the global batch (``slice(p * n, (p + 1) * n)``).
        loss_type: TRL's ``args.loss_type`` (one of `LOSS_TYPES`).
        lengths: [N] loss tokens of every global row; checked against this rank's rows.
        invalid: [N] bool rows left out of every denominator (a non-finite reward), or None.

    Returns:
        ``dataflex/trl/advantage_scale`` (c), ``loss_rows_fraction`` (R / N),
        ``loss_tokens`` (tokens in R) and ``per_token_advantages`` (1: [n, T] advantages).

    Raises:
        ValueError: an unknown ``loss_type``, or shapes that do not line up.
    """
    check_loss_type(loss_type)
    keep = decision.keep_mask
    N = keep.shape[0]
    lengths = torch.as_tensor(lengths).reshape(-1)
    if lengths.shape[0] != N:
        raise ValueError(f"lengths: {lengths.shape[0]} rows, but the decision has {N}")
    start, stop, stride = rows.indices(N)
    n = len(range(start, stop, stride))
    if stride != 1 or rows.stop is not None and rows.stop > N:
        raise ValueError(f"rows: {rows} is not a contiguous slice of the {N} global rows")
    mask = out["completion_mask"]
    adv = out["advantages"]
    if adv.dim() != 1 or adv.shape[0] != n or mask.shape[0] != n:
        raise ValueError(
            f"out: advantages {tuple(adv.shape)} and completion_mask {tuple(mask.shape)} "
            f"must have the {n} rows of {rows} (advantages one per row)"
        )
    loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
    local_len = loss_mask.sum(1).cpu()
    if not torch.equal(local_len.to(torch.int64), lengths[rows].to(torch.int64)):
        raise ValueError(
            f"lengths[{rows}] {lengths[rows].tolist()} differ from this rank's loss tokens "
            f"per row {local_len.tolist()}: the decision is not over these rows"
        )
    if decision.drops_tokens:
        raise ValueError(
            "decision.drops_tokens: TRL's completion_mask is also the completion's "
            "attention mask, so single tokens cannot leave its denominators"
        )
    valid = torch.ones(N, dtype=torch.bool) if invalid is None else ~invalid.to(torch.bool)
    stays = valid
    if decision.renormalizes:  # the rows of `Decision.denominator_mask`, whole
        stays = decision.loss_rows & (lengths > 0) & valid
    n_stay = int(stays.sum())
    c = N / n_stay if loss_type in ROW_LOSSES and n_stay > 0 else 1.0

    device = adv.device
    base = (
        adv.detach()
        if decision.advantages_per_response is None
        else decision.advantages_per_response[rows].to(device, adv.dtype)
    )
    token_level = decision.per_token
    if token_level:
        w_src = decision.weights_per_token[rows]
        T, k = mask.shape[1], min(mask.shape[1], w_src.shape[1])
        w = torch.zeros(n, T, dtype=adv.dtype, device=device)
        w[:, :k] = w_src[:, :k].to(device, adv.dtype)
        scaled = base[:, None] * (w * c)
    else:
        w = decision.weights_per_response[rows].to(device, adv.dtype)
        scaled = base * (w * c)
    out["advantages"] = torch.where(w > 0, scaled, torch.zeros_like(scaled))

    stays_local = stays[rows].to(device)
    if not bool(stays[rows].all()):
        out["completion_mask"] = mask * stays_local[:, None].to(mask.dtype)
    tokens = int(lengths[stays].sum())
    items = out.get("num_items_in_batch")
    out["num_items_in_batch"] = torch.tensor(
        tokens,
        dtype=items.dtype if isinstance(items, Tensor) else torch.int64,
        device=items.device if isinstance(items, Tensor) else device,
    )
    return {
        "dataflex/trl/advantage_scale": float(c),
        "dataflex/trl/loss_rows_fraction": n_stay / N if N else 0.0,
        "dataflex/trl/loss_tokens": float(tokens),
        "dataflex/trl/per_token_advantages": float(token_level),
    }
