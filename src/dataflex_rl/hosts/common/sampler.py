"""Proportional domain sampler: draw the next batch's prompts to match domain proportions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.metrics import check_domain_names, domain_metric

#: the carried deficits are multiples of 1 / GRID prompt (`apportion`)
GRID = float(2**30)


def draw_mass(proportions: Tensor, n: int, capacity: Tensor) -> Tensor:
    """[D] float64 prompts each domain owes a draw of ``n``: ``n`` spread at ``proportions``
    ([D] >= 0, positive sum), a domain's share above its ``capacity`` ([D] int64 maxima)
    re-spread over the others in proportion (repeatedly); sums to ``min(n, capacity.sum())``.
    """
    p = proportions.to(torch.float64)
    if n < 0 or bool((p < 0).any()) or not bool(torch.isfinite(p).all()) or not float(p.sum()) > 0:
        raise ValueError(
            f"need n >= 0 and finite proportions >= 0 with a positive sum, "
            f"got n={n}, p={p.tolist()}"
        )
    cap = capacity.to(torch.float64)
    mass = torch.zeros_like(p)
    remaining = min(float(n), float(cap.sum()))
    open_ = cap > 0
    for _ in range(p.shape[0]):  # each round fills a domain or spreads all that remains
        if remaining <= 0 or not bool(open_.any()):
            break
        w = torch.where(open_, p, torch.zeros_like(p))
        if float(w.sum()) <= 0:
            w = open_.to(torch.float64)  # every open domain has p=0: spread evenly
        add = torch.minimum(w / w.sum() * remaining, cap - mass)
        mass += add
        remaining -= float(add.sum())
        open_ = mass < cap
    return mass


def apportion(
    proportions: Tensor, n: int, capacity: Tensor, deficit: Tensor
) -> tuple[Tensor, Tensor]:
    """One draw's prompts per domain when a deficit carries across draws.

    Each domain owes its `draw_mass` plus its carried ``deficit`` ([D] float64: prompts owed
    so far minus prompts drawn). Of the ``min(n, capacity.sum())`` prompts, each goes to the
    domain that owes one soonest: prompt ``k`` of domain ``d`` (``k`` < what it owes) falls
    due when the draw has run ``(k + 1 - owed_d) / rate_d`` of its length (``rate``: its
    mass / n); what is not owed (capacity) comes last; ties go to the lower index. Across
    draws of any sizes and a fixed mix, every domain's drawn count stays within one prompt of
    its cumulative share (earliest deadline first; largest deficit first can drift further
    when shares are very unequal); a first draw is largest-remainder rounding by deadline.

    Returns:
        ([D] int64 counts, [D] float64 deficit after the draw; a domain with no capacity
        carries none).
    """
    cap = capacity.to(torch.int64)
    mass = draw_mass(proportions, n, cap)
    owed = torch.where(cap > 0, deficit.to(torch.float64) + mass, torch.zeros_like(mass))
    # on a grid of 2^-30 prompt: float noise neither breaks ties nor builds up over draws
    owed = torch.round(owed * GRID) / GRID
    total = min(n, int(cap.sum()))
    width = min(total, int(cap.max())) if total > 0 else 0
    if width == 0:
        return torch.zeros_like(cap), owed
    k = torch.arange(width, dtype=torch.float64)[None, :]  # [1, K] the k-th prompt of a domain
    rate = mass / max(n, 1)
    due = (k + 1 - owed[:, None]) / rate[:, None]  # [D, K]; rate 0: +-inf or nan
    due = torch.nan_to_num(due, nan=torch.inf, posinf=torch.inf, neginf=-torch.inf)
    tier = (k >= owed[:, None]).to(torch.float64)  # 1: beyond what the domain owes
    tier = torch.where(k < cap[:, None], tier, torch.full_like(tier, 2.0))  # 2: over capacity
    order = torch.sort(due.flatten(), stable=True).indices
    order = order[torch.sort(tier.flatten()[order], stable=True).indices][:total]
    counts = torch.bincount(order // width, minlength=cap.shape[0]).to(torch.int64)
    return counts, owed - counts.to(torch.float64)


def weighted_draw(
    log_weights: Tensor,
    k: int,
    generator: torch.Generator | None,
    last: Tensor | None = None,
) -> Tensor:
    """[k] int64 indices of ``k`` of N items drawn without replacement, each next one with
    probability proportional to exp(``log_weights``) among those not yet drawn (successive
    sampling), in draw order: the k largest ``log_weights`` + Gumbel noise, one float64
    uniform per item from ``generator`` (Gumbel-top-k; ties: the lower index). ``last`` ([N]
    bool): items that come after every other one (each group in that order). ``k`` > N:
    whole passes in that order, then its first ``k`` mod N. Two sorts, no loop over items."""
    lw = log_weights.to(torch.float64)
    N = lw.shape[0]
    if k <= 0 or N == 0:
        return torch.zeros(0, dtype=torch.int64)
    u = torch.rand(N, dtype=torch.float64, generator=generator)
    keys = lw - torch.log(-torch.log(u))  # u = 0: -inf, drawn last
    fresh = N if last is None else N - int(last.sum())
    if k <= fresh and k * 8 < N:  # a few of many: the top k without a full sort
        if last is not None:
            keys = keys.masked_fill(last, -torch.inf)
        top = torch.topk(keys, k + 1)  # k + 1 <= N
        v = top.values
        if bool(torch.isfinite(v[:k]).all()) and bool((v[:-1] > v[1:]).all()):
            return top.indices[:k]  # no tie: the stable sort's first k
    order = torch.sort(keys, descending=True, stable=True).indices
    if last is not None:
        order = order[torch.sort(last[order].to(torch.int8), stable=True).indices]
    if k <= N:
        return order[:k]
    return torch.cat([order.repeat(k // N), order[: k % N]])


def interleave(domain_ids: Tensor) -> Tensor:
    """[N] int64 order of a draw's prompts (``domain_ids`` [N], any order) that spreads each
    domain over the draw: position by position, the next prompt comes from the domain whose
    share of the positions so far runs out soonest (earliest deadline first, as `apportion`,
    in exact integer arithmetic; ties: lower domain; a domain's prompts keep their order).
    Every prefix then holds each domain's share of it within one prompt, so a draw cut short
    (a refill round that fills the step before its end) leaves out every domain alike, not the
    last domains of a draw grouped by domain. A loop over the N prompts of one draw."""
    d = domain_ids.to(torch.int64)
    N = d.shape[0]
    if N == 0:
        return torch.zeros(0, dtype=torch.int64)
    by_domain = torch.sort(d, stable=True).indices
    counts = torch.bincount(d).tolist()
    start = [0] * len(counts)
    for k in range(1, len(counts)):
        start[k] = start[k - 1] + counts[k - 1]
    given = [0] * len(counts)
    picks: list[int] = []
    for m in range(1, N + 1):  # N x (owed - given) of each domain after m positions
        owed = [(m * c - g * N, k) for k, (c, g) in enumerate(zip(counts, given)) if c > 0]
        _, k = min(((N - e) / counts[k], k) for e, k in owed if e > 0)
        picks.append(start[k] + given[k])
        given[k] += 1
    return by_domain[torch.tensor(picks, dtype=torch.int64)]


class DomainSampler:
    """Draws prompt indices per domain, without replacement within an epoch of each pool.

    Each pool is visited in a seeded random order; when it runs out, a new epoch starts
    (``cycle=True``) or the domain is exhausted and its share goes to the others. Each draw's
    per-domain counts follow the proportions cumulatively (`quota`: the rounding of one draw
    is made up by the next ones), so many small draws (refill rounds) mix as one large one.
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
        # [D] prompts owed so far minus prompts drawn, carried across draws (`apportion`)
        self._deficit = torch.zeros(D, dtype=torch.float64)

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

    def quota(self, proportions: Tensor, n: int, paused: Tensor | None = None) -> Tensor:
        """[D] int64 prompts per domain for a draw of ``n`` at ``proportions`` within
        `capacity`, the deficit carried from the earlier draws made up (`apportion`; the
        draw's own rounding carries to the next); RuntimeError when every domain is
        exhausted. ``paused`` [D] bool: domains not drawn this time (admission's pacing):
        the others share the draw, and what a paused domain would have got is owed to it
        (its deficit grows), to be made up once it is drawn again."""
        cap = self.capacity(n)
        if paused is not None and bool(paused.any()):
            # every domain is owed its share of the draw as if none were paused; the ones
            # drawn take the paused ones' prompts now and owe them back later
            full = draw_mass(proportions, n, cap.to(torch.int64))
            counts, _ = apportion(proportions, n, cap.masked_fill(paused, 0), self._deficit)
            owed = torch.round((self._deficit.to(torch.float64) + full) * GRID) / GRID
            self._deficit = torch.where(cap > 0, owed - counts.to(torch.float64), 0.0)
            return counts
        counts, deficit = apportion(proportions, n, cap, self._deficit)
        if n > 0 and int(counts.sum()) == 0:
            raise RuntimeError(
                f"every domain is exhausted ({dict(zip(self.domains, self.pool_sizes))})"
            )
        self._deficit = deficit
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
            "deficit": self._deficit.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        if list(state["pool_sizes"]) != self.pool_sizes:
            raise ValueError(
                f"sampler state is for pools {state['pool_sizes']}, not {self.pool_sizes}"
            )
        self._cursor = list(state["cursor"])
        self._epoch = list(state["epoch"])
        self.seed = int(state["seed"])
        self._deficit = torch.as_tensor(state["deficit"], dtype=torch.float64).clone()


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
