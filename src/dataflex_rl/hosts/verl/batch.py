"""verl trajectories <-> `RolloutBatch`, and the fields written back. Needs no verl.

verl keys trajectories ``"{uid}_{session}_{index}"`` (prompt group, sample, output of a
multi-output agent loop). The strategy sees one row per session, its final output; earlier
outputs follow it (same keep and weight). B trajectories, S sessions (S <= B), T tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.rowops import first_valid_values
from dataflex_rl.core.strategy import Decision


@dataclass(frozen=True)
class Sessions:
    """Where each session's final output is, and which session each row belongs to.

    Attributes:
        final_rows: [S] int64 row of each session's final output, in first-seen order.
        session_of_row: [B] int64 session of each row.
    """

    final_rows: Tensor
    session_of_row: Tensor

    @property
    def identity(self) -> bool:
        """Every row is its session's final output, in order (the common case)."""
        return self.final_rows.shape[0] == self.session_of_row.shape[0]


def sessions_of(keys: Sequence[str]) -> Sessions:
    """Group trajectory keys ``uid_session_index`` by session (final output: the top index)."""
    final: dict[str, tuple[int, int]] = {}
    session_ids: list[int] = []
    order: dict[str, int] = {}
    for row, key in enumerate(keys):  # string parsing, once per trajectory
        parts = key.rsplit("_", 2)
        if len(parts) != 3:
            raise ValueError(f"unexpected verl trajectory key {key!r} (want uid_session_index)")
        session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        sid = order.setdefault(session, len(order))
        session_ids.append(sid)
        if session not in final or final[session][0] < index:
            final[session] = (index, row)
    rows = [final[s][1] for s in order]
    return Sessions(
        torch.tensor(rows, dtype=torch.int64), torch.tensor(session_ids, dtype=torch.int64)
    )


def factorize(values: Sequence) -> Tensor:
    """[N] int64 dense ids 0..K-1 in first-seen order."""
    ids: dict = {}
    return torch.tensor([ids.setdefault(v, len(ids)) for v in values], dtype=torch.int64)


def build_batch(
    *,
    keys: Sequence[str],
    uids: Sequence[str],
    is_padding: Sequence[bool],
    rm_scores: Tensor,
    response_mask: Tensor,
    advantages: Tensor,
    old_log_probs: Tensor | None,
    step: int,
    entropies: Tensor | None = None,
    domains: Sequence[str] | None = None,
    domain_of_uid: Callable[[str], int] | None = None,
    prompt_of_uid: Callable[[str], object] | None = None,
    per_response_advantages: bool = False,
    staleness: Sequence[int] | None = None,
) -> tuple[RolloutBatch, Sessions]:
    """A `RolloutBatch` of the sessions' final outputs.

    Args:
        keys, uids, is_padding: per trajectory (B).
        rm_scores: [B, T] verl's token rewards; the response reward is their sum.
        response_mask: [B, T] after verl's rollout correction (rejected tokens are 0).
        advantages, old_log_probs, entropies: [B, T] as verl computed them (or None).
        domains: domain names; with ``domain_of_uid`` each row's domain id.
        prompt_of_uid: stable prompt identity (dataset row) for pre-rollout histories.
        per_response_advantages: the estimator gives one advantage per response
            (`PER_RESPONSE_ESTIMATORS`): the batch also carries ``response_advantages``
            (each row's first valid token's) and ``response_lengths``.
        staleness: per trajectory (B), updates since the oldest policy that generated it
            (verl's asynchronous modes; padding rows 0); None: synchronous, not set.
    """
    sessions = sessions_of(keys)
    sel = sessions.final_rows
    pick = (lambda t: t) if sessions.identity else (lambda t: t[sel])
    rows = sel.tolist()
    u = [uids[r] for r in rows]
    pad = torch.tensor([bool(is_padding[r]) for r in rows], dtype=torch.bool)
    kwargs: dict = {}
    if domains is not None and domain_of_uid is not None:
        kwargs["domains"] = tuple(domains)
        kwargs["domain_ids"] = torch.tensor(
            [0 if p else domain_of_uid(x) for x, p in zip(u, pad.tolist())], dtype=torch.int64
        )
    if prompt_of_uid is not None:
        kwargs["prompt_keys"] = tuple(x if p else prompt_of_uid(x) for x, p in zip(u, pad.tolist()))
    mask = pick(response_mask).bool()
    adv = pick(advantages).to(torch.float32)
    if staleness is not None:
        kwargs["staleness"] = torch.tensor(
            [0 if p else max(int(staleness[r]), 0) for r, p in zip(rows, pad.tolist())],
            dtype=torch.int64,
        )
    if per_response_advantages:
        lengths = pick(response_mask).sum(-1).to(torch.int64)
        kwargs["response_lengths"] = lengths
        kwargs["response_advantages"] = first_valid_values(adv, mask, lengths)
    batch = RolloutBatch(
        rewards=pick(rm_scores).sum(-1).to(torch.float32),
        response_mask=mask,
        group_ids=factorize(u),
        advantages=adv,
        old_log_probs=None if old_log_probs is None else pick(old_log_probs).to(torch.float32),
        entropies=None if entropies is None else pick(entropies).to(torch.float32),
        is_padding=pad,
        step=int(step),
        **kwargs,
    )
    return batch, sessions


