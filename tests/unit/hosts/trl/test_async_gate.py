"""`GroupGate` (the dataflex step on TRL's AsyncGRPOTrainer rollout queue) without TRL: samples
are plain dataclasses shaped like TRL's ``RolloutSample``, the queue a ``queue.Queue``."""

from __future__ import annotations

import queue
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.config import HostConfig
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.trl.async_gate import GroupGate
from dataflex_rl.hosts.trl.config import async_host_settings, check_async

G = 4


@dataclass
class Sample:  # the fields of TRL 1.16's RolloutSample the gate reads
    group_id: int
    model_version: int
    advantage: float
    completion_mask: np.ndarray
    prompt: str = "p"
    metrics: dict = field(default_factory=dict)


def group(gid, rewards, version=0):
    r = np.array(rewards, dtype=float)
    adv = (r - r.mean()) / (r.std() + 1e-8)
    return [
        Sample(gid, version, float(a), np.ones(3, np.int64), f"p{gid}", {"reward": float(x)})
        for a, x in zip(adv, r)
    ]


def gate(strategy, samples, *, n=2, version=0, max_staleness=None, admission=None):
    block = HostConfig(strategy=strategy)
    spec = check_async(block, None)
    driver = Driver.for_dataset(
        block, spec, async_host_settings(), None, "/tmp", log_decisions=False
    )
    q = queue.Queue()
    for s in samples:
        q.put(s)
    sink = defaultdict(list)
    g = GroupGate(
        q, driver, group_size=G, groups_per_update=n, version=lambda: version, sink=sink,
        max_staleness=max_staleness, admission=admission, poll_s=0.01,
    )  # fmt: skip
    return g, sink


def take(g, k):
    return [g.get() for _ in range(k)]


def test_interleaved_samples_are_buffered_into_whole_groups():
    a, b = group(0, [1, 0, 1, 0]), group(1, [1, 1, 0, 0])
    mixed = [a[0], b[0], a[1], b[1], b[2], a[2], b[3], a[3]]  # group 1 completes first
    g, sink = gate("baseline", mixed)
    got = take(g, 8)
    assert [s.group_id for s in got] == [1] * 4 + [0] * 4
    assert sink["dataflex/trl_async/samples_passed"] == [8.0]


def test_dapo_takes_groups_off_the_stream_until_the_update_holds_n_kept():
    rewards = [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]]
    g, sink = gate("dapo", [s for i, r in enumerate(rewards) for s in group(i, r)])
    got = take(g, 8)
    # hand-worked: group 0 (all 1) dropped, 1 kept, refill: 2 (all 0) dropped, 3 kept -> full;
    # the dropped slot 0 takes the refill's kept group (the shared assembly, assemble_groups)
    assert [s.group_id for s in got] == [3] * 4 + [1] * 4
    assert sink["dataflex/refill/full"] == [1.0] and sink["dataflex/refill/rounds"][0] >= 1
    assert [s.advantage for s in got] == [s.advantage for s in group(3, rewards[3])] + [
        s.advantage for s in group(1, rewards[1])
    ]
    assert g.inner.qsize() == 4  # group 4 waits for the next update


def test_stale_groups_are_dropped_whole_before_the_strategy_sees_them():
    samples = group(0, [1, 0, 1, 0], version=0) + group(1, [1, 1, 0, 0], version=3)
    samples += group(3, [1, 0, 0, 0], version=1) + group(2, [0, 1, 0, 0], version=2)
    g, sink = gate("baseline", samples, version=3, max_staleness=2, admission=1)
    got = take(g, 8)
    assert list(dict.fromkeys(s.group_id for s in got)) == [1, 2]
    assert sink["dataflex/trl_async/dropped_past_max_staleness"] == [1.0]  # group 0: 3 > 2
    assert sink["dataflex/admission/dropped"] == [1.0]  # group 3: 2 > 1
    assert sink["dataflex/async/staleness_mean"] == [0.5]  # groups 1 (0) and 2 (1)
    assert sink["dataflex/async/staleness_max"] == [1.0]


def test_a_group_forked_past_num_generations_is_an_error():
    extra = group(0, [1, 0, 1, 0])[:1]
    g, _ = gate("baseline", group(0, [1, 0, 1, 0]) + extra + group(1, [1, 0, 0, 0]))
    with pytest.raises(RuntimeError, match="forked into several rows"):
        take(g, 8)


def test_check_async_refuses_pace_naming_the_worker():
    block = HostConfig(strategy={"name": "p", "admission": {"max_staleness": 1, "past": "pace"}})
    with pytest.raises(ConfigError, match="admission.past.*_repeat_iterator"):
        check_async(block, None)
