"""Group sampler: G responses per prompt with one prefill per prompt and a repeated KV cache
(HF ``generate`` would copy each prompt G times before the prefill)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dataflex_rl.hosts.engine.noise import inverse_cdf_draw, uniforms
from dataflex_rl.hosts.engine.policy import cache_argument, forward, new_cache


@dataclass(frozen=True)
class Rollout:
    """The responses of one sampling call: N prompts, G samples each, B = N*G rows grouped by
    prompt (rows ``g*G .. g*G+G-1`` answer prompt ``g``).

    Args:
        prompt_ids, prompt_mask: [N, P] int64 left-padded prompt ids, bool real tokens.
        response_ids, response_mask: [B, T] int64 right-padded with the pad id after EOS, bool
            generated tokens (EOS included).
        old_log_probs: [B, T] float32 log-prob of each token under the sampling distribution
            (logits / temperature; 1 for greedy); 0 on padding.
        prompt_index: [B] int64 prompt (group) of each row.
        finished: [B] bool, the row emitted EOS within the token budget.
        entropies: [B, T] float32 entropy (nats) of the sampling distribution; 0 on padding;
            None unless asked for.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    old_log_probs: Tensor
    prompt_index: Tensor
    finished: Tensor
    entropies: Tensor | None = None

    @property
    def group_size(self) -> int:
        """G."""
        return self.response_ids.shape[0] // max(self.prompt_ids.shape[0], 1)

    @property
    def num_tokens(self) -> int:
        """Number of generated tokens (EOS included)."""
        return int(self.response_mask.sum())


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """[N, P] left-padded ids and [N, P] bool mask from N id lists."""
    if not sequences:
        raise ValueError("left_pad: no sequences")
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
    if bool((lengths == 0).any()):
        raise ValueError("left_pad: empty sequence (a prompt needs at least its BOS token)")
    P = int(lengths.max())
    flat = torch.tensor([t for s in sequences for t in s], dtype=torch.int64)
    mask = torch.arange(P)[None, :] >= (P - lengths)[:, None]
    ids = torch.full((len(sequences), P), pad_id, dtype=torch.int64)
    ids[mask] = flat
    return ids, mask


def positions(mask: Tensor) -> Tensor:
    """[N, L] position ids of a left-padded mask: 0 at the first real token (pads get 0)."""
    return (mask.long().cumsum(1) - 1).clamp(min=0)


def _draw(
    logits: Tensor,
    temperature: float,
    generator: torch.Generator | None,
    noise_keys: Tensor | None = None,
    position: int = 0,
    entropy: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Sampled (or greedy) token [R], its log-prob [R] under the sampling distribution and,
    with ``entropy``, that distribution's entropy [R] (else None). With ``noise_keys`` [R]
    the token is drawn at each row's keyed uniform at ``position``, else from ``generator``."""
    if temperature <= 0:
        logp = torch.log_softmax(logits.float(), -1)
        tok = logp.argmax(-1)
    else:
        logp = torch.log_softmax(logits.float() / temperature, -1)
        if noise_keys is not None:
            tok = inverse_cdf_draw(logp, uniforms(noise_keys, position))
        else:
            tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
    ent = None
    if entropy:  # -sum p log p; a token of probability 0 adds 0 (its log-prob may be -inf)
        plogp = logp.exp() * logp
        ent = -torch.where(torch.isnan(plogp), torch.zeros_like(plogp), plogp).sum(-1)
    return tok, logp.gather(1, tok[:, None]).squeeze(1), ent


@torch.no_grad()
def sample_groups(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    group_size: int,
    max_new_tokens: int,
    *,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    noise_keys: Tensor | None = None,
    entropies: bool = False,
) -> Rollout:
    """Sample ``group_size`` (G) responses for each of N ``prompts`` (id lists, BOS included).

    Args:
        max_new_tokens: token budget per response (EOS included).
        temperature: sampling temperature; ``<= 0`` means greedy.
        generator: source of all randomness when ``noise_keys`` is None.
        noise_keys: [N * G] int64 per-row keys (`noise.row_keys`): token ``t`` of row ``b`` is
            drawn from the uniform keyed by ``(noise_keys[b], t)`` (common random numbers).
    """
    if group_size < 1 or max_new_tokens < 1:
        raise ValueError("sample_groups: group_size and max_new_tokens must be >= 1")
    if noise_keys is not None and noise_keys.shape != (len(prompts) * group_size,):
        raise ValueError(
            f"sample_groups: noise_keys must have shape [{len(prompts) * group_size}]"
            f" (one per row), got {tuple(noise_keys.shape)}"
        )
    was_training = model.training
    model.eval()
    cache_arg = cache_argument(model)
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    N, G = prompt_ids.shape[0], group_size
    pos = positions(prompt_mask)
    logits, cache = forward(
        model,
        prompt_ids,
        prompt_mask.long(),
        pos,
        cache=new_cache(model),
        use_cache=True,
        cache_arg=cache_arg,
    )
    # one prefill per prompt; the cache and the next-token logits are shared by its G samples
    cache.batch_repeat_interleave(G)
    last = logits[:, -1, :].repeat_interleave(G, 0)
    attn = prompt_mask.long().repeat_interleave(G, 0)
    next_pos = pos[:, -1].repeat_interleave(G, 0) + 1
    B = N * G
    done = torch.zeros(B, dtype=torch.bool)
    toks, logps, valid, ents = [], [], [], []
    for _ in range(max_new_tokens):
        tok, logp, ent = _draw(last, temperature, generator, noise_keys, len(toks), entropies)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        toks.append(tok)
        logps.append(torch.where(done, torch.zeros_like(logp), logp))
        if ent is not None:
            ents.append(torch.where(done, torch.zeros_like(ent), ent))
        valid.append(~done)
        done = done | (tok == eos_id)
        if bool(done.all()) or len(toks) == max_new_tokens:
            break
        attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype)], 1)
        logits, cache = forward(
            model,
            tok[:, None],
            attn,
            next_pos[:, None],
            cache=cache,
            use_cache=True,
            cache_arg=cache_arg,
        )
        last = logits[:, -1, :]
        next_pos = next_pos + 1
    model.train(was_training)
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=torch.stack(toks, 1),
        response_mask=torch.stack(valid, 1),
        old_log_probs=torch.stack(logps, 1).float(),
        prompt_index=torch.arange(N).repeat_interleave(G),
        finished=done,
        entropies=torch.stack(ents, 1).float() if entropies else None,
    )


