"""Make TRL's GRPO loss follow a `Decision`: weights into the advantages, drops out of the masks.

TRL's ``GRPOTrainer._compute_loss`` (trl 1.16) reads, per micro-batch, ``advantages`` ([B] or
[B, T]), ``completion_mask`` (also the attention mask of the completion) and, for the global
token losses, ``num_items_in_batch``. Every policy loss it offers is linear in the advantage
once the advantage's sign is fixed, so a weight w >= 0 multiplied into the advantage scales
that row's (or token's) policy loss by w: ``-min(r wA, clip(r) wA) = -w min(rA, clip(r) A)``
for the clipped losses; cispo, sapo and vespo multiply A by a factor that depends only on its
sign. What remains is the denominator each ``loss_type`` divides by (N rows in the global
generation batch, R of them staying in the loss, K kept):

============  =======================================  ======================================
loss_type     TRL divides by                           on a drop
============  =======================================  ======================================
grpo, sapo    row token-mean, then rows of the batch   mask 0, advantages x c = N / R
dr_grpo       rows x max_completion_length             mask 0, advantages x c = N / R
luspo         rows (row token-sums)                    mask 0, advantages x c = N / R
bnpo          mask tokens of the micro-batch           mask 0 (exact per micro-batch only)
dapo, cispo,  ``num_items_in_batch``: the generation    mask 0, num_items_in_batch recomputed
vespo         batch's mask tokens                      from the rows staying in
============  =======================================  ======================================

R is the set of rows whose tokens stay in TRL's denominators. With ``decision.renormalize``
(the selectors' default) it is the rows ``select`` kept (``decision.loss_rows``) with tokens
(a token-level selection keeps its dropped tokens in the denominators: a row it leaves
without a kept token stays in R with weight 0), and the loss and its gradient are
those of the batch with the other rows physically removed (``tests/hosts_trl``); without it,
it is every valid row, so dropped rows count as zeros, as in the engine and the verl host. Rows
marked ``invalid`` (a non-finite reward) leave R either way. c only compensates for rows that
left a row-count denominator: weights are applied as the strategy normalized them (mean 1 over
its normalization set), as the other hosts do. Masked rows still run through the forward and
backward passes; TRL's split into equal micro-batches and DDP's equal step counts need them.

With ``beta > 0`` TRL adds ``beta * KL`` per token after the advantages act, so c does not
reach the KL term: a row-count loss averages the kept rows' KL over N rows instead of R unless
the trainer also uses ``beta * c`` for this generation's micro-batches (exact again; the token
losses need nothing, c = 1 there). The weights never scale the KL term, as in the verl host.
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

    Every rank computes the same ``decision`` over the N rows of the gathered generation batch
    and calls this with its own slice; what it writes into ``out`` makes TRL's loss follow the
    decision with the effective learning rate preserved (see the module docstring):

    * ``advantages``: the decision's recomputed advantages when it has them, else TRL's; times
      the weights (per response, or per token when the decision has token weights or a token
      keep mask: then ``advantages`` becomes [n, T], 0 on the tokens not kept, which is how
      TRL's own ``top_entropy_quantile`` leaves a token out of the policy term) and the
      factor c; exactly 0 on rows with weight 0.
    * ``completion_mask``: rows outside R zeroed (their policy loss, KL, entropy bonus and
      share of TRL's metrics go with them, as for TRL's own truncated rows).
    * ``num_items_in_batch``: the loss tokens of the rows in R, over all ranks.

    Args:
        out: what ``GRPOTrainer._generate_and_score_completions`` returned on this rank:
            ``advantages`` [n], ``completion_mask`` [n, T] (right-padded, T this rank's own
            padded length), ``num_items_in_batch`` (0-dim), optionally ``tool_mask`` [n, T].
        decision: `Strategy.decide` over the N global rows, in the global row order. Its
            [N, T'] tensors are aligned by position with the ranks' completions (token t of
            row i is completion position t); T' may differ from this rank's T.
        rows: this rank's rows of the global batch (``slice(p * n, (p + 1) * n)``).
        loss_type: TRL's ``args.loss_type`` (one of `LOSS_TYPES`).
        lengths: [N] loss tokens of every global row (``completion_mask`` times ``tool_mask``
            summed per row, gathered); checked against this rank's rows.
        invalid: [N] bool rows to leave out of every denominator whatever ``renormalize``
            says (a non-finite reward), or None.

    Returns:
        Host metrics: ``dataflex/trl/advantage_scale`` (c), ``dataflex/trl/loss_rows_fraction``
        (R / N), ``dataflex/trl/loss_tokens`` (tokens in R) and
        ``dataflex/trl/per_token_advantages`` (1 when the advantages became [n, T]).

    Raises:
        ValueError: an unknown ``loss_type``, or shapes that do not line up (the message
            names the field).
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
    if decision.renormalize_tokens:
        raise ValueError(
            "decision.renormalize_tokens: TRL's completion_mask is also the completion's "
            "attention mask, so single tokens cannot leave its denominators"
        )
    valid = torch.ones(N, dtype=torch.bool) if invalid is None else ~invalid.to(torch.bool)
    if decision.renormalize:
        stays = decision.loss_rows & (lengths > 0) & valid
    else:
        stays = valid
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
