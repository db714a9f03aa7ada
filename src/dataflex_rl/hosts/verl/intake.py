"""Intake: which dataset rows verl generates next (domain mixing and pre-rollout skipping).

verl's sync trainer submits exactly ``train_batch_size`` prompts per step and its replay buffer
waits for that many groups, so both mechanisms act here, before generation: the rows are drawn
per domain at the strategy's proportions (`DomainSampler`, largest-remainder rounding), and
pre-rollout skipping removes candidates, which are replaced by fresh draws. The count is
always exact. Needs no verl.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from dataflex_rl.core.strategy import Strategy, normalize_proportions
from dataflex_rl.mix.sampler import DomainSampler, largest_remainder


def _lookup(row: Any, dotted: str) -> Any:
    node = row
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def domain_column(rows: Sequence[Mapping] | None, columns: Mapping[str, Sequence] | None,
                  key: str, fallback: str = "data_source") -> tuple[list[str], str]:
    """Each row's domain, read from ``key`` (dotted for nested fields) or ``fallback``.

    Args:
        rows: row mappings (used when ``columns`` is None).
        columns: column name -> values (fast path for columnar datasets).
        key: the configured domain column.
        fallback: used when no row has ``key``.

    Returns:
        (one domain name per row, the column actually used).

    Raises:
        ValueError: neither column exists, or some rows lack the one used.
    """
    def read(name: str) -> list | None:
        top, _, rest = name.partition(".")
        if columns is not None:
            if top not in columns:
                return None
            values = list(columns[top])
            return values if not rest else [_lookup(v, rest) for v in values]
        return [_lookup(r, name) for r in rows]

    for name in (key, fallback):
        values = read(name)
        if values is not None and any(v is not None for v in values):
            missing = [i for i, v in enumerate(values) if v is None]
            if missing:
                raise ValueError(f"dataflex.domain_key: {len(missing)} training rows have no "
                                 f"{name!r} (first: row {missing[0]})")
            return [str(v) for v in values], name
    raise ValueError(f"dataflex.domain_key: the training set has neither {key!r} nor "
                     f"{fallback!r}; add a domain column or set dataflex.domain_key")


class Intake:
    """Draws exactly ``n`` dataset rows per call, following the strategy.

    Args:
        row_domains: the domain name of every training row.
        domains: domain names in id order (every value of ``row_domains`` must be one).
        proportions: [D] proportions used when the strategy does not mix (None: the pools'
            own sizes, i.e. what verl's shuffled dataloader gives in expectation).
        seed: seed of the per-domain orders and of pre-rollout randomness.
        candidate_factor: with pre-rollout, candidates drawn per missing row in each round.
        max_rounds: candidate rounds before skipped candidates fill the rest.
    """

    def __init__(self, row_domains: Sequence[str], domains: Sequence[str],
                 proportions: Any = None, seed: int = 0, candidate_factor: float = 2.0,
                 max_rounds: int = 8) -> None:
        self.domains = tuple(domains)
        index = {d: i for i, d in enumerate(self.domains)}
        unknown = sorted(set(row_domains) - set(index))
        if unknown:
            raise ValueError(f"dataflex.domains: training rows have domains {unknown} that are "
                             f"not listed in {list(self.domains)}")
        self.pools: list[list[int]] = [[] for _ in self.domains]
        for row, d in enumerate(row_domains):
            self.pools[index[d]].append(row)
        sizes = torch.tensor([len(p) for p in self.pools], dtype=torch.float64)
        if float(sizes.sum()) == 0:
            raise ValueError("dataflex: the training set is empty")
        self.static = (normalize_proportions(proportions, self.domains, "dataflex.proportions")
                       if proportions is not None else sizes / sizes.sum())
        self.sampler = DomainSampler([len(p) for p in self.pools], self.domains, seed=seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.candidate_factor = candidate_factor
        self.max_rounds = max_rounds

    def draw(self, n: int, strategy: Strategy, step: int) -> tuple[list[int], list[int], dict]:
        """``n`` rows for step ``step``: (rows, their domain ids, metrics).

        The per-domain quota comes from ``strategy.proportions`` (or the static proportions);
        with pre-rollout, candidates are drawn per domain until its quota is filled by kept
        ones, for at most ``max_rounds`` rounds; then skipped candidates fill the rest.
        """
        props = strategy.proportions
        props = self.static if props is None else props
        capacity = torch.tensor([n if p else 0 for p in self.pools], dtype=torch.int64)
        quota = largest_remainder(props, n, capacity)
        rows: list[int] = []
        dom: list[int] = []
        skipped_pool: list[tuple[int, int]] = []
        metrics: dict[str, float] = {}
        pre = "prerollout" in strategy.parts
        factor = self.candidate_factor if pre else 1.0
        rounds = 0
        while int(quota.sum()) > 0 and rounds < (self.max_rounds if pre else 1):
            rounds += 1
            want = int(torch.ceil(quota.to(torch.float64) * factor).sum())
            drawn, _ = self.sampler.sample(quota.to(torch.float64), want)
            keys = [self.pools[d][i] for d, i in drawn]
            keep, pre_metrics = strategy.filter_prompts(keys, step, self.generator)
            for k, v in pre_metrics.items():   # sum counts over rounds, keep the last rates
                metrics[k] = metrics.get(k, 0.0) + v if "skipped" in k or "saved" in k else v
            for (d, _), row, ok in zip(drawn, keys, keep.tolist()):
                if ok and quota[d] > 0:
                    rows.append(row)
                    dom.append(d)
                    quota[d] -= 1
                elif not ok:
                    skipped_pool.append((d, row))
        forced = 0
        for d, row in skipped_pool:   # rounds ran out: skipped candidates fill the quota
            if quota[d] > 0:
                rows.append(row)
                dom.append(d)
                quota[d] -= 1
                forced += 1
        if int(quota.sum()) > 0:   # only possible when nothing was skipped: plain draws
            drawn, _ = self.sampler.sample(quota.to(torch.float64), int(quota.sum()))
            rows += [self.pools[d][i] for d, i in drawn]
            dom += [d for d, _ in drawn]
        if pre:
            metrics["dataflex/prerollout/skipped"] = metrics.get("dataflex/prerollout/skipped",
                                                                 0.0) - forced
            metrics["dataflex/prerollout/forced"] = float(forced)
            metrics["dataflex/prerollout/rounds"] = float(rounds)
        counts = torch.bincount(torch.tensor(dom, dtype=torch.int64), minlength=len(self.domains))
        target = props.to(torch.float64) / props.sum()
        available = self.sampler.available()
        for d, name in enumerate(self.domains):
            metrics[f"dataflex/domain/{name}/intake_target"] = float(target[d])
            metrics[f"dataflex/domain/{name}/submitted"] = float(counts[d]) / max(n, 1)
            metrics[f"dataflex/domain/{name}/prompts_available"] = float(available[d])
        return rows, dom, metrics

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.generator.set_state(state["generator"])
