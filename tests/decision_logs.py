"""Test helpers: synthetic GRPO batches and decision logs written through `DecisionLog`."""

from __future__ import annotations

from pathlib import Path

import torch

from dataflex_rl import Strategy
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.hosts.common.decision_log import DecisionLog

DOMAINS = ("math", "logic", "science")


def make_batch(
    step: int,
    prompts: int = 8,
    G: int = 4,
    T: int = 12,
    seed: int = 0,
    n_prompts: int = 20,
    per_response: bool = False,
    entropies: bool = True,
    micro_batches: bool = False,
) -> RolloutBatch:
    """0/1 rewards from a per-group solve probability, GRPO advantages (constant per row),
    per-token old log-probs, right-padded variable lengths, three domains, prompt keys drawn
    from ``n_prompts`` prompts (so histories see repeats). ``per_response``: the advantages
    and lengths are also passed per response, as the engine and verl hosts do. ``entropies``:
    per-token entropies in [0, 3); ``micro_batches``: rows alternate between two loss
    micro-batches."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    B = prompts * G
    grp = torch.arange(prompts).repeat_interleave(G)
    ids = torch.randint(0, n_prompts, (prompts,), generator=g)
    p = (ids.float() + 0.5) / n_prompts  # each prompt has its own solve rate
    r = (torch.rand(B, generator=g) < p[grp]).float()
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mean = torch.zeros(prompts).index_add_(0, grp, r) / G
    var = torch.zeros(prompts).index_add_(0, grp, (r - mean[grp]) ** 2) / (G - 1)
    adv = (r - mean[grp]) / (var.sqrt()[grp] + 1e-6)
    lp = -torch.rand(B, T, generator=g) * 2 * mask
    # a generator of their own: the other fields are what they were without entropies
    ent = torch.rand(B, T, generator=torch.Generator().manual_seed(seed * 7 + step + 1)) * 3
    return RolloutBatch(
        rewards=r,
        response_mask=mask,
        group_ids=grp,
        domain_ids=(ids % 3)[grp],
        domains=DOMAINS,
        advantages=adv[:, None] * mask,
        old_log_probs=lp,
        prompt_keys=tuple(f"p{int(k)}" for k in ids[grp]),
        step=step,
        response_advantages=adv if per_response else None,
        response_lengths=lengths if per_response else None,
        entropies=ent * mask if entropies else None,
        micro_batch_ids=torch.arange(B) % 2 if micro_batches else None,
    )


def write_log(
    folder: Path,
    spec,
    steps: int,
    *,
    steps_per_file: int = 4,
    close: bool = True,
    per_response: bool = False,
    batch_kwargs: dict | None = None,
    **log_kwargs,
) -> tuple[Strategy, list]:
    """Run ``spec`` on ``steps`` synthetic batches (`make_batch`), logging each; returns the
    strategy and the (batch, decision) pairs."""
    st = Strategy(spec, domains=DOMAINS)
    log = DecisionLog(
        folder,
        domains=DOMAINS,
        strategy_spec=st.spec.to_dict(),
        host="test",
        steps_per_file=steps_per_file,
        settings={"advantage_estimator": "grpo", "norm_adv_by_std": True},
        **log_kwargs,
    )
    out = []
    for s in range(steps):
        b = make_batch(s, per_response=per_response, **(batch_kwargs or {}))
        target = st.proportions
        d = st.decide(b)
        log.record(b, d, target=target)
        out.append((b, d))
    if close:
        log.close()
    return st, out
