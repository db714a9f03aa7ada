"""Per-prompt rollout budgets (the ``rollouts`` section): hand-worked allocations, balanced
subsets and pass rates, the section's refusals, and `Driver.step`'s ``until_signal`` rounds
on a scripted host (which prompts are sampled again, what the update trains on, what the
strategy observes)."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rollouts import (
    DOMAIN_DECAY,
    ResponseBudget,
    allocate_counts,
    balanced_subset,
    check_sequential,
    response_value,
    sequential_counts,
    uniform_pools,
)
from dataflex_rl.core.spec import RolloutsSpec
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.step import Generation

R = "dataflex/rollouts/"


def test_hand_worked_values_of_n_responses():
    # p = 0.5, n = 2: 1 - 0.25 - 0.25 = 0.5; knapsack x 0.5 x 0.25 = 0.0625
    p, n = torch.tensor([0.5, 0.1, 0.0]), torch.tensor([2, 3, 4])
    assert response_value(p, n, "signal").tolist() == pytest.approx([0.5, 1 - 0.001 - 0.729, 0])
    assert response_value(p, n, "knapsack")[0].item() == pytest.approx(0.0625)


def test_hand_worked_allocations():
    # equal prompts share alike
    assert allocate_counts(torch.tensor([0.5, 0.5]), 8, 2, 8, "signal").tolist() == [4, 4]
    # prompts always solved / never solved are worth nothing more: the middle one gets it all
    got = allocate_counts(torch.tensor([0.0, 0.5, 1.0]), 9, 2, 5, "signal")
    assert got.tolist() == [2, 5, 2]
    # p = (0.5, 0.1), 8 responses, 2..6 each. signal marginals: a 0.25, 0.125, 0.0625, ...;
    # b 0.09, 0.0738, 0.0657, ... -> the 4 extra go a, a, b, b: (4, 4). knapsack multiplies
    # by p(1-p)^2 (0.125, 0.081): a 0.03125, 0.015625, 0.0078125; b 0.00729 -> (5, 3)
    p = torch.tensor([0.5, 0.1])
    assert allocate_counts(p, 8, 2, 6, "signal").tolist() == [4, 4]
    assert allocate_counts(p, 8, 2, 6, "knapsack").tolist() == [5, 3]
    # the bounds hold: a total outside [N lo, N hi] gives lo / hi each
    assert allocate_counts(p, 3, 2, 6, "signal").tolist() == [2, 2]
    assert allocate_counts(p, 99, 2, 6, "signal").tolist() == [6, 6]


def test_hand_worked_balanced_subsets():
    # pool 0: 3 right of 8 -> the first 2 right (rows 0, 1) and the first 2 wrong (3, 4);
    # pool 1: 1 right of 8 -> it (row 8) and the first 3 wrong (9, 10, 11);
    # pool 2: all wrong -> its first 4 (16..19)
    rewards = torch.tensor([1, 1, 1, 0, 0, 0, 0, 0] + [1] + [0] * 7 + [0] * 6, dtype=torch.float32)
    pool = torch.tensor([0] * 8 + [1] * 8 + [2] * 6)
    active = torch.ones(22, dtype=torch.bool)
    take = balanced_subset(rewards, active, pool, 3, 4)
    assert take.nonzero().squeeze(1).tolist() == [0, 1, 3, 4, 8, 9, 10, 11, 16, 17, 18, 19]
    # an odd size gives the upper side the odd one; an inactive row is never taken; pools
    # interleaved as rounds append them
    rewards = torch.tensor([0, 1, 0, 1, 1, 0, 1], dtype=torch.float32)
    pool = torch.tensor([0, 0, 1, 1, 0, 0, 0])
    active = torch.tensor([True, True, True, True, False, True, True])
    take = balanced_subset(rewards, active, pool, 2, 3)
    assert take.nonzero().squeeze(1).tolist() == [0, 1, 2, 3, 6]


def test_hand_worked_sequential_rounds():
    # needing: prompts 0, 2, 3 (counts 4, 2, 2); fewest first, then the earlier prompt:
    # 2, 3, 0 get 3 each while 7 responses last: 3, 3, then the 1 left
    n = torch.tensor([4, 2, 2, 2])
    need = torch.tensor([True, False, True, True])
    assert sequential_counts(n, need, 3, 7).tolist() == [1, 0, 3, 3]
    assert sequential_counts(n, need, 3, 100).tolist() == [3, 0, 3, 3]
    assert sequential_counts(n, need, 3, 0).tolist() == [0, 0, 0, 0]
    assert sequential_counts(n, torch.zeros(4, dtype=torch.bool), 3, 9).tolist() == [0] * 4


def test_hand_worked_uniform_pools():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 7.0])
    pool = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    active = torch.tensor([True, True, True, True, True, True, False])
    # pool 3 has no active response: nothing to learn from, it counts as uniform
    assert uniform_pools(rewards, active, pool, 4).tolist() == [True, False, True, True]


def test_hand_worked_pass_rates_and_their_state():
    spec = RolloutsSpec(mode="allocate", prior_weight=2.0)
    b = ResponseBudget(spec, 2)
    assert b.domain_rates().tolist() == [0.5, 0.5]  # nothing observed: the prior
    batch = from_lists(
        [1.0, 0.0, 0.0, 0.0, 1.0, 1.0],
        [0, 0, 0, 0, 1, 1],
        prompt_keys=("a",) * 4 + ("b",) * 2,
        domain_ids=torch.tensor([0, 0, 0, 0, 1, 1]),
        domains=("x", "y"),
    )
    b.observe(batch)
    assert b.domain_rates().tolist() == [0.25, 1.0]
    b.observe(batch)  # decayed: (0.9 + 1) / (3.6 + 4), the same rate
    assert b.successes.tolist() == pytest.approx([1 + DOMAIN_DECAY, 2 + 2 * DOMAIN_DECAY])
    h = PromptHistory(4)
    h.update(batch)
    # prompt a: 1 of 4, shrunk toward 0.25 by 2 pseudo-responses: (1 + 0.5) / 6 = 0.25;
    # unseen c in domain 1: its domain's rate 1.0
    got = b.pass_rates(h.outcomes(["a", "c"]), [0, 1])
    assert got.tolist() == pytest.approx([0.25, 1.0])
    fresh = ResponseBudget(spec, 2)
    fresh.load_state_dict(b.state_dict())
    assert torch.equal(fresh.successes, b.successes)
    assert torch.equal(fresh.responses, b.responses)


def test_the_section_refuses_what_it_does_not_read():
    with pytest.raises(ConfigError, match=r"rollouts\.value: not read by mode 'until_signal'"):
        Strategy({"name": "x", "rollouts": {"mode": "until_signal", "value": "signal"}})
    with pytest.raises(ConfigError, match=r"rollouts\.max_responses: 4 is below"):
        Strategy(
            {"name": "x", "rollouts": {"mode": "allocate", "min_responses": 8, "max_responses": 4}}
        )
    with pytest.raises(ConfigError, match=r"rollouts\.mode: must be one of"):
        Strategy({"name": "x", "rollouts": {"mode": "knapsack"}})
    with pytest.raises(ConfigError, match=r"rollouts\.mod: unknown key. Did you mean 'mode'"):
        Strategy({"name": "x", "rollouts": {"mod": "allocate"}})
    with pytest.raises(ConfigError, match="use one of the two"):
        Strategy({"name": "x", "select": "dapo", "refill": {}, "rollouts": {}})
    with pytest.raises(ConfigError, match=r"rollouts\.first: not read by mode 'until_signal'"):
        Strategy({"name": "x", "rollouts": {"first": 2}})
    with pytest.raises(ConfigError, match=r"rollouts\.first: must be >= 2"):
        Strategy({"name": "x", "rollouts": {"mode": "sequential", "first": 1}})
    # max_rounds is read by two modes: accepted by both
    seq = Strategy({"name": "x", "rollouts": {"mode": "sequential", "max_rounds": 9}})
    assert seq.spec.to_dict()["rollouts"] == {
        "mode": "sequential",
        "first": 2,
        "per_round": 2,
        "max_rounds": 9,
    }
    # the first responses must fit in the step's budget of G per prompt
    check_sequential(seq.rollouts, 2)
    with pytest.raises(ConfigError, match=r"rollouts\.first: 3 is above the group size 2"):
        check_sequential(RolloutsSpec("sequential", first=3), 2)
    # and the spec round-trips with its mode's keys only
    spec = Strategy("knapsack_rl").spec.to_dict()["rollouts"]
    assert spec == {
        "mode": "allocate",
        "min_responses": 2,
        "max_responses": 32,
        "value": "knapsack",
        "prior_weight": 4.0,
    }


# ---------------------------------------------------------------------- the driver's rounds
class Scripted:
    """Prompt i answers G = 4 responses per generation: ``script[i]``'s next reward list."""

    group_size = 4

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.calls = []

    def generate(self, items, doms, rnd, counts=None):
        assert counts is None
        self.calls.append((rnd, list(items)))
        rewards = [r for i in items for r in self.script[i].pop(0)]
        batch = from_lists(
            rewards,
            [g for g in range(len(items)) for _ in range(4)],
            prompt_keys=tuple(i for i in items for _ in range(4)),
            domain_ids=torch.tensor([d for d in doms for _ in range(4)]),
            domains=("a",),
            step=0,
        )
        rows = [(i, k) for i in items for k in range(4)]  # (prompt, its k-th response)
        return Generation(batch, rows=rows, tokens=4.0 * len(items))

    def assemble(self, generations, rows, group_ids, items, doms):
        every = [r for g in generations for r in g.rows]
        picked = [every[r] for r in rows.tolist()]
        rewards = torch.cat([g.batch.rewards for g in generations])[rows]
        batch = from_lists(
            rewards.tolist(),
            group_ids.tolist(),
            prompt_keys=tuple(p for p, _ in picked),
            domain_ids=torch.zeros(len(picked), dtype=torch.int64),
            domains=("a",),
            step=0,
        )
        return picked, batch