@dataclass(frozen=True)
class Writeback:
    """Dense [B, T] fields for TransferQueue (absent ones are left as verl wrote them)."""

    rollout_is_weights: Tensor
    response_mask: Tensor | None = None
    loss_mask: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None

    def fields(self) -> dict[str, Tensor]:
        out = {"rollout_is_weights": self.rollout_is_weights}
        for name in ("response_mask", "loss_mask", "advantages", "returns"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def writeback(
    decision: Decision,
    batch: RolloutBatch,
    sessions: Sessions,
    *,
    response_mask: Tensor,
    loss_mask: Tensor,
    advantages: Tensor,
    existing_weights: Tensor | None,
) -> Writeback:
    """The fields that make verl's loss follow ``decision`` (docs/hosts/verl.md).

    * ``rollout_is_weights`` = existing (verl's rollout correction) x ours; 0 off the kept tokens.
    * when the decision ``renormalizes``: the masks are also zeroed outside
      ``denominator_mask``, so verl's token-mean is `Decision.aggregate` (unless nothing is
      kept: 0/0 would be NaN; weights 0 give loss and gradient 0).
    * invalid rows (non-finite reward or advantage) get masks 0 and advantages 0.
    * recomputed advantages replace verl's advantages and returns.

    Args:
        response_mask, loss_mask: [B, T] int64 as in TransferQueue (after rollout correction).
        existing_weights: [B, T] verl's ``rollout_is_weights`` or None.
    """
    mask = response_mask.bool()
    s = sessions.session_of_row
    renormalize = decision.renormalizes
    if sessions.identity:
        # read-only below: every result is a new tensor (torch.where / multiply)
        weights = decision.weights_per_token
        kept = decision.loss_mask
        denominator = decision.denominator_mask if renormalize else None
        invalid = batch.invalid_mask
        new_adv = decision.advantages
    else:
        sel = sessions.final_rows
        weights = decision.weights_per_response[s][:, None] * mask
        weights[sel] = decision.weights_per_token
        kept = (decision.keep_mask & batch.active_mask)[s][:, None] & mask
        kept[sel] = decision.loss_mask
        denominator = None
        if renormalize:  # earlier outputs follow their session's final one, whole
            denominator = (decision.loss_rows & batch.active_mask)[s][:, None] & mask
            denominator[sel] = decision.denominator_mask
        invalid = batch.invalid_mask[s]
        new_adv = None
        if decision.advantages is not None:
            new_adv = decision.advantages_per_response[s][:, None] * mask
            new_adv[sel] = decision.advantages
    weights = torch.where(kept, weights, torch.zeros_like(weights)).to(torch.float32)
    if existing_weights is not None:
        weights = weights * existing_weights.to(torch.float32)
    out: dict = {"rollout_is_weights": weights}
    if renormalize or bool(invalid.any()):
        keep_tok = denominator if renormalize else ~invalid[:, None] & mask
        # nothing left: keep the masks (0/0 would make verl's token-mean NaN); weights are 0
        if bool((keep_tok & mask).any()):
            out["response_mask"] = response_mask * keep_tok.to(response_mask.dtype)
            out["loss_mask"] = loss_mask * keep_tok.to(loss_mask.dtype)
    if new_adv is not None or bool(invalid.any()):
        adv = advantages.to(torch.float32) if new_adv is None else new_adv.to(torch.float32)
        out["advantages"] = torch.where(invalid[:, None], torch.zeros_like(adv), adv)
    if new_adv is not None:
        out["returns"] = out["advantages"]  # as verl's GRPO sets them (critics need GAE)
    return Writeback(**out)
