"""Asynchronous training on the engine: k = 0 is the synchronous step; with k >= 1 the
update trains on groups up to about k steps old, in the order they finished (long answers
later), with truncated importance weights; a run saved after 3 steps (its queue in the
checkpoint) and resumed ends exactly as the uninterrupted run."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl import PRESETS
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.checkpoint import load_checkpoint, save_checkpoint
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config

from .test_trainer import make_trainer

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")
A = "dataflex/async/"


@pytest.fixture(scope="module")
def tasks():
    return tasks_from_config(load_config({"tasks": {"train_size": 30, "eval_size": 5}}))


def whole_groups(trainer):
    return trainer.queue.groups


def _run(trainer, n):
    keys = ("train/reward", A + "staleness_mean", A + "staleness_max")
    steps = (trainer.train_step() for _ in range(n))
    return [tuple(repr(m.get(k)) for k in keys) for m in steps]  # nan == nan as text


def test_staleness_follows_k_and_the_update_is_corrected(tasks):
    sync = make_trainer(tasks)
    m = sync.train_step()
    assert A + "staleness_mean" not in m and "engine/async_is_weight_mean" not in m
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    for k in (1, 3):  # the shipped tiny policy on the default tasks: its groups carry signal
        tr = EmbeddedTrainer(load_config({"asynchronous": {"staleness": k}}))
        ms = [tr.train_step() for _ in range(6)]
        # the generator fills k + 1 batches at step 0, then one a step
        assert ms[0][A + "batches_generated"] == k + 1.0
        assert all(x[A + "batches_generated"] == 1.0 for x in ms[1:])
        assert all(x[A + "queued_groups"] == k * 16.0 for x in ms)
        late = ms[-1]
        assert k - 1 <= late[A + "staleness_mean"] <= k + 1 and late[A + "staleness_max"] <= k + 1
        w = [x["engine/async_is_weight_mean"] for x in ms if "engine/async_is_weight_mean" in x]
        assert w and all(0 < v <= 2.0 for v in w)  # steps with a gradient


def test_budgets_are_refused_and_refill_admits_kept_groups_under_asynchronous_training(tasks):
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    with pytest.raises(ConfigError, match=r"asynchronous\.staleness: 1, but strategy 'reinforce"):
        make_trainer(tasks, "reinforce_ada", asynchronous={"staleness": 1})
    # dapo at k = 2: the update takes queued groups in finish order, discarding the ones its
    # selector drops (observed, not trained on), until it holds 16 kept groups
    tr = EmbeddedTrainer(load_config({"asynchronous": {"staleness": 2}}), "dapo")
    seen = []
    decide = tr.driver.strategy.decide
    tr.driver.strategy.decide = lambda b, o=None: seen.append((b, o)) or decide(b, o)
    ms = [tr.train_step() for _ in range(5)]
    assert all(m["dataflex/refill/groups_kept"] == 16.0 for m in ms)
    assert all(m["engine/groups_effective"] == 16.0 for m in ms)
    assert sum(m["dataflex/refill/discarded"] for m in ms) > 0
    for (_batch, observed), m in zip(seen, ms):
        extra = int(m["dataflex/refill/discarded"])
        assert (observed is None) == (extra == 0)
        if observed is not None:  # the discarded groups observed after the trained ones
            assert observed.num_groups == 16 + extra
            assert bool((observed.group_std[16:] == 0).all())


@pytest.mark.parametrize(
    "name,admission",
    [("baseline", None), ("difffilter", "drop"), ("dump_ucb", "pace"), ("dapo", None)],
)
def test_resume_after_3_steps_equals_the_uninterrupted_run(tasks, tmp_path, name, admission):
    cfg = {"asynchronous": {"staleness": 2}}
    if admission is not None:  # a tight limit: drops (prompts to draw again) or pauses
        name = {"name": name, "select": name, "admission": {"max_staleness": 1, "past": admission}}
        if admission == "pace":
            name = {
                "name": "p",
                "mix": "dump_ucb",
                "admission": {"max_staleness": 1, "past": "pace"},
            }
    whole = make_trainer(tasks, name, **cfg)
    ref = _run(whole, 6)
    first = make_trainer(tasks, name, **cfg)
    head = _run(first, 3)
    save_checkpoint(tmp_path, first.state_dict())
    resumed = make_trainer(tasks, name, **cfg)
    resumed.load_state_dict(load_checkpoint(tmp_path))
    assert resumed.queue.groups == whole_groups(first)
    tail = _run(resumed, 3)
    assert head + tail == ref
    assert resumed.parameter_hash() == whole.parameter_hash()
    assert torch.equal(
        torch.tensor([q.version for q in resumed.queue.batches]),
        torch.tensor([q.version for q in whole.queue.batches]),
    )


@pytest.mark.parametrize("name", [n for n in PRESETS if "rollouts" not in PRESETS[n].spec])
def test_every_preset_trains_asynchronously(tasks, name):
    # select, tokens, reweight on the trained groups; mixing, skip policies and curricula on
    # late signals; refill through the queue
    tr = make_trainer(tasks, name, asynchronous={"staleness": 2})
    ms = [tr.train_step() for _ in range(4)]
    assert all(m[A + "staleness_max"] <= 3 for m in ms)
    last = ms[-1]  # the update trains on older groups (refill: when its selector kept any)
    assert last[A + "staleness_mean"] >= 1.0 or last.get("dataflex/refill/groups_kept") == 0