def test_until_signal_samples_the_uniform_prompts_again_and_trains_on_a_balanced_group():
    # p0 mixed at once; p1 all wrong, then 1 right in round 1; p2 never right (3 rounds)
    script = {
        0: [[1, 0, 1, 0]],
        1: [[0, 0, 0, 0], [0, 1, 0, 0]],
        2: [[0, 0, 0, 0]] * 4,
    }
    strategy = Strategy(
        {"name": "u", "rollouts": {"mode": "until_signal", "max_rounds": 3}}, domains=("a",)
    )
    intake = Intake([[0, 1, 2]], ("a",), torch.tensor([1.0]), seeds=(1, 1))
    d = Driver(strategy, intake)
    host = Scripted(script)
    seen = []
    decide = strategy.decide
    strategy.decide = lambda b, o=None: seen.append((b, o)) or decide(b, o)
    out = d.step(host, 3, 0)
    drawn = host.calls[0][1]
    assert sorted(drawn) == [0, 1, 2]
    assert [sorted(i) for _, i in host.calls[1:]] == [[1, 2], [2], [2]]
    assert [r for r, _ in host.calls] == [0, 1, 2, 3]
    # the trained groups, in the first generation's prompt order: p0 its 4; p1 its right
    # response (round 1, #1) and the first 3 wrong (round 0, #0..2); p2 its first 4
    by_prompt = {p: [] for p in drawn}
    for p, k in out.rows:
        by_prompt[p].append(k)
    assert [p for p, _ in out.rows[::4]] == drawn
    assert by_prompt[0] == [0, 1, 2, 3] and by_prompt[2] == [0, 1, 2, 3]
    assert by_prompt[1] == [0, 1, 2, 1]  # round 0's #0-2 (wrong), then round 1's #1 (right)
    batch, observed = seen[0]
    assert batch.num_groups == 3 and batch.batch_size == 12
    # observed: one group per prompt holding every response (4 + 8 + 16)
    assert observed.num_groups == 3 and sorted(observed.group_size.tolist()) == [4, 8, 16]
    m = out.metrics
    assert m[R + "rounds"] == 3.0 and m[R + "prompts_resampled"] == 2.0
    assert m[R + "generated"] == 28.0 and m[R + "trained"] == 12.0
    assert (m[R + "per_prompt_min"], m[R + "per_prompt_max"]) == (4.0, 16.0)
    assert m[R + "zero_variance_first"] == pytest.approx(2 / 3)
    assert m[R + "zero_variance_pooled"] == pytest.approx(1 / 3)


