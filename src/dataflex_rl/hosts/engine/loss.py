"""GRPO pieces with verl's semantics: response log-probs, the ``vanilla`` clipped policy loss
per token (dual clip; the decision weighs it as verl's ``rollout_is_weights`` and averages it,
`Decision.aggregate`), ``token-mean``, k3 KL."""

from __future__ import annotations

import torch
from torch import Tensor

from dataflex_rl.hosts.engine.sampler import positions


def response_log_probs(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
) -> Tensor:
    """[B, T] float32 log-prob of every response token under ``model`` (with grad when
    enabled), 0 where ``response_mask`` is False; prompts [B, P] left-padded, one row per
    response, responses [B, T] right-padded; logits divided by ``temperature`` (``<= 0``: 1)."""
    P = prompt_ids.shape[1]
    ids = torch.cat([prompt_ids, response_ids], 1)
    mask = torch.cat([prompt_mask, response_mask], 1)
    logits = model(
        input_ids=ids, attention_mask=mask.long(), position_ids=positions(mask), use_cache=False
    ).logits
    logits = logits[:, P - 1 : -1].float()
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1).gather(2, response_ids[..., None]).squeeze(2)
    return torch.where(response_mask, logp, torch.zeros_like(logp))


def masked_token_mean(
    values: Tensor, mask: Tensor, num_tokens: Tensor | int | None = None
) -> Tensor:
    """``token-mean``: sum of ``values`` [B, T] over ``mask`` [B, T] / ``num_tokens`` (default
    ``mask.sum()``; the batch's when these are some of its rows). An empty mask gives 0."""
    m = mask.to(values.dtype)
    den = m.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=values.dtype)
    return (values * m).sum() / den.clamp(min=1.0)


def policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float = 3.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped-ratio policy loss per token; the decision weighs and averages it
    (`Decision.aggregate`).

    Per token: ``l = max(-A ratio, -A clip(ratio, 1 - clip_low, 1 + clip_high))``, for
    ``A < 0`` also ``min(l, -A clip_ratio_c)`` (dual clip). All tensors [B, T]; returns (the
    [B, T] loss, metrics over ``mask``: clip and dual-clip fractions, approx KL to the
    sampler).
    """
    log_ratio = (log_probs - old_log_probs).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss1 = torch.maximum(unclipped, clipped)
    loss_dual = torch.minimum(loss1, -advantages * clip_ratio_c)
    per_token = torch.where(advantages < 0, loss_dual, loss1)
    with torch.no_grad():
        metrics = {
            "clip_fraction": float(masked_token_mean((clipped > unclipped).float(), mask)),
            "dual_clip_fraction": float(
                masked_token_mean(((loss1 > loss_dual) & (advantages < 0)).float(), mask)
            ),
            "approx_kl_to_sampler": float(masked_token_mean(-log_ratio, mask)),
        }
    return per_token, metrics


def kl_k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """Per-token k3 KL estimate ``exp(ref - logp) - (ref - logp) - 1`` (verl ``low_var_kl``),
    clamped to [-10, 10]."""
    d = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
    return (d.exp() - d - 1.0).clamp(-10.0, 10.0)
