"""Asynchronous training's queue and admission (`GenerationQueue`, `Driver.step` with a
queue): hand-worked finish order, drops and their prompts drawn again, pacing's owed share,
staleness in the trained batch, and the section's refusals."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.config import HostConfig, HostSettings, check_block
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.pipeline import GenerationQueue
from dataflex_rl.hosts.common.sampler import DomainSampler
from dataflex_rl.hosts.common.step import Generation

A, ADM = "dataflex/async/", "dataflex/admission/"


def gen(lengths, domains=None):
    """One response per group, of the given lengths."""
    B = len(lengths)
    g = Generation(from_lists([1.0] * B, list(range(B)), lengths))
    g.items, g.domain_ids = list(range(B)), domains or [0] * B
    return g


def test_the_queue_hands_out_the_groups_that_finished_first():
    q = GenerationQueue(depth=2, max_tokens=10)
    a = q.push(gen([10, 2, 5]), version=0)  # finish 0 + 2 x (1, .2, .5) = 2, .4, 1
    b = q.push(gen([1, 10]), version=0)  # clock 1: 1.2, 3
    assert a.finish.tolist() == pytest.approx([2.0, 0.4, 1.0])
    assert b.finish.tolist() == pytest.approx([1.2, 3.0])
    got, dropped, _ = q.take(3)
    assert [(x is a, g) for x, g in got] == [(True, 1), (True, 2), (False, 0)] and not dropped
    assert q.groups == 2
    c = q.push(gen([1]), version=1)  # clock 2: 2.2
    got, _, _ = q.take(2)
    assert [(x is a, x is c, g) for x, g in got] == [(True, False, 0), (False, True, 0)]
    q.drop_done()
    assert len(q.batches) == 1 and q.groups == 1  # b's long group waits


def test_admission_drops_every_group_past_its_domains_limit_or_trains_it_first():
    def queue():
        q = GenerationQueue(depth=3, max_tokens=10)
        q.push(gen([10, 1], [0, 1]), version=0)  # finish 3, .3
        q.push(gen([1, 1], [0, 1]), version=2)  # clock 1: 1.3, 1.3
        return q

    limits = torch.tensor([1, 5])  # domain 0 tolerates 1 update, domain 1 five
    # at step 3 batch 0's domain-0 group is 3 old: past its limit
    q = queue()
    assert q.stale_domains(3, limits).tolist() == [True, False]
    got, dropped, _ = q.take(2, 3, limits, "drop")
    assert [(x.version, g) for x, g in dropped] == [(0, 0)]
    assert [(x.version, g) for x, g in got] == [(0, 1), (2, 0)]
    q = queue()
    got, dropped, _ = q.take(2, 3, limits, "pace")
    assert not dropped and [(x.version, g) for x, g in got] == [(0, 0), (0, 1)]


def test_refill_discards_the_dropped_groups_that_finished_before_the_nth_kept_one():
    q = GenerationQueue(depth=1, max_tokens=10)
    q.push(gen([1, 2, 3, 4, 5]), 0, kept=torch.tensor([False, True, False, True, True]))
    got, dropped, gone = q.take(2)
    assert [g for _, g in got] == [1, 3] and [g for _, g in gone] == [0, 2] and not dropped
    assert q.groups == 1  # group 4 waits


def test_a_paused_domain_is_owed_its_share():
    s = DomainSampler([10, 10], ["a", "b"], seed=0)
    half = torch.tensor([0.5, 0.5], dtype=torch.float64)
    assert s.quota(half, 4, torch.tensor([True, False])).tolist() == [0, 4]
    assert s.quota(half, 4).tolist() == [4, 0]  # made up: 4 each over the two draws
    assert s.quota(half, 4).tolist() == [2, 2]


class Host:
    """Prompt i answers one group of 2 responses of length ``lengths[i]`` (budget 10)."""

    group_size = 2

    def __init__(self, lengths):
        self.lengths, self.calls = lengths, []

    def generate(self, items, doms, rnd, counts=None):
        self.calls.append(list(items))
        n = [self.lengths[i] for i in items for _ in range(2)]
        batch = from_lists(
            [float(i % 2) for i in items for _ in range(2)] or [],
            [g for g in range(len(items)) for _ in range(2)],
            n,
            prompt_keys=tuple(i for i in items for _ in range(2)),
            domain_ids=torch.tensor([d for d in doms for _ in range(2)]),
            domains=("a", "b"),
            step=0,
        )
        return Generation(batch, rows=[i for i in items for _ in range(2)])

    def assemble(self, generations, rows, group_ids, items, doms):
        every = [r for g in generations for r in g.rows]
        picked = [every[r] for r in rows.tolist()]
        batch = from_lists(
            [float(i % 2) for i in picked],
            group_ids.tolist(),
            [self.lengths[i] for i in picked],
            prompt_keys=tuple(picked),
            domain_ids=torch.tensor([doms[g] for g in group_ids.tolist()]),
            domains=("a", "b"),
            step=0,
        )
        return picked, batch


def test_the_driver_trains_on_what_finished_first_and_draws_dropped_prompts_again():
    # domain a's prompts (0-9) answer in 10 tokens, b's (10-19) in 1: with k = 2, b's
    # groups finish first; admission drops a's groups once they are 2 updates old
    lengths = {i: 10 if i < 10 else 1 for i in range(20)}
    spec = {"name": "d", "admission": {"max_staleness": 1}}
    strategy = Strategy(spec, domains=("a", "b"))
    intake = Intake([list(range(10)), list(range(10, 20))], ("a", "b"),
                    torch.tensor([0.5, 0.5]), seeds=(1, 1))  # fmt: skip
    d = Driver(strategy, intake)
    host = Host(lengths)
    q = GenerationQueue(depth=2, max_tokens=10)
    out = d.step(host, 2, 0, queue=q)
    assert len(host.calls) == 3 and q.groups == 4  # (k + 1) x 2 generated, 2 taken
    # the two b groups finished first (clock 0 + .2, clock 1 + .2)
    assert all(i >= 10 for i in out.rows) and out.batch.staleness.tolist() == [0] * 4
    assert out.metrics[A + "staleness_max"] == 0.0
    steps = [out] + [d.step(host, 2, s, queue=q) for s in (1, 2)]
    # step 2: the a groups of step 0 (finish 2, 3, 4) are 2 updates old: dropped, and their
    # prompts are the first the next generation draws
    assert steps[-1].metrics[ADM + "dropped"] >= 1
    dropped_prompts = [i for i, _ in q.requeue] or host.calls[-1]
    assert all(i < 10 for i in dropped_prompts)
    assert all(int(s.batch.staleness.max()) <= 1 for s in steps)
    share = steps[-1].metrics[A + "domain/b/share_total"]
    assert share > 0.5  # what drop admission does to the slow domain's share


def test_admission_is_refused_where_nothing_waits():
    with pytest.raises(ConfigError, match=r"max_staleness: a per-domain limit names every"):
        Strategy({"name": "x", "admission": {"max_staleness": {"a": 1}}}, domains=("a", "b"))
    block = HostConfig(strategy={"name": "x", "admission": {"max_staleness": 1}})
    for host, code in (("verl", "PPOTrainerSync"), ("trl", "AsyncGRPOTrainer")):
        with pytest.raises(ConfigError, match=rf"admission acts under asynchronous.*{code}"):
            check_block(block, HostSettings(host, "grpo", True, ()))
    with pytest.raises(ConfigError, match="admission acts under asynchronous training"):
        Strategy({"name": "x", "select": "dapo", "refill": {}, "admission": {}})


def test_the_decided_batch_carries_the_step_it_is_decided_at():
    # a host that hands back a queued generation's own batch (stamped with its step 0)
    class Whole(Host):
        def assemble(self, generations, rows, group_ids, items, doms):
            return None, generations[0].batch

    lengths = {i: 5 for i in range(20)}
    strategy = Strategy({"name": "b"}, domains=("a", "b"))
    intake = Intake([list(range(10)), list(range(10, 20))], ("a", "b"),
                    torch.tensor([0.5, 0.5]), seeds=(1, 1))  # fmt: skip
    d, q = Driver(strategy, intake), GenerationQueue(depth=1, max_tokens=10)
    for s in range(3):
        out = d.step(Whole(lengths), 2, s, queue=q)
        assert out.batch.step == s


def test_a_host_whose_asynchronous_step_is_its_own_reports_the_batch_staleness():
    # verl's asynchronous modes: the host fills RolloutBatch.staleness and calls decide; the
    # driver reports it over groups (a group: its most stale response; padding left out)
    from dataflex_rl.hosts.common.driver import staleness_figures

    batch = from_lists(
        [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        [0, 0, 1, 1, 2, 2],
        staleness=torch.tensor([1, 2, 0, 0, 5, 5]),
        is_padding=torch.tensor([False, False, False, False, True, True]),
    )
    assert staleness_figures(batch) == {
        "dataflex/async/staleness_mean": 1.0,  # groups 0 and 1: 2 and 0
        "dataflex/async/staleness_max": 2.0,
    }
    _, metrics = Driver(Strategy({"name": "b"})).decide(batch)
    assert metrics["dataflex/async/staleness_max"] == 2.0
    _, metrics = Driver(Strategy({"name": "b"})).decide(batch.replace(staleness=None))
    assert "dataflex/async/staleness_max" not in metrics  # synchronous: nothing to report
    # admission passes the shared check in an asynchronous host mode (verl's own checks next)
    block = HostConfig(strategy={"name": "x", "admission": {"max_staleness": 1}})
    check_block(block, HostSettings("verl", "grpo", True, (), asynchronous="colocate_async"))
