"""Proportional domain sampler: draw the next batch's prompts to match domain proportions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.metrics import check_domain_names, domain_metric


def largest_remainder(proportions: Tensor, n: int, capacity: Tensor | None = None) -> Tensor:
    """[D] int64 counts summing to ``min(n, capacity.sum())`` that follow ``proportions``
    ([D] >= 0, positive sum): floor(p_d n) each, the rest to the largest fractional parts
    (ties: lower index). With ``capacity`` ([D] int64 maxima; None: unlimited) a domain's
    shortfall is re-allocated over the others in proportion, repeatedly.
    """
    p = proportions.to(torch.float64)
    if n < 0 or bool((p < 0).any()) or not bool(torch.isfinite(p).all()) or not float(p.sum()) > 0:
        raise ValueError(
            f"need n >= 0 and finite proportions >= 0 with a positive sum, "
            f"got n={n}, p={p.tolist()}"
        )
    D = p.shape[0]
    cap = (
        capacity.to(torch.int64) if capacity is not None else torch.full((D,), n, dtype=torch.int64)
    )
    counts = torch.zeros(D, dtype=torch.int64)
    remaining = min(n, int(cap.sum()))
    open_ = cap > 0
    while remaining > 0:  # at most D rounds: each round fills a domain or finishes
        w = torch.where(open_, p, torch.zeros_like(p))
        if float(w.sum()) <= 0:
            w = open_.to(torch.float64)  # all open domains have p=0: spread evenly
        quota = w / w.sum() * remaining
        base = torch.floor(quota).to(torch.int64)
        left = remaining - int(base.sum())
        frac = torch.where(open_, quota - base, torch.full_like(quota, -1.0))
        order = torch.sort(-frac, stable=True).indices
        extra = torch.zeros(D, dtype=torch.int64)
        extra[order[:left]] = 1
        add = torch.minimum(base + extra, cap - counts)
        counts += add
        remaining -= int(add.sum())
        open_ = counts < cap
    return counts


class DomainSampler:
    """Draws prompt indices per domain, without replacement within an epoch of each pool.

    Each pool is visited in a seeded random order; when it runs out, a new epoch starts
    (``cycle=True``) or the domain is exhausted and its share goes to the others.
    """

    def __init__(
        self, pool_sizes: Sequence[int], domains: Sequence[str], seed: int = 0, cycle: bool = True
    ) -> None:
        if len(pool_sizes) != len(domains):
            raise ValueError(f"{len(pool_sizes)} pool sizes for {len(domains)} domains")
        self.pool_sizes = [int(s) for s in pool_sizes]
        self.domains = tuple(domains)
        check_domain_names(self.domains)
        self.seed = int(seed)
        self.cycle = cycle
        D = len(self.domains)
        self._cursor = [0] * D
        self._epoch = [0] * D

    def _order(self, d: int) -> Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + d * 7919 + self._epoch[d])
        return torch.randperm(self.pool_sizes[d], generator=g)

    def available(self) -> Tensor:
        """[D] prompts left in each domain's current epoch (pool size when cycling)."""
        left = [s - c for s, c in zip(self.pool_sizes, self._cursor)]
        if self.cycle:
            left = [s if s > 0 else 0 for s in self.pool_sizes]
        return torch.tensor(left, dtype=torch.int64)

    def capacity(self, n: int) -> Tensor:
        """[D] int64 the most prompts each domain can give to a draw of ``n``: ``n`` for a
        non-empty pool when cycling, else what is left of its epoch."""
        if self.cycle:
            return torch.tensor([n if s > 0 else 0 for s in self.pool_sizes], dtype=torch.int64)
        return self.available()

    def quota(self, proportions: Tensor, n: int) -> Tensor:
        """[D] int64 prompts per domain for a draw of ``n`` at ``proportions``
        (`largest_remainder` within `capacity`); RuntimeError when every domain is exhausted."""
        counts = largest_remainder(proportions, n, self.capacity(n))
        if n > 0 and int(counts.sum()) == 0:
            raise RuntimeError(
                f"every domain is exhausted ({dict(zip(self.domains, self.pool_sizes))})"
            )
        return counts

    def sample(self, proportions: Tensor, n: int) -> tuple[list[tuple[int, int]], dict]:
        """Draw ``n`` prompts following ``proportions`` (`quota`, then `take`):
        ([(domain_idx, item_idx)] grouped by domain, `draw_metrics` and the shortfall)."""
        counts = self.quota(proportions, n)
        out = self.take(counts)
        metrics = draw_metrics(self.domains, proportions, counts, self.available())
        metrics["dataflex/sampler/shortfall"] = float(n - int(counts.sum()))
        return out, metrics

    def take(self, counts: Tensor) -> list[tuple[int, int]]:
        """Draw exactly ``counts[d]`` prompts of each domain d (fewer only from a domain that is
        exhausted, ``cycle=False``): [(domain_idx, item_idx)] grouped by domain."""
        out: list[tuple[int, int]] = []
        for d, c in enumerate(counts.tolist()):  # loop over domains (D is small)
            while c > 0:
                order = self._order(d)
                take = min(c, self.pool_sizes[d] - self._cursor[d])
                idx = order[self._cursor[d] : self._cursor[d] + take].tolist()
                out.extend((d, i) for i in idx)
                self._cursor[d] += take
                c -= take
                if self._cursor[d] >= self.pool_sizes[d] and self.cycle:
                    self._cursor[d] = 0
                    self._epoch[d] += 1
                elif take == 0:
                    break
        return out

    def state_dict(self) -> dict:
        return {
            "cursor": list(self._cursor),
            "epoch": list(self._epoch),
            "seed": self.seed,
            "pool_sizes": list(self.pool_sizes),
        }

    def load_state_dict(self, state: dict) -> None:
        if list(state["pool_sizes"]) != self.pool_sizes:
            raise ValueError(
                f"sampler state is for pools {state['pool_sizes']}, not {self.pool_sizes}"
            )
        self._cursor = list(state["cursor"])
        self._epoch = list(state["epoch"])
        self.seed = int(state["seed"])


def draw_metrics(
    domains: Sequence[str], target: Tensor, counts: Tensor, available: Tensor
) -> dict[str, float]:
    """A host's per-domain figures for one draw: ``dataflex/mix/domain/<d>/target`` (the
    [D] ``target`` normalized), ``actual`` (share of ``counts``) and ``prompts_available``."""
    p = target.to(torch.float64)
    p = p / p.sum() if float(p.sum()) > 0 else p
    total = max(int(counts.sum()), 1)
    m: dict[str, float] = {}
    for d, name in enumerate(domains):
        m[domain_metric("mix", name, "target")] = float(p[d])
        m[domain_metric("mix", name, "actual")] = float(counts[d]) / total
        m[domain_metric("mix", name, "prompts_available")] = float(available[d])
    return m
