"""The curriculum on the engine: a few steps draw through it, and a run saved after 3 steps
(an on-disk checkpoint: safetensors + JSON) and resumed draws, trains and ends exactly as the
uninterrupted run."""

from __future__ import annotations

import pytest

from dataflex_rl.hosts.engine.checkpoint import load_checkpoint, save_checkpoint
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config

from .test_trainer import make_trainer

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")

#: a target of 0 at width .1 over the tiny untrained policy (it solves little): what it
#: failed is drawn again; prerollout shares the history (greso skips the all-wrong ones)
STRATEGIES = {
    "curriculum": {
        "name": "curriculum",
        "curriculum": {"actuator": {"name": "target_difficulty", "target": 0.0, "width": 0.1}},
    },
    "with_greso": {
        "name": "with_greso",
        "curriculum": {"preset": "nemotron_curriculum", "actuator": {"steps": 4}},
        "prerollout": {"actuator": "greso"},
        "select": "difffilter",
    },
}


@pytest.fixture(scope="module")
def tasks():
    return tasks_from_config(load_config({"tasks": {"train_size": 30, "eval_size": 5}}))


def _steps(trainer, n: int) -> list[dict]:
    return [trainer.train_step() for _ in range(n)]


def _drawn(metrics: list[dict]) -> list[tuple]:
    keys = ("dataflex/curriculum/target", "dataflex/curriculum/drawn_pass_rate")
    return [tuple(m.get(k) for k in keys) + (m["train/reward"],) for m in metrics]


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_resume_after_3_steps_equals_the_uninterrupted_run(tasks, tmp_path, name):
    spec = STRATEGIES[name]
    whole = make_trainer(tasks, spec)
    ref = _steps(whole, 5)
    assert all(m["dataflex/curriculum/active"] == 1.0 for m in ref)
    first = make_trainer(tasks, spec)
    head = _steps(first, 3)
    save_checkpoint(tmp_path, first.state_dict())
    resumed = make_trainer(tasks, spec)
    resumed.load_state_dict(load_checkpoint(tmp_path))
    assert len(resumed.driver.strategy.history) > 0  # the history came back with it
    tail = _steps(resumed, 2)
    assert _drawn(head + tail) == _drawn(ref)
    assert resumed.parameter_hash() == whole.parameter_hash()
    assert resumed.state_dict()["dataflex"]["intake"]["sampler"]["deficit"].tolist() == (
        whole.state_dict()["dataflex"]["intake"]["sampler"]["deficit"].tolist()
    )


def test_the_curriculum_changes_the_draw_not_the_domain_counts(tasks):
    plain = make_trainer(tasks, "baseline")
    cur = make_trainer(tasks, STRATEGIES["curriculum"])
    for step in range(4):
        pp, dp, _ = plain.driver.draw(4, step)
        pc, dc, m = cur.driver.draw(4, step)
        assert dc == dp
        assert m["dataflex/curriculum/target"] == 0.0
    assert "dataflex/curriculum/active" not in plain.driver.draw(4, 5)[2]
