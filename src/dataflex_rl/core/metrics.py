"""What every step records under ``dataflex/`` (docs/metrics.md lists every key), and the one
naming rule for per-domain keys (`domain_metric`). All values are plain floats; fractions with
an empty denominator are 0.0, never NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.batch import (
    RolloutBatch,
    group_domain,
    informative_mask,
    invalid_reward_mask,
)
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.segment import segment_count

PREFIX = "dataflex/"
_UNSAFE = re.compile(r"[/\s]")


def metric_domain(domain: str) -> str:
    """A domain name as written in metric keys: ``/`` and whitespace become ``_``, so a
    verl ``data_source`` such as ``openai/gsm8k`` does not nest keys in any logger."""
    return _UNSAFE.sub("_", str(domain))


def domain_metric(stage: str, domain: str, quantity: str) -> str:
    """The key of a per-domain figure: ``dataflex/<stage>/domain/<metric_domain>/<quantity>``
    (``stage``: ``mix`` or ``batch``)."""
    return f"{PREFIX}{stage}/domain/{metric_domain(domain)}/{quantity}"


def split_domain_metric(key: str, stage: str) -> tuple[str, str] | None:
    """``(domain as written, quantity)`` of a per-domain key of ``stage`` (the inverse of
    `domain_metric`), or None for any other key."""
    head = f"{PREFIX}{stage}/domain/"
    if not key.startswith(head):
        return None
    domain, sep, quantity = key[len(head) :].partition("/")
    return (domain, quantity) if sep and domain and quantity else None


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


def _frac(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


#: the [B] flags `step_metrics` counts, in the order of its stacked reduction
_FLAGS = ("active", "keep", "informative", "counted", "padding", "invalid_reward", "invalid")


def _groups_with(flags: Tensor, group_ids: Tensor, num_groups: int) -> Tensor:
    """[F, G] bool: the groups with at least one row of each of the F [B] flags.

    Counted with one integer scatter-add: each flag's per-group count takes its own bit field
    of an int64 (``B.bit_length()`` bits, so no field overflows into the next).
    """
    F, B = flags.shape
    bits = max(1, B.bit_length())
    if F * bits > 63:  # (over 2**21 rows for 3 flags) one scatter-add per flag
        return torch.stack([segment_count(f, group_ids, num_groups) > 0 for f in flags])
    device = flags.device
    fields = torch.tensor([[f * bits] for f in range(F)], device=device)
    packed = (flags.to(torch.int64) << fields).sum(0)
    per_group = torch.zeros(num_groups, dtype=torch.int64, device=device)
    per_group.index_add_(0, group_ids, packed)
    return ((per_group >> fields) & ((1 << bits) - 1)) > 0


def step_metrics(
    batch: RolloutBatch,
    keep: Tensor,
    weights_per_response: Tensor,
    *,
    per_domain: bool = False,
    signal: Tensor | None = None,
    kept_tokens: Tensor | None = None,
) -> dict:
    """Kept fractions, weight statistics, zero-advantage share and per-domain figures.

    From a few stacked reductions and one read back to Python. ``signal``: [D] the mixing
    signal at the last update; ``kept_tokens``: [B] int64 tokens each row keeps after a
    token-level selector (None: every valid token of a kept row).
    """
    active = batch.active_mask
    n_tok = batch.response_length
    G = batch.num_groups
    counted = keep & (n_tok > 0)  # a response without tokens has weight 0 by definition
    flags = torch.stack(
        [
            active,
            keep,
            informative_mask(batch),
            counted,
            batch.is_padding,
            invalid_reward_mask(batch),
            batch.invalid_mask,
        ]
    )
    counts = flags.sum(1)  # [7]
    tokens = (flags[:2] * n_tok).sum(1)  # [2] valid tokens of active, kept rows
    if kept_tokens is not None:
        tokens[1] = (keep * kept_tokens).sum()
    # groups with an active / kept / informative row (informative rows are active: a group
    # without signal has an active row and no informative one)
    has = _groups_with(flags[:3], batch.group_ids, G)
    w = weights_per_response.to(torch.float64)
    n_w = counts[3].clamp(min=1).to(torch.float64)
    wc = torch.where(counted, w, 0.0)
    w_sum = wc.sum()
    dev = torch.where(counted, w - w_sum / n_w, 0.0)
    w_stats = torch.stack(
        [
            w_sum,
            torch.dot(dev, dev) / n_w,
            torch.where(counted, w, float("inf")).amin() if w.numel() else w_sum,
            torch.where(counted, w, -float("inf")).amax() if w.numel() else w_sum,
            torch.dot(wc, wc),
        ]
    )  # sum, variance, min, max, sum of squares
    ints = [counts, tokens, has.sum(1)]
    domains = per_domain and batch.batch_size > 0
    if domains:
        D = batch.num_domains
        per_d = torch.zeros(D, dtype=torch.int64, device=active.device)
        ints.append(per_d.index_add_(0, group_domain(batch), has[0].to(torch.int64)))
    parts = [torch.cat(ints).to(torch.float64), w_stats]
    if domains and signal is not None:
        parts.append(signal.to(device=active.device, dtype=torch.float64).reshape(D))
    v = torch.cat(parts).tolist()  # the one read back
    c = dict(zip(_FLAGS, v[:7]))
    tok_kept, tok_active = v[8], v[7]
    g_act, g_kept, g_informative = v[9:12]
    g_zero = g_act - g_informative
    off = 12 + (D if domains else 0)
    w_sum, w_var, w_min, w_max, w_sq = v[off : off + 5]
    m: dict[str, float] = {}
    n_active, n_keep, n_w = c["active"], c["keep"], c["counted"]
    m["dataflex/responses"] = n_active
    m["dataflex/padding_responses"] = c["padding"]
    m["dataflex/invalid_reward_responses"] = c["invalid_reward"]
    m["dataflex/invalid_responses"] = c["invalid"]
    m["dataflex/kept_response_fraction"] = _frac(n_keep, n_active)
    m["dataflex/kept_group_fraction"] = _frac(g_kept, g_act)
    m["dataflex/kept_token_fraction"] = _frac(tok_kept, tok_active)
    m["dataflex/all_dropped"] = float(n_active > 0 and n_keep == 0)
    m["dataflex/zero_advantage_group_fraction"] = _frac(g_zero, g_act)
    if n_w > 0:
        m["dataflex/weight_mean"] = w_sum / n_w
        m["dataflex/weight_std"] = math.sqrt(w_var)
        m["dataflex/weight_min"] = w_min
        m["dataflex/weight_max"] = w_max
        ess = w_sum**2 / w_sq if w_sq > 0 else 0.0
    else:
        for k in ("mean", "std", "min", "max"):
            m[f"dataflex/weight_{k}"] = 0.0
        ess = 0.0
    m["dataflex/weight_ess"] = ess
    m["dataflex/weight_ess_fraction"] = _frac(ess, n_w)
    if domains:
        per_d = v[12 : 12 + D]
        total = sum(per_d)
        sig = v[off + 5 :]
        for d, name in enumerate(batch.domains):
            m[domain_metric("batch", name, "actual")] = _frac(per_d[d], total)
            if sig:
                m[domain_metric("mix", name, "signal")] = sig[d]
    return m