def test_a_round_is_rounded_up_to_equal_shares_by_repeating_its_prompts():
    # granule 2 (two processes): p1 alone is uniform, so round 1 generates p1 twice; its
    # pool then holds 12 responses (one right) and the step trains on a balanced 4
    script = {0: [[1, 0, 1, 0]], 1: [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]]}
    strategy = Strategy({"name": "u", "rollouts": {"mode": "until_signal"}}, domains=("a",))
    intake = Intake([[0, 1]], ("a",), torch.tensor([1.0]), seeds=(1, 1))
    host = Scripted(script)
    out = Driver(strategy, intake).step(host, 2, 0, granule=2)
    assert [(r, sorted(i)) for r, i in host.calls] == [(0, [0, 1]), (1, [1, 1])]
    assert out.metrics[R + "per_prompt_max"] == 12.0 and out.metrics[R + "rounds"] == 1.0
    assert sorted(k for p, k in out.rows if p == 1) == [0, 1, 1, 2]  # the right one: #1


def _counted_batch(rewards, items, doms, counts, domains):
    """A step-0 batch of prompt g's ``counts[g]`` responses in a row (``rewards`` in that
    order), and each response's group."""
    groups = [g for g, c in enumerate(counts.tolist()) for _ in range(c)]
    batch = from_lists(
        rewards,
        groups,
        prompt_keys=tuple(items[g] for g in groups),
        domain_ids=torch.tensor([doms[g] for g in groups]),
        domains=domains,
        step=0,
    )
    return batch, groups


