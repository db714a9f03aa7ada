"""Drawing a step's prompts: quota -> draw (with pre-rollout skipping) -> metrics.

Every host draws its batch through `draw_batch` (by its driver's
`dataflex_rl.hosts.common.intake.Intake`), so quotas, candidate rounds, "keep the batch
full" and the per-domain figures mean the same thing everywhere: every batch holds exactly
``n`` prompts. The hosts differ only in whether they audit (``audit``): the embedded engine
generates a share of the skipped prompts apart, not trained on; verl and TRL generate only
the batch they train on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

from dataflex_rl.hosts.common.accounting import (
    PREFIX,
    first_per_domain,
    intake_metrics,
    plain_batch,
)
from dataflex_rl.hosts.common.sampler import DomainSampler, draw_metrics

#: a host's prompt representations of drawn (domain, item) pairs at a layer: ([N, H] features,
#: the forward-pass cost in prompt tokens)
FeaturesOf = Callable[[Sequence[tuple[int, int]], int], tuple[Tensor, float]]

#: pre-rollout figures that are counts: over the candidate rounds of one draw, and over the
#: draws of one step (verl's refills), they add up; every other figure is the latest one
COUNTS = frozenset(
    PREFIX + name
    for name in (
        "skipped",
        "skipped_easy",
        "skipped_hard",
        "candidates",
        "candidates_skipped",
        "replacements",
        "tokens_saved_est",
        "forced",
        "rounds",
        "probe_tokens",
        "audited",
        "skipped_first",
        "skipped_revisit",
        "skipped_probe",
    )
)


def add_counts(total: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    """``total`` updated with ``more`` in place: the `COUNTS` add up, other figures are
    replaced. Returns ``total``."""
    for key, value in more.items():
        total[key] = value + total.get(key, 0.0) if key in COUNTS else value
    return total


def draw_with_skipping(
    sampler: DomainSampler,
    key_of: Callable[[int, int], Hashable],
    quota: Tensor,
    strategy,
    step: int,
    generator: torch.Generator | None,
    candidate_factor: float,
    max_rounds: int,
    features_of: FeaturesOf | None = None,
    audit: list[tuple[int, int]] | None = None,
) -> tuple[list[tuple[int, int]], Tensor, dict[str, float]]:
    """Draw candidates in rounds and keep, per domain, the first ones the strategy generates.

    Each round draws ``candidate_factor`` x the still-missing prompts of every domain and
    takes, per domain, the first candidates the skip policy keeps, until every quota is
    filled or ``max_rounds`` rounds ran. Then skipped candidates fill what is missing, per
    domain the first ones in draw order (``forced``): every host trains on a full batch. An
    audited candidate is never forced: it is generated apart and not trained on.

    Args:
        sampler: draws (domain, item) pairs at given proportions.
        key_of: the prompt key of a drawn (domain, item).
        quota: [D] int64 prompts wanted per domain.
        strategy: the `Strategy` (its ``filter_prompts`` and ``history``).
        step: the strategy step.
        generator: randomness of the skip policy.
        candidate_factor: candidates per missing prompt in each round (>= 1).
        max_rounds: candidate rounds at most (>= 1).
        features_of: the host's prompt representations (`FeaturesOf`), for a skip policy
            that reads them (`Strategy.feature_layer`); their cost adds to ``probe_tokens``.
        audit: a list that receives the skipped candidates the policy audits
            (`Strategy.audit_prompts` over the skipped prompts of the plain batch, the ones
            skipping kept from generation: generated anyway, not trained on; ``audited``
            counts them); None: no audit (and no randomness drawn for it). Over-drawn
            candidates, which would not have been generated anyway, are not audited. The
            policy also sees the plain batch itself (the ``probe``'s false-skip control
            samples its kept candidates with the same draw). Audited candidates are not
            forced into the batch.

    Returns:
        (chosen (domain, item) pairs in draw order, [D] still missing (> 0 only when the
        skipped candidates are too few to fill the quota), metrics): the
        plain-batch counts of `intake_metrics` (when the policy is active),
        ``candidates`` (drawn over all rounds), ``candidates_skipped`` / ``skipped_easy`` /
        ``skipped_hard`` (what the policy skipped, all rounds), ``forced`` and ``rounds``.
    """
    D = quota.shape[0]
    left = quota.to(torch.int64).clone()
    items: list[tuple[int, int]] = []
    keys: list = []
    doms, kept, taken, plain, audited = [], [], [], [], []
    metrics: dict[str, float] = {}
    rounds = 0
    while int(left.sum()) > 0 and rounds < max_rounds:
        rounds += 1
        want = int(torch.ceil(left.to(torch.float64) * candidate_factor).sum())
        drawn, _ = sampler.sample(left.to(torch.float64), want)
        if not drawn:
            break
        r_keys = [key_of(d, i) for d, i in drawn]
        r_dom = torch.tensor([d for d, _ in drawn], dtype=torch.int64)
        features = None
        layer = strategy.feature_layer
        if layer is not None:
            if features_of is None:
                raise ValueError(
                    "pre-rollout: the skip policy reads the policy's prompt representation, "
                    "which this host does not provide"
                )
            features, cost = features_of(drawn, layer)
            add_counts(metrics, {PREFIX + "probe_tokens": float(cost)})
        keep, pre = strategy.filter_prompts(r_keys, step, generator, features=features)
        add_counts(metrics, pre)  # the policy's counts add up over rounds; rates: the last one
        take = first_per_domain(r_dom, keep, left)
        plain.append(plain_batch(r_dom, quota) if rounds == 1 else torch.zeros_like(keep))
        picked = None
        if audit is not None:  # the plain batch's skips: what skipping actually decided
            picked = strategy.audit_prompts(~keep & plain[-1], plain[-1], generator)
            if picked is not None:
                picked = picked & ~keep & plain[-1]
                audit += [drawn[j] for j in picked.nonzero().squeeze(1).tolist()]
                add_counts(metrics, {PREFIX + "audited": float(picked.sum())})
        audited.append(torch.zeros_like(keep) if picked is None else picked)
        left -= torch.bincount(r_dom[take], minlength=D)
        items += drawn
        keys += r_keys
        doms.append(r_dom)
        kept.append(keep)
        taken.append(take)
    none = torch.zeros(0, dtype=torch.bool)
    dom = torch.cat(doms) if doms else torch.zeros(0, dtype=torch.int64)
    generated = torch.cat(taken) if taken else none
    # rounds ran out: skipped candidates fill the batch, never an audited one (generated
    # apart, not trained on)
    forced = (
        first_per_domain(dom, ~torch.cat(kept) & ~torch.cat(audited), left)
        if kept
        else torch.zeros_like(generated)
    )
    left -= torch.bincount(dom[forced], minlength=D)
    generated = generated | forced
    if PREFIX + "skipped" in metrics:
        metrics[PREFIX + "candidates_skipped"] = metrics.pop(PREFIX + "skipped")
    if metrics.get(PREFIX + "active"):
        metrics.update(
            intake_metrics(strategy.history, keys, torch.cat(plain) if plain else none, generated)
        )
    metrics[PREFIX + "candidates"] = float(len(items))
    metrics[PREFIX + "forced"] = float(forced.sum())
    metrics[PREFIX + "rounds"] = float(rounds)
    chosen = [items[i] for i in generated.nonzero().squeeze(1).tolist()]
    return chosen, left, metrics


def draw_batch(
    sampler: DomainSampler,
    key_of: Callable[[int, int], Hashable],
    proportions: Tensor,
    n: int,
    strategy,
    step: int,
    generator: torch.Generator | None,
    candidate_factor: float,
    max_rounds: int,
    *,
    features_of: FeaturesOf | None = None,
    audit: list[tuple[int, int]] | None = None,
) -> tuple[list[tuple[int, int]], dict[str, float]]:
    """The ``n`` prompts of one step, at ``proportions``, with the strategy's pre-rollout skipping.

    The per-domain quota is `DomainSampler.quota` (largest remainder within what the pools
    can give). Without pre-rollout the sampler takes it as it is. With it,
    `draw_with_skipping` draws candidate rounds; when ``max_rounds`` rounds did not fill the
    quota, skipped candidates fill what is missing (``forced``), then plain draws if the
    policy skipped too few more. The batch always holds the quota, on every host: verl's sync
    trainer waits for that many groups, TRL's sampler yields a fixed count, and the engine
    trains on as many groups as they do (a short batch would make a skipping arm take more,
    smaller optimizer steps than its baseline).

    Args:
        sampler: the host's `DomainSampler`.
        key_of: the prompt key of a drawn (domain, item) (what the prompt history knows).
        proportions: [D] the proportions the batch is drawn at.
        n: prompts wanted.
        strategy: the `Strategy` (``parts``, ``filter_prompts``, ``history``).
        step: the strategy step.
        generator: randomness of the skip policy.
        candidate_factor, max_rounds: see `draw_with_skipping`.
        features_of, audit: see `draw_with_skipping` (``audit`` None: the host audits
            nothing, verl and TRL, which generate only the batch they train on).

    Returns:
        (drawn (domain, item) pairs, metrics): the pre-rollout figures of
        `draw_with_skipping` (with pre-rollout) and the per-domain `draw_metrics` (target:
        ``proportions``; actual: the drawn prompts).
    """
    quota = sampler.quota(proportions, n)
    metrics: dict[str, float] = {}
    if "prerollout" not in strategy.parts:
        drawn = sampler.take(quota)
    else:
        drawn, left, metrics = draw_with_skipping(
            sampler,
            key_of,
            quota,
            strategy,
            step,
            generator,
            candidate_factor,
            max_rounds,
            features_of=features_of,
            audit=audit,
        )
        if int(left.sum()) > 0:  # the policy skipped too few more: plain draws
            drawn += sampler.take(left)
    D = quota.shape[0]
    counts = torch.bincount(torch.tensor([d for d, _ in drawn], dtype=torch.int64), minlength=D)
    metrics.update(draw_metrics(sampler.domains, proportions, counts, sampler.available()))
    return drawn, metrics
