"""Decision logs of real engine runs replay exactly: every preset, and a resumed run.

Each preset runs a few steps of the real engine (shipped tiny policy, real tasks, 4 prompts x
4 samples) with the decision log on; replaying the preset on its own log must reproduce every
logged decision bit for bit (keep mask, weights, recomputed advantages, mixer updates). ``ar``
weights tokens and ``high_entropy`` and ``dapo_entropy`` choose them, so their runs log the
tokens (``full_tokens``).
"""

from __future__ import annotations

import copy

import pytest

from dataflex_rl.harness.replay.replay import read_log, replay
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config
from dataflex_rl.hosts.engine.policy import load_policy
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from dataflex_rl.presets import PRESETS

MIX = {n for n, p in PRESETS.items() if "mix" in p.spec}


def config(**log):
    return load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "grpo": {"prompts_per_step": 4, "group_size": 4},
            "tasks": {"train_size": 60},
            "eval": {"per_domain": 6, "samples": 1, "every": 0},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
            "decision_log": {"enabled": True, "steps_per_file": 2, **log},
        }
    )


@pytest.fixture(scope="module")
def shared():
    cfg = config()
    return tasks_from_config(cfg), load_policy(cfg.policy)


@pytest.mark.filterwarnings("ignore:policy 'tiny' was warm-started")
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_engine_log_replays_its_own_preset_exactly(tmp_path, shared, name):
    taskset, policy = shared
    # token weights, token choices
    cfg = config(full_tokens=name in ("ar", "high_entropy", "dapo_entropy"))
    policy = copy.deepcopy(policy)
    tr = EmbeddedTrainer(cfg, name, seed=0, taskset=taskset, policy=policy, out_dir=tmp_path)
    steps = 6 if name in MIX else 3  # mixers update after their 5th step
    for _ in range(steps):
        tr.train_step()
    tr.driver.close()
    res = replay(read_log(tmp_path), [name])
    assert res.overall[name]["exact_steps"] == steps, [r["exact"] for r in res.rows]
    if "refill" in PRESETS[name].spec:  # every generated group is logged; the refill itself
        # is what replay cannot redo, and it says so
        assert any("cannot redo the refill" in n for n in res.notes[name])
    if name in MIX:
        assert any(r["mix_updated"] for r in res.rows)


@pytest.mark.filterwarnings("ignore:policy 'tiny' was warm-started")
def test_a_resumed_run_logs_every_step_once_and_replays(tmp_path, shared):
    cfg = config()
    cfg.log.checkpoint_every = 2
    run_training(cfg, "difffilter", steps=3, out_dir=tmp_path, progress=False)
    run_training(cfg, "difffilter", steps=5, out_dir=tmp_path, resume=True, progress=False)
    log = read_log(tmp_path)
    assert log.steps["step"].tolist() == [0, 1, 2, 3, 4]
    res = replay(log, ["difffilter"])
    assert res.overall["difffilter"]["exact_steps"] == 5
