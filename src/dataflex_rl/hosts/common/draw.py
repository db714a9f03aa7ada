"""Drawing a step's prompts: quota -> draw (with pre-rollout skipping) -> metrics.

Every host draws through `draw_batch` (by its `Intake`), so every batch holds exactly ``n``
prompts and the figures mean the same everywhere; hosts differ only in whether they audit.
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
    take: Callable[[Tensor], list[tuple[int, int]]] | None = None,
    paused: Tensor | None = None,
) -> tuple[list[tuple[int, int]], dict[str, float]]:
    """The ``n`` prompts of one step, at ``proportions``, with the strategy's pre-rollout skipping.

    The per-domain quota is `DomainSampler.quota`; ``take`` picks the prompts of each domain.
    With pre-rollout, each round draws ``candidate_factor`` x the still-missing prompts of
    every domain and takes, per domain, the first candidates the skip policy keeps, until the
    quota is filled or ``max_rounds`` rounds ran; then skipped candidates fill what is
    missing (``forced``; never an audited one), then plain draws. The batch always holds the quota, on every host (docs/architecture.md).

    Args:
        key_of: the prompt key of a drawn (domain, item) (what the prompt history knows).
        strategy: the `Strategy` (``parts``, ``filter_prompts``, ``history``,
            ``audit_prompts``).
        generator: randomness of the skip policy.
        features_of: the host's prompt representations (`FeaturesOf`), for a skip policy
            that reads them; their cost adds to ``probe_tokens``.
        audit: a list that receives the skipped candidates of the plain batch the policy
            audits (generated apart, not trained on; ``audited`` counts them); None: no audit
            (verl and TRL, which generate only the batch they train on).
        take: which prompts of each domain a count draws, ``take(counts) -> [(domain,
            item)]`` with exactly ``counts[d]`` of domain d (a curriculum's weighted draw,
            `Intake`); None: `DomainSampler.take`, the pools' seeded walk. The counts are the
            quota either way.
        paused: [D] bool domains this draw leaves out (`DomainSampler.quota`).

    Returns:
        (drawn (domain, item) pairs, metrics): with pre-rollout, the plain-batch counts of
        `intake_metrics`, ``candidates``, ``candidates_skipped`` / ``skipped_easy`` /
        ``skipped_hard`` (all rounds), ``forced`` and ``rounds``; and the per-domain
        `draw_metrics` (target: ``proportions``; actual: the drawn prompts).
    """
    quota = sampler.quota(proportions, n, paused)
    D = quota.shape[0]
    draw_items = sampler.take if take is None else take
    metrics: dict[str, float] = {}
    if "prerollout" not in strategy.parts:
        drawn = draw_items(quota)
    else:
        left = quota.to(torch.int64).clone()
        items: list[tuple[int, int]] = []
        keys: list = []
        doms, kept, taken, plain, audited = [], [], [], [], []
        rounds = 0
        while int(left.sum()) > 0 and rounds < max_rounds:
            rounds += 1
            want = torch.ceil(left.to(torch.float64) * candidate_factor).to(torch.int64)
            cands = draw_items(want)  # candidates do not count toward the mix's quotas
            if not cands:
                break
            r_keys = [key_of(d, i) for d, i in cands]
            r_dom = torch.tensor([d for d, _ in cands], dtype=torch.int64)
            features = None
            layer = strategy.feature_layer
            if layer is not None:
                if features_of is None:
                    raise ValueError(
                        "pre-rollout: the skip policy reads the policy's prompt "
                        "representation, which this host does not provide"
                    )
                features, cost = features_of(cands, layer)
                add_counts(metrics, {PREFIX + "probe_tokens": float(cost)})
            keep, pre = strategy.filter_prompts(r_keys, step, generator, features=features)
            add_counts(metrics, pre)  # counts add up over rounds; rates: the last one
            take = first_per_domain(r_dom, keep, left)
            plain.append(plain_batch(r_dom, quota) if rounds == 1 else torch.zeros_like(keep))
            picked = None
            if audit is not None:  # the plain batch's skips: what skipping actually decided
                picked = strategy.audit_prompts(~keep & plain[-1], plain[-1], generator)
                if picked is not None:
                    picked = picked & ~keep & plain[-1]
                    audit += [cands[j] for j in picked.nonzero().squeeze(1).tolist()]
                    add_counts(metrics, {PREFIX + "audited": float(picked.sum())})
            audited.append(torch.zeros_like(keep) if picked is None else picked)
            left -= torch.bincount(r_dom[take], minlength=D)
            items += cands
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
            plain_all = torch.cat(plain) if plain else none
            metrics.update(intake_metrics(strategy.history, keys, plain_all, generated))
        metrics[PREFIX + "candidates"] = float(len(items))
        metrics[PREFIX + "forced"] = float(forced.sum())
        metrics[PREFIX + "rounds"] = float(rounds)
        drawn = [items[i] for i in generated.nonzero().squeeze(1).tolist()]
        if int(left.sum()) > 0:  # the policy skipped too few more: plain draws
            drawn += draw_items(left)
    counts = torch.bincount(torch.tensor([d for d, _ in drawn], dtype=torch.int64), minlength=D)
    metrics.update(draw_metrics(sampler.domains, proportions, counts, sampler.available()))
    return drawn, metrics
