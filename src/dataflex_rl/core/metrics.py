"""What every step records under ``dataflex/`` (DESIGN §6), and the one naming rule for
per-domain keys. docs/metrics.md lists every key the library logs.

All values are plain floats, so any logger (JSONL, TensorBoard, verl's tracking) takes them.
Fractions with an empty denominator are 0.0 (an empty batch keeps nothing), never NaN.

Per-domain keys are ``dataflex/<stage>/domain/<domain>/<quantity>`` (`domain_metric`), with
the domain written by `metric_domain`: ``mix`` for the host's draw of prompts (``target``: the
proportions it drew at, ``actual``: the share it drew, ``prompts_available``; every host
reports them through `dataflex_rl.hosts.common.sampler.draw_metrics`) and the mixer
(``signal``), ``batch`` for the batch the strategy decided on (``actual``: its share of the
groups).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.segment import segment_count

PREFIX = "dataflex/"
_UNSAFE = re.compile(r"[/\s]")


def metric_domain(domain: str) -> str:
    """A domain name as written in metric keys: ``/`` and whitespace become ``_``, so a
    verl ``data_source`` such as ``openai/gsm8k`` does not nest keys in any logger."""
    return _UNSAFE.sub("_", str(domain))


def domain_metric(stage: str, domain: str, quantity: str) -> str:
    """The key of a per-domain figure: ``dataflex/<stage>/domain/<metric_domain>/<quantity>``.

    Args:
        stage: ``mix`` (the host's draw and the mixer) or ``batch`` (the decided batch).
        domain: the domain name (sanitized here).
        quantity: ``target``, ``actual``, ``prompts_available`` or ``signal``.
    """
    return f"{PREFIX}{stage}/domain/{metric_domain(domain)}/{quantity}"


def check_domain_names(domains: Sequence[str], where: str = "domains") -> None:
    """Refuse domains that would share metric keys (``a/b`` and ``a_b``).

    Raises:
        ConfigError: naming both domains and their common key name.
    """
    seen: dict[str, str] = {}
    for d in domains:
        name = metric_domain(d)
        if name in seen and seen[name] != d:
            raise ConfigError(
                f"{where}: {seen[name]!r} and {d!r} are both written {name!r} in "
                "metric keys ('/' and whitespace become '_'); rename one"
            )
        seen[name] = d


def _frac(num: torch.Tensor | int, den: torch.Tensor | int) -> float:
    den = float(den)
    return float(num) / den if den > 0 else 0.0


def step_metrics(
    batch: RolloutBatch,
    keep: Tensor,
    weights_per_response: Tensor,
    *,
    per_domain: bool = False,
    signal: Tensor | None = None,
) -> dict:
    """Kept fractions, weight statistics, zero-advantage share and per-domain figures.

    Args:
        batch: the step's batch.
        keep: [B] bool, the decision's keep mask.
        weights_per_response: [B] the decision's weights per response.
        per_domain: record per-domain figures (the strategy knows the domains).
        signal: [D] the mixing signal at the last update, if any.
    """
    m: dict[str, float] = {}
    active = batch.active_mask
    G = batch.num_groups
    n_active = int(active.sum())
    n_keep = int(keep.sum())
    m["dataflex/responses"] = float(n_active)
    m["dataflex/padding_responses"] = float(batch.is_padding.sum())
    m["dataflex/invalid_reward_responses"] = float(batch.invalid_reward_mask.sum())
    m["dataflex/invalid_responses"] = float(batch.invalid_mask.sum())
    m["dataflex/kept_response_fraction"] = _frac(n_keep, n_active)
    groups_active = segment_count(active, batch.group_ids, G) > 0
    groups_kept = segment_count(keep, batch.group_ids, G) > 0
    m["dataflex/kept_group_fraction"] = _frac(groups_kept.sum(), groups_active.sum())
    n_tok = batch.response_length
    m["dataflex/kept_token_fraction"] = _frac(n_tok[keep].sum(), n_tok[active].sum())
    m["dataflex/all_dropped"] = float(n_active > 0 and n_keep == 0)
    informative = segment_count(batch.informative_mask, batch.group_ids, G) > 0
    m["dataflex/zero_advantage_group_fraction"] = _frac(
        (groups_active & ~informative).sum(), groups_active.sum()
    )
    counted = keep & (n_tok > 0)  # a response without tokens has weight 0 by definition
    w = weights_per_response[counted].to(torch.float64)
    if w.numel():
        m["dataflex/weight_mean"] = float(w.mean())
        m["dataflex/weight_std"] = float(w.std(unbiased=False))
        m["dataflex/weight_min"] = float(w.min())
        m["dataflex/weight_max"] = float(w.max())
        sq = float((w * w).sum())
        ess = float(w.sum()) ** 2 / sq if sq > 0 else 0.0
    else:
        for k in ("mean", "std", "min", "max"):
            m[f"dataflex/weight_{k}"] = 0.0
        ess = 0.0
    m["dataflex/weight_ess"] = ess
    m["dataflex/weight_ess_fraction"] = _frac(ess, int(counted.sum()))
    if per_domain and batch.batch_size:
        D = batch.num_domains
        counts = torch.bincount(batch.group_domain[groups_active], minlength=D)
        for d, name in enumerate(batch.domains):
            m[domain_metric("batch", name, "actual")] = _frac(counts[d], counts.sum())
            if signal is not None:
                m[domain_metric("mix", name, "signal")] = float(signal[d])
    return m
