"""Intake: which prompts a host generates next (domain mixing, the curriculum and pre-rollout
skipping).

Prompts are drawn per domain at the strategy's proportions, within each domain by its
curriculum's weights, and filtered by its skip policy before generation (`draw_batch`); a
host with a map-style dataset draws row indices (`Intake.from_rows`). Needs no host library.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import IterableDataset

from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.proportions import normalize_proportions
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.draw import draw_batch
from dataflex_rl.hosts.common.sampler import DomainSampler, weighted_draw
from dataflex_rl.tasks.datasets import DEFAULT_DOMAIN_COLUMNS, domain_column

logger = logging.getLogger("dataflex_rl.hosts.common")


class Intake:
    """Draws each step's prompts as the strategy asks: per domain at its proportions, within a
    domain by its curriculum's weights (`curriculum_take`), with its pre-rollout skipping
    (`draw_batch`).

    Args:
        pools: per domain, in id order, the items a host generates for (rows, problems).
        domains: domain names in id order.
        static: [D] proportions of a strategy that does not mix.
        seeds: (seed of the per-domain orders, seed of the pre-rollout and curriculum
            randomness).
        candidate_factor, max_rounds: see `draw_batch`.
        audits: the host generates the prompts the skip policy audits, apart and not trained
            on (the engine): every draw of a step audits, refill rounds included, and the host
            takes them all once the step's draws are done (`take_audited`).
        key: an item's prompt key, what the prompt history knows (default: the item).
        features: ``features(items, layer) -> ([N, H] tensor, cost in prompt tokens)``, for
            a skip policy that reads the policy's representation (None: the host has none).
    """

    def __init__(
        self,
        pools: Sequence[Sequence[Any]],
        domains: Sequence[str],
        static: Tensor,
        *,
        seeds: tuple[int, int] = (0, 0),
        candidate_factor: float = 1.0,
        max_rounds: int = 8,
        audits: bool = False,
        key: Callable[[Any], Hashable] | None = None,
        features: Callable[[list, int], tuple[Tensor, float]] | None = None,
    ) -> None:
        self.pools = [list(p) for p in pools]
        self.domains = tuple(domains)
        self.static = static
        self.sampler = DomainSampler([len(p) for p in self.pools], self.domains, seed=seeds[0])
        self.generator = torch.Generator().manual_seed(seeds[1])
        self.candidate_factor = candidate_factor
        self.max_rounds = max_rounds
        self.audits = audits
        self.key = key
        self.features = features
        # (step, its draws' audited (domain, item) pairs) until the host takes them
        self._audited: tuple[int, list[tuple[int, int]]] = (-1, [])
        # the curriculum's map of the pools onto the prompt history's rows (a cache rebuilt
        # from the history, not state): global item -> row, key -> global items
        sizes = torch.tensor([len(p) for p in self.pools], dtype=torch.int64)
        self._offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        self._where: dict[Hashable, list[int]] | None = None
        self._rows = torch.full((int(self._offsets[-1]),), -1, dtype=torch.int64)
        self._mapped: tuple[int, int, int] = (-1, -1, 0)  # (history id, version, rows mapped)
        # (step, [total pool] bool: the items the curriculum drew in that step's draws)
        self._used: tuple[int, Tensor | None] = (-1, None)

    @classmethod
    def from_rows(
        cls,
        row_domains: Sequence[str],
        domains: Sequence[str],
        proportions: Any = None,
        seed: int = 0,
        candidate_factor: float = 1.0,
        max_rounds: int = 8,
        features: Callable[[list, int], tuple[Tensor, float]] | None = None,
    ) -> Intake:
        """An intake over a map-style dataset's rows (the items are row indices), auditing
        nothing; without ``proportions`` a strategy that does not mix draws at the pools' own
        sizes (what a shuffled dataloader gives in expectation)."""
        domains = tuple(domains)
        index = {d: i for i, d in enumerate(domains)}
        unknown = sorted(set(row_domains) - set(index))
        if unknown:
            raise ValueError(
                f"dataflex.domains: training rows have domains {unknown} that are "
                f"not listed in {list(domains)}"
            )
        pools: list[list[int]] = [[] for _ in domains]
        for row, d in enumerate(row_domains):
            pools[index[d]].append(row)
        sizes = torch.tensor([len(p) for p in pools], dtype=torch.float64)
        if float(sizes.sum()) == 0:
            raise ValueError("dataflex: the training set is empty")
        static = (
            normalize_proportions(proportions, domains, "dataflex.proportions")
            if proportions is not None
            else sizes / sizes.sum()
        )
        return cls(
            pools,
            domains,
            static,
            seeds=(seed, seed),
            candidate_factor=candidate_factor,
            max_rounds=max_rounds,
            features=features,
        )

    def target(self, strategy: Strategy) -> Tensor:
        """[D] the proportions a draw follows now: the strategy's, or the static ones."""
        props = strategy.proportions
        return self.static if props is None else props

    def draw(
        self, n: int, strategy: Strategy, step: int, paused: Tensor | None = None
    ) -> tuple[list, list[int], dict]:
        """``n`` prompts for step ``step`` (`draw_batch` at `target`): (items, their domain
        ids, metrics); ``paused``: [D] bool domains left out, their share owed to them."""
        key = self.key

        def key_of(d: int, i: int) -> Hashable:
            return self.pools[d][i] if key is None else key(self.pools[d][i])

        features_of = None
        if self.features is not None:
            features = self.features

            def features_of(pairs, layer):
                return features([self.pools[d][i] for d, i in pairs], layer)

        if self._audited[1] and self._audited[0] != step:
            raise RuntimeError(
                f"intake: step {self._audited[0]}'s audited prompts were counted and never "
                "taken (a host that audits generates them with take_audited before its next step)"
            )
        audit: list[tuple[int, int]] | None = [] if self.audits else None
        take, rate = self.curriculum_take(strategy, step, key_of)
        drawn, metrics = draw_batch(
            self.sampler,
            key_of,
            self.target(strategy),
            n,
            strategy,
            step,
            self.generator,
            self.candidate_factor,
            self.max_rounds,
            features_of=features_of,
            audit=audit,
            take=take,
            paused=paused,
        )
        if "curriculum" in strategy.parts:
            metrics.update(self._curriculum_metrics(strategy, step, drawn, rate))
        if audit:  # a step's draws add up (refill rounds)
            self._audited = (step, self._audited[1] + audit)
        return [self.pools[d][i] for d, i in drawn], [d for d, _ in drawn], metrics

    def curriculum_take(
        self, strategy: Strategy, step: int, key_of: Callable[[int, int], Hashable]
    ) -> tuple[Callable[[Tensor], list[tuple[int, int]]] | None, Tensor | None]:
        """(``take(counts)``: exactly ``counts[d]`` prompts of each domain d, drawn without
        replacement with probabilities proportional to exp of the curriculum's log-weights
        over the domain's pool (`weighted_draw`, from the intake's generator; the prompts an
        earlier draw of the same step took, a candidate round's or a refill round's, come
        after every other one), [total pool] the prompts' estimated pass rates), or (None,
        None) when the strategy has no curriculum due at ``step``. The weights of every pool are computed once per draw
        (one gather of the prompt history, `PromptHistory.rows`); no loop over the pools'
        prompts."""
        history = strategy.history
        if "curriculum" not in strategy.parts or history is None:
            return None, None
        rows = self._history_rows(history, key_of)
        seen = (rows >= 0).nonzero().squeeze(1)
        # a prompt's weight reads its own outcomes only: the seen prompts, and one never seen
        # for all the others
        got = strategy.prompt_log_weights(
            history.rows(torch.cat([rows[seen], torch.tensor([-1])])), step
        )
        if got is None:
            return None, None
        lw, r = got
        log_weights = torch.full(rows.shape, float(lw[-1]), dtype=torch.float64)
        log_weights[seen] = lw[:-1]
        rate = torch.full(rows.shape, float(r[-1]), dtype=torch.float64)
        rate[seen] = r[:-1]
        offsets = self._offsets.tolist()
        if self._used[0] != step or self._used[1] is None:
            self._used = (step, torch.zeros(len(rate), dtype=torch.bool))
        used = self._used[1]

        def take(counts: Tensor) -> list[tuple[int, int]]:
            out: list[tuple[int, int]] = []
            for d, c in enumerate(counts.tolist()):  # a loop over domains (D is small)
                a, b = offsets[d], offsets[d + 1]
                if c > 0 and b > a:
                    # what the step drew already comes last (again only once a pool runs out)
                    picks = weighted_draw(log_weights[a:b], int(c), self.generator, used[a:b])
                    used[a + picks] = True
                    out.extend((d, i) for i in picks.tolist())
            return out

        return take, rate

    def _history_rows(
        self, history: PromptHistory, key_of: Callable[[int, int], Hashable]
    ) -> Tensor:
        """[total pool] int64 the history row of every pool item (-1: never seen), kept up to
        date: the rows the history added since the last call are mapped (a loop over them
        only); the pools' keys are read once, and everything again after the history's
        contents were replaced (a restored checkpoint: `PromptHistory.version`)."""
        if self._where is None:
            where: dict[Hashable, list[int]] = {}
            for d, pool in enumerate(self.pools):
                base = int(self._offsets[d])
                for i in range(len(pool)):
                    where.setdefault(key_of(d, i), []).append(base + i)
            self._where = where
        hid, version, known = self._mapped
        if (hid, version) != (id(history), history.version):
            self._rows.fill_(-1)
            known = 0
        new = history.keys_from(known)
        items: list[int] = []
        rows: list[int] = []
        for j, k in enumerate(new, start=known):
            for g in self._where.get(k, ()):
                items.append(g)
                rows.append(j)
        if items:
            self._rows[torch.tensor(items)] = torch.tensor(rows, dtype=torch.int64)
        self._mapped = (id(history), history.version, known + len(new))
        return self._rows

    def _curriculum_metrics(
        self, strategy: Strategy, step: int, drawn: list[tuple[int, int]], rate: Tensor | None
    ) -> dict[str, float]:
        """``dataflex/curriculum/*`` of one draw: ``active``, and when it acts ``target``,
        the drawn prompts' mean estimated pass rate and share never seen, and the pools'
        mean estimated pass rate."""
        prefix = "dataflex/curriculum/"
        if rate is None:
            return {prefix + "active": 0.0}
        out = {
            prefix + "active": 1.0,
            prefix + "target": float(strategy.curriculum_target(step)),
            prefix + "pool_pass_rate": float(rate.mean()),
        }
        if drawn:
            offsets = self._offsets.tolist()
            idx = torch.tensor([offsets[d] + i for d, i in drawn], dtype=torch.int64)
            out[prefix + "drawn_pass_rate"] = float(rate[idx].mean())
            out[prefix + "drawn_unseen"] = float((self._rows[idx] < 0).to(torch.float64).mean())
        return out

    def take_audited(self, step: int) -> tuple[list, list[int]]:
        """(items, domain ids) of every prompt the draws of ``step`` audited (its refill
        rounds' included), once: what ``dataflex/prerollout/audited`` counts for the step."""
        pairs = self._audited[1] if self._audited[0] == step else []
        self._audited = (-1, [])
        return [self.pools[d][i] for d, i in pairs], [d for d, _ in pairs]

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.generator.set_state(state["generator"])