def concat_rollouts(rollouts: Sequence[Rollout], pad_id: int) -> Rollout:
    """One `Rollout` of several (a step's refill rounds), groups in order, re-padded
    (entropies only when every part has them)."""
    if len(rollouts) == 1:
        return rollouts[0]
    P = max(r.prompt_ids.shape[1] for r in rollouts)
    T = max(r.response_ids.shape[1] for r in rollouts)

    def pad(t: Tensor, width: int, value, left: bool) -> Tensor:
        extra = width - t.shape[1]
        return torch.nn.functional.pad(t, (extra, 0) if left else (0, extra), value=value)

    offsets = torch.tensor([0] + [r.prompt_ids.shape[0] for r in rollouts[:-1]]).cumsum(0)
    return Rollout(
        prompt_ids=torch.cat([pad(r.prompt_ids, P, pad_id, True) for r in rollouts]),
        prompt_mask=torch.cat([pad(r.prompt_mask, P, False, True) for r in rollouts]),
        response_ids=torch.cat([pad(r.response_ids, T, pad_id, False) for r in rollouts]),
        response_mask=torch.cat([pad(r.response_mask, T, False, False) for r in rollouts]),
        old_log_probs=torch.cat([pad(r.old_log_probs, T, 0.0, False) for r in rollouts]),
        prompt_index=torch.cat([r.prompt_index + o for r, o in zip(rollouts, offsets.tolist())]),
        finished=torch.cat([r.finished for r in rollouts]),
        entropies=(
            torch.cat([pad(r.entropies, T, 0.0, False) for r in rollouts])
            if all(r.entropies is not None for r in rollouts)
            else None
        ),
    )


def first_groups(rollout: Rollout, m: int) -> Rollout:
    """The first ``m`` prompts' groups of ``rollout`` (rows are grouped by prompt)."""
    if m == rollout.prompt_ids.shape[0]:
        return rollout
    rows = m * rollout.group_size
    return Rollout(
        prompt_ids=rollout.prompt_ids[:m],
        prompt_mask=rollout.prompt_mask[:m],
        response_ids=rollout.response_ids[:rows],
        response_mask=rollout.response_mask[:rows],
        old_log_probs=rollout.old_log_probs[:rows],
        prompt_index=rollout.prompt_index[:rows],
        finished=rollout.finished[:rows],
        entropies=None if rollout.entropies is None else rollout.entropies[:rows],
    )
