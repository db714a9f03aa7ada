"""Per-prompt rollout budgets (the strategy's ``rollouts`` section): how many responses each
prompt of a step gets (docs/concepts.md#per-prompt-rollout-budgets).

``until_signal`` (Reinforce-Ada): prompts whose pooled responses all score alike are sampled
again (`uniform_pools`), then the update trains on a balanced subset of each prompt's pool
(`balanced_subset`). ``allocate`` (Knapsack RL): the step's responses are shared among its
prompts before generation (`allocate_counts`) from each prompt's estimated pass rate
(`ResponseBudget.pass_rates`). ``sequential`` (adaptive rollout within the step's budget): a
few responses each, then rounds of more for the prompts without signal yet, fewest first
(`sequential_counts`), until the step's responses are spent. Pure tensor functions, and one
small stateful estimator.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch, clean_rewards
from dataflex_rl.core.history import Outcomes
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.segment import segment_count, segment_max, segment_min, segment_sum
from dataflex_rl.core.spec import RolloutsSpec

#: a response succeeds when its reward exceeds this (the prompt history's rule)
SUCCESS = 0.5
#: per step, the domain pass-rate estimate keeps this share of what it had counted
DOMAIN_DECAY = 0.9
#: the pass rate of a domain nothing has been observed of
PRIOR = 0.5
#: the ``dataflex/rollouts/`` metric prefix
ROLLOUTS = "dataflex/rollouts/"


def response_value(p: Tensor, n: Tensor, value: str) -> Tensor:
    """What ``n`` responses of a prompt with pass rate ``p`` are worth (broadcast): the
    chance they hold two outcomes, 1 - p^n - (1-p)^n (``signal``), times p(1-p)^2 with
    ``knapsack`` (Knapsack RL's InfoGain approximation)."""
    p = p.to(torch.float64)
    n = n.to(torch.float64)
    v = 1.0 - p.pow(n) - (1.0 - p).pow(n)
    if value == "knapsack":
        v = v * p * (1.0 - p).square()
    return v


def allocate_counts(p: Tensor, total: int, lo: int, hi: int, value: str) -> Tensor:
    """[N] int64 responses per prompt: each between ``lo`` and ``hi``, ``total`` in all (or
    N x ``lo`` / N x ``hi`` when ``total`` lies outside), maximizing the summed
    `response_value` of prompts with pass rates ``p`` [N].

    Greedy on marginal values is optimal here: a prompt's marginal value of one more
    response, p^n(1-p) + (1-p)^n p (times the weight), never grows with n. Ties (equal
    marginal values: equal pass rates, or 0 and 1) go to the lower count first, then to
    the earlier prompt, so equal prompts share alike.
    """
    N = int(p.shape[0])
    base = torch.full((N,), lo, dtype=torch.int64)
    extra = min(max(int(total) - N * lo, 0), N * (hi - lo))
    if N == 0 or extra == 0:
        return base
    k = torch.arange(lo, hi, dtype=torch.float64)  # [K] counts before one more response
    gain = response_value(p[None, :], k[:, None] + 1, value) - response_value(
        p[None, :], k[:, None], value
    )  # [K, N]: count-major, so a stable sort breaks ties by count, then by prompt
    order = torch.sort(-gain.reshape(-1), stable=True).indices[:extra]
    return base + torch.bincount(order % N, minlength=N)


def sequential_counts(n: Tensor, need: Tensor, per_round: int, remaining: int) -> Tensor:
    """[P] int64 responses each prompt gets in a ``sequential`` round: ``per_round`` to each
    prompt with ``need`` [P] bool, in order of fewest responses so far ``n`` [P] (then the
    earlier prompt), while ``remaining`` lasts (the last one served gets what is left)."""
    P = int(n.shape[0])
    order = torch.sort(torch.where(need, n, torch.iinfo(torch.int64).max), stable=True).indices
    before = torch.arange(P, dtype=torch.int64) * per_round  # given to the ones served first
    give = (remaining - before).clamp(min=0, max=per_round)
    out = torch.zeros(P, dtype=torch.int64)
    out[order] = give
    return torch.where(need, out, 0)


def check_sequential(spec: RolloutsSpec, group_size: int) -> None:
    """ConfigError naming ``rollouts.first`` when it is above the host's group size G (the
    step's budget is G responses per prompt)."""
    if spec.mode == "sequential" and spec.first > group_size:
        raise ConfigError(
            f"strategy.rollouts.first: {spec.first} is above the group size {group_size}; "
            "the sequential mode spends the step's group size x prompts responses, so every "
            "prompt's first ones must fit in its share"
        )


def uniform_pools(batch_rewards: Tensor, active: Tensor, pool: Tensor, P: int) -> Tensor:
    """[P] bool: the pools (prompts) whose active responses all score alike (or that have
    none); ``batch_rewards`` / ``active`` / ``pool`` [R]."""
    r = batch_rewards.to(torch.float64)
    hi = segment_max(torch.where(active, r, -torch.inf), pool, P, empty=-torch.inf)
    lo = segment_min(torch.where(active, r, torch.inf), pool, P, empty=torch.inf)
    return ~(hi > lo)


def balanced_subset(rewards: Tensor, active: Tensor, pool: Tensor, P: int, size: int) -> Tensor:
    """[R] bool: ``size`` responses of each pool (all of a pool with fewer), half of them
    above the pool's mean reward and half not (the upper half gets the odd one) when the
    pool has enough of each, else every response of the scarcer side and the rest from the
    other; within a side the earliest rows. Inactive rows are never taken."""
    r = rewards.to(torch.float64)
    n = segment_count(active, pool, P)
    mean = segment_sum(torch.where(active, r, 0.0), pool, P) / n.clamp(min=1)
    high = active & (r > mean[pool])
    low = active & ~high
    n_high, n_low = segment_count(high, pool, P), segment_count(low, pool, P)
    want = torch.minimum(n, torch.tensor(size))
    take_high = torch.minimum(n_high, torch.maximum(want - want // 2, want - n_low))
    take_low = want - take_high
    # rank of each row among its pool's rows of its side, in row order
    rank = torch.zeros_like(pool)
    for side in (high, low):
        key = torch.where(side, pool, P)  # rows of the other side sort last
        order = torch.sort(key, stable=True).indices
        starts = torch.cumsum(segment_count(side, pool, P), 0) - segment_count(side, pool, P)
        pos = torch.empty_like(order)
        pos[order] = torch.arange(order.numel())
        rank = torch.where(side, pos - starts[pool], rank)
    return (high & (rank < take_high[pool])) | (low & (rank < take_low[pool]))


class ResponseBudget:
    """The ``rollouts`` section in a `Strategy`: its spec and, for ``allocate``, each
    domain's pass-rate estimate (successes and responses, both decayed by `DOMAIN_DECAY`
    per observed step), saved with the strategy's state."""

    def __init__(self, spec: RolloutsSpec, num_domains: int) -> None:
        self.spec = spec
        self.successes = torch.zeros(num_domains, dtype=torch.float64)
        self.responses = torch.zeros(num_domains, dtype=torch.float64)

    def domain_rates(self) -> Tensor:
        """[D] float64 each domain's estimated pass rate (`PRIOR` before any response)."""
        seen = self.responses > 0
        return torch.where(seen, self.successes / self.responses.clamp(min=1e-300), PRIOR)

    def pass_rates(self, outcomes: Outcomes, domain_ids: Sequence[int]) -> Tensor:
        """[N] float64 estimated pass rate of N prompts: their remembered successes S of N
        responses (`PromptHistory.rows`) shrunk toward their domain's rate q by
        ``prior_weight`` m pseudo-responses, (S + m q) / (N + m); q when N + m is 0."""
        o = outcomes
        n = (o.responses.to(torch.float64) * o.valid).sum(1)
        succ = (torch.round(o.solve * o.responses.to(torch.float64)) * o.valid).sum(1)
        rates = self.domain_rates()
        ids = torch.as_tensor(list(domain_ids), dtype=torch.int64)
        q = rates[ids] if rates.numel() else torch.full(ids.shape, PRIOR, dtype=torch.float64)
        m = float(self.spec.prior_weight)
        den = n + m
        return torch.where(den > 0, (succ + m * q) / den.clamp(min=1e-300), q)

    def observe(self, batch: RolloutBatch) -> None:
        """Count the active responses of ``batch`` per domain (once per step)."""
        D = self.successes.shape[0]
        if batch.domain_ids is None or D == 0:
            return
        active = batch.active_mask
        ok = active & (clean_rewards(batch) > SUCCESS)
        dom = batch.domain_ids
        self.successes = DOMAIN_DECAY * self.successes + segment_count(ok, dom, D)
        self.responses = DOMAIN_DECAY * self.responses + segment_count(active, dom, D)

    def state_dict(self) -> dict:
        return {"successes": self.successes.clone(), "responses": self.responses.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.successes = state["successes"].to(torch.float64).clone()
        self.responses = state["responses"].to(torch.float64).clone()