def test_allocate_gives_the_host_counts_from_the_estimated_pass_rates():
    class Counting(Scripted):
        def generate(self, items, doms, rnd, counts=None):
            self.calls.append((rnd, list(items), counts.tolist()))
            rewards = [float(k % 2) for c in counts.tolist() for k in range(c)]
            batch, _ = _counted_batch(rewards, items, doms, counts, ("easy", "hard"))
            return Generation(batch, rows=None)

        def assemble(self, generations, rows, group_ids, items, doms):
            # one generation, trained on whole: every row in order
            assert len(generations) == 1 and torch.equal(rows, torch.arange(16))
            return None, generations[0].batch

    strategy = Strategy("knapsack_rl", domains=("easy", "hard"))
    # the hard domain solved 1 in 10, the easy one 9 in 10: knapsack favours the hard one
    strategy._rollouts.successes = torch.tensor([9.0, 1.0], dtype=torch.float64)
    strategy._rollouts.responses = torch.tensor([10.0, 10.0], dtype=torch.float64)
    intake = Intake([[0, 1], [10, 11]], ("easy", "hard"), torch.tensor([0.5, 0.5]), seeds=(1, 1))
    d = Driver(strategy, intake)
    host = Counting({})
    out = d.step(host, 4, 0)
    _, items, counts = host.calls[0]
    assert sum(counts) == 16 and len(host.calls) == 1
    hard = [c for i, c in zip(items, counts) if i >= 10]
    easy = [c for i, c in zip(items, counts) if i < 10]
    # p = 0.9: value (1 - .9^n - .1^n) x .9 x .01; p = 0.1: x .1 x .81, 9x as much per unit
    assert min(hard) > max(easy)
    assert out.batch.batch_size == 16 and out.metrics[R + "trained"] == 16.0
    assert torch.equal(
        allocate_counts(
            torch.tensor([0.9, 0.9, 0.1, 0.1], dtype=torch.float64), 16, 2, 32, "knapsack"
        )
        .sort()
        .values,
        torch.tensor(sorted(counts)),
    )


def test_sequential_gives_more_to_prompts_without_signal_within_the_steps_responses():
    class Counting(Scripted):
        """Prompt i answers ``counts`` responses: the next ones of ``script[i]``."""

        def generate(self, items, doms, rnd, counts=None):
            n = counts.tolist()
            self.calls.append((rnd, list(items), n))
            rewards = [self.script[i].pop(0) for i, c in zip(items, n) for _ in range(c)]
            batch, groups = _counted_batch(rewards, items, doms, counts, ("a",))
            return Generation(batch, rows=[(items[g], rnd) for g in groups])

    # G = 4, 3 prompts: 12 responses. first 2 each (6), then 2 per round to the uniform ones:
    # round 1: p1 (0, 0) and p2 (1, 1) get 2 each (10 spent); p1 now mixed (0 0 1 0);
    # round 2: p2 (1 1 1 1) gets the 2 left; spent: p2 holds 1 1 1 1 0 1, mixed
    script = {0: [1, 0], 1: [0, 0, 1, 0], 2: [1, 1, 1, 1, 0, 1]}
    strategy = Strategy(
        {"name": "s", "rollouts": {"mode": "sequential", "first": 2, "per_round": 2}},
        domains=("a",),
    )
    intake = Intake([[0, 1, 2]], ("a",), torch.tensor([1.0]), seeds=(1, 1))
    host = Counting(script)
    seen = []
    decide = strategy.decide
    strategy.decide = lambda b, o=None: seen.append((b, o)) or decide(b, o)
    out = Driver(strategy, intake).step(host, 3, 0)
    drawn = host.calls[0][1]
    assert host.calls[0][2] == [2, 2, 2]
    assert [(r, sorted(i), c) for r, i, c in host.calls[1:]] == [(1, [1, 2], [2, 2]), (2, [2], [2])]
    assert all(v == [] for v in host.script.values())  # every scripted response generated
    # trained on: every response, pooled by prompt in the first generation's order
    assert [p for p, _ in out.rows] == [p for p in drawn for _ in range({0: 2, 1: 4, 2: 6}[p])]
    batch, observed = seen[0]
    assert batch.batch_size == 12 and sorted(batch.group_size.tolist()) == [2, 4, 6]
    assert int((batch.group_std > 0).sum()) == 3  # every group carries signal
    m = out.metrics
    assert m[R + "rounds"] == 2.0 and m[R + "prompts_resampled"] == 2.0
    assert m[R + "generated"] == 12.0 and m[R + "trained"] == 12.0
    assert m[R + "zero_variance_first"] == pytest.approx(2 / 3)
    assert m[R + "zero_variance_pooled"] == 0.0
