"""Per-prompt budgets against plain-loop references on 300 random cases each: the knapsack
allocation (one response at a time to the best marginal value; and, on small cases, the
best of every allocation), the balanced subset, the uniform pools and the sequential
rounds (`Driver.step` on scripted response streams)."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from dataflex_rl.core.rollouts import (
    allocate_counts,
    balanced_subset,
    response_value,
    uniform_pools,
)

CASES = 300


def value(p: float, n: int, kind: str) -> float:
    v = 1.0 - p**n - (1.0 - p) ** n
    return v * p * (1.0 - p) ** 2 if kind == "knapsack" else v


def greedy(ps: list[float], total: int, lo: int, hi: int, kind: str) -> list[int]:
    """One response at a time to the prompt whose next one is worth most (ties: the lower
    count, then the earlier prompt)."""
    counts = [lo] * len(ps)
    extra = min(max(total - lo * len(ps), 0), len(ps) * (hi - lo))
    for _ in range(extra):
        best = None
        for i, p in enumerate(ps):
            if counts[i] >= hi:
                continue
            gain = value(p, counts[i] + 1, kind) - value(p, counts[i], kind)
            key = (-gain, counts[i], i)
            if best is None or key < best[0]:
                best = (key, i)
        counts[best[1]] += 1
    return counts


def random_rates(rng: random.Random, n: int) -> list[float]:
    # a mix of exact edges, repeats and arbitrary rates
    pool = [0.0, 1.0, 0.5, 0.25]
    return [rng.choice(pool) if rng.random() < 0.3 else rng.random() for _ in range(n)]


@pytest.mark.parametrize("kind", ["signal", "knapsack"])
def test_allocation_equals_the_one_at_a_time_greedy(kind):
    rng = random.Random(11)
    for _ in range(CASES):
        n = rng.randint(1, 12)
        lo = rng.randint(2, 4)
        hi = rng.randint(lo, 12)
        total = rng.randint(0, n * hi + 5)
        ps = random_rates(rng, n)
        got = allocate_counts(torch.tensor(ps, dtype=torch.float64), total, lo, hi, kind)
        want = greedy(ps, total, lo, hi, kind)
        # equal marginal values may be taken in either order: the values must agree, and
        # the counts exactly when no two marginal values tie
        got_v = sum(value(p, c, kind) for p, c in zip(ps, got.tolist()))
        want_v = sum(value(p, c, kind) for p, c in zip(ps, want))
        assert got_v == pytest.approx(want_v, rel=1e-12, abs=1e-15)
        assert sum(got.tolist()) == sum(want) and all(lo <= c <= hi for c in got.tolist())


def test_allocation_is_the_best_of_every_allocation_on_small_cases():
    # the greedy's claim: marginal values never grow, so it is optimal
    rng = random.Random(12)
    for _ in range(CASES):
        n, lo, hi = rng.randint(1, 3), 2, rng.randint(2, 7)
        total = rng.randint(n * lo, n * hi)
        ps = random_rates(rng, n)
        kind = rng.choice(["signal", "knapsack"])
        best = max(
            sum(value(p, c, kind) for p, c in zip(ps, counts))
            for counts in itertools.product(range(lo, hi + 1), repeat=n)
            if sum(counts) == total
        )
        got = allocate_counts(torch.tensor(ps, dtype=torch.float64), total, lo, hi, kind)
        assert sum(value(p, c, kind) for p, c in zip(ps, got.tolist())) == pytest.approx(
            best, rel=1e-12, abs=1e-15
        )
        assert float(
            response_value(torch.tensor(ps, dtype=torch.float64), got, kind).sum()
        ) == pytest.approx(best, rel=1e-9, abs=1e-12)


def plain_balanced(rewards, active, pool, P, size) -> list[bool]:
    take = [False] * len(rewards)
    for q in range(P):
        rows = [i for i in range(len(rewards)) if pool[i] == q and active[i]]
        if not rows:
            continue
        mean = sum(rewards[i] for i in rows) / len(rows)
        high = [i for i in rows if rewards[i] > mean]
        low = [i for i in rows if rewards[i] <= mean]
        want = min(size, len(rows))
        h = min(len(high), max(want - want // 2, want - len(low)))
        for i in high[:h] + low[: want - h]:
            take[i] = True
    return take


def test_balanced_subsets_and_uniform_pools_equal_their_plain_loops():
    rng = random.Random(13)
    for _ in range(CASES):
        P = rng.randint(1, 5)
        R = rng.randint(1, 40)
        levels = rng.choice([[0.0, 1.0], [0.0, 0.5, 1.0], [0.25]])
        rewards = [rng.choice(levels) for _ in range(R)]
        pool = [rng.randrange(P) for _ in range(R)]
        active = [rng.random() > 0.1 for _ in range(R)]
        size = rng.randint(1, 9)
        r, a, q = torch.tensor(rewards), torch.tensor(active), torch.tensor(pool)
        got = balanced_subset(r, a, q, P, size).tolist()
        assert got == plain_balanced(rewards, active, pool, P, size)
        uniform = [
            len({rewards[i] for i in range(R) if pool[i] == k and active[i]}) <= 1 for k in range(P)
        ]
        assert uniform_pools(r, a, q, P).tolist() == uniform


def plain_sequential(
    streams: list[list[float]], G: int, first: int, per_round: int, max_rounds: int
) -> tuple[list[int], list[list[int]]]:
    """The sequential rule as a loop: (responses each prompt ends with, each round's counts).
    Every prompt takes ``first`` of its stream; then per round, the prompts whose responses so
    far all agree, fewest first (then the earlier one), take ``per_round`` more while the
    step's G x prompts responses last."""
    n = [first] * len(streams)
    left = G * len(streams) - sum(n)
    rounds = []
    for _ in range(max_rounds):
        if left <= 0:
            break
        need = [i for i in range(len(streams)) if len(set(streams[i][: n[i]])) == 1]
        need.sort(key=lambda i: (n[i], i))
        give = [0] * len(streams)
        for i in need:
            k = min(per_round, left)
            give[i], left = k, left - k
        if not any(give):
            break
        rounds.append(give)
        n = [a + b for a, b in zip(n, give)]
    return n, rounds


def test_sequential_rounds_equal_their_plain_loop():
    from dataflex_rl.core.batch import from_lists
    from dataflex_rl.core.strategy import Strategy
    from dataflex_rl.hosts.common.driver import Driver
    from dataflex_rl.hosts.common.intake import Intake
    from dataflex_rl.hosts.common.step import Generation

    class Streams:
        """Prompt i's k-th response scores ``streams[i][k]``."""

        def __init__(self, streams, G):
            self.streams, self.group_size = streams, G
            self.used = [0] * len(streams)
            self.calls = []

        def generate(self, items, doms, rnd, counts=None):
            n = counts.tolist()
            self.calls.append(dict(zip(items, n)))
            rewards, groups = [], []
            for g, (i, c) in enumerate(zip(items, n)):
                rewards += self.streams[i][self.used[i] : self.used[i] + c]
                groups += [g] * c
                self.used[i] += c
            batch = from_lists(
                rewards,
                groups,
                prompt_keys=tuple(items[g] for g in groups),
                domain_ids=torch.zeros(len(groups), dtype=torch.int64),
                domains=("a",),
                step=0,
            )
            return Generation(batch, rows=None)

        def assemble(self, generations, rows, group_ids, items, doms):
            rewards = torch.cat([g.batch.rewards for g in generations])[rows]
            return None, from_lists(rewards.tolist(), group_ids.tolist(), domains=("a",), step=0)

    rng = random.Random(17)
    for _ in range(CASES):
        P, G = rng.randint(1, 6), rng.randint(2, 8)
        first = rng.randint(2, G)
        per_round, max_rounds = rng.randint(1, 4), rng.randint(1, 6)
        rates = random_rates(rng, P)
        streams = [[float(rng.random() < p) for _ in range(G * P)] for p in rates]
        strategy = Strategy(
            {
                "name": "s",
                "rollouts": {
                    "mode": "sequential",
                    "first": first,
                    "per_round": per_round,
                    "max_rounds": max_rounds,
                },
            },
            domains=("a",),
        )
        host = Streams(streams, G)
        Driver(strategy, Intake([list(range(P))], ("a",), torch.tensor([1.0]), seeds=(1, 1))).step(
            host, P, 0
        )
        drawn = list(host.calls[0])  # the step's prompt order (ties go to the earlier)
        assert sorted(drawn) == list(range(P))
        want_n, want_rounds = plain_sequential(
            [streams[i] for i in drawn], G, first, per_round, max_rounds
        )
        assert [host.used[i] for i in drawn] == want_n
        got_rounds = [[c.get(i, 0) for i in drawn] for c in host.calls[1:]]
        assert got_rounds == want_rounds