def check_map_style(dataset) -> None:
    """The intake indexes the training set: refuse (ValueError) one it cannot index."""
    iterable = isinstance(dataset, IterableDataset) or type(dataset).__name__ == "IterableDataset"
    indexable = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if dataset is None or iterable or not indexable:
        raise ValueError(
            "train_dataset: a strategy that mixes domains or pre-filters prompts draws rows by "
            "index at generation time, so it needs a map-style dataset (datasets.Dataset or a "
            f"torch Dataset with __getitem__ and __len__), got {type(dataset).__name__}. "
            "Load it without streaming=True, or use a select/reweight-only strategy"
        )


def read_row_domains(
    dataset, key: str | None, table: Any = None, log: logging.Logger = logger
) -> list[str]:
    """The domain of every training row of a host's dataset, by ``key`` (the configured
    ``domain_key``; None tries `DEFAULT_DOMAIN_COLUMNS`), read from ``table``'s columns (a HF
    ``Dataset``, verl's ``RLHFDataset.dataframe``), else row by row with a warning on ``log``.

    Raises:
        ValueError: the dataset is not map-style (`check_map_style`).
        ConfigError: ``key`` is not a column (the message lists the dataset's columns).
    """
    check_map_style(dataset)
    names = getattr(table, "column_names", None)
    if names is not None:
        names = list(names)
        tops = {key.partition(".")[0]} if key is not None else set(DEFAULT_DOMAIN_COLUMNS)
        columns = {c: table[c] for c in tops & set(names)}
        values, used = domain_column(None, columns, key, all_columns=names)
    else:
        log.warning(
            "dataflex: %s has no columnar view; reading %d rows one by one",
            type(dataset).__name__,
            len(dataset),
        )
        values, used = domain_column([dataset[i] for i in range(len(dataset))], None, key)
    if key is None:
        log.info("dataflex: domains come from the %r column", used)
    return values


def intake_for(
    block: Any, row_domains: Sequence[str], features: Callable | None = None
) -> tuple[tuple[str, ...], Intake]:
    """A host's (domains, `Intake`) from its ``dataflex`` block and its rows' domains (the
    block's ``domains`` in their order, else the rows' distinct domains, sorted)."""
    domains = tuple(block.domains or sorted(set(row_domains)))
    intake = Intake.from_rows(
        row_domains,
        domains,
        block.proportions,
        block.seed,
        block.candidate_factor,
        block.max_draw_rounds,
        features,
    )
    return domains, intake
