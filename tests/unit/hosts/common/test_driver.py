"""`Driver`: one step's draws add up until the step is decided, the decision log gets what the
batch was drawn at, and state / log survive a checkpoint and a resume."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.harness.replay.replay import read_log
from dataflex_rl.hosts.common.decision_log import DecisionLog
from dataflex_rl.hosts.common.draw import add_counts
from dataflex_rl.hosts.common.driver import STATE_FILE, Driver
from dataflex_rl.hosts.common.intake import Intake

P = "dataflex/prerollout/"
GRESO = {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}
ROWS = ["a"] * 8 + ["b"] * 4  # static proportions 2/3, 1/3 (the pools' sizes)


def driver(tmp_path=None, spec=GRESO) -> Driver:
    strategy = Strategy(spec, domains=("a", "b"))
    log = None
    if tmp_path is not None:
        log = DecisionLog(tmp_path, domains=("a", "b"), strategy_spec={}, host="test")
    intake = Intake.from_rows(ROWS, ("a", "b"), seed=1, candidate_factor=2.0)
    return Driver(strategy, intake, log)


def batch_of(rows: list[int], step: int, reward: float = 1.0):
    """Two responses per drawn row, all with ``reward``."""
    return from_lists(
        [reward] * 2 * len(rows),
        [g for g in range(len(rows)) for _ in range(2)],
        advantages=[0.0] * 2 * len(rows),
        domain_ids=torch.tensor([ROWS[r] == "b" for r in rows for _ in range(2)]).long(),
        domains=("a", "b"),
        prompt_keys=tuple(r for r in rows for _ in range(2)),
        step=step,
    )


def test_counts_add_up_and_other_figures_are_replaced():
    total = {P + "skipped": 2.0, P + "active": 1.0, P + "rounds": 1.0}
    add_counts(total, {P + "skipped": 3.0, P + "active": 0.0, P + "rounds": 2.0, "x": 7.0})
    assert total == {P + "skipped": 5.0, P + "active": 0.0, P + "rounds": 3.0, "x": 7.0}


def test_a_steps_draws_add_up_until_it_is_decided():
    d = driver()
    # quotas 2 + 1 at 2/3, 1/3; candidate_factor 2: 4 + 2 candidates, then 2 + 2 for 1 + 1
    rows, _, first = d.draw(3, step=0)
    _, _, refill = d.draw(2, step=0)  # verl's refill: the same step
    assert first[P + "candidates"] == 6.0 and refill[P + "candidates"] == 4.0
    assert d.pending[P + "candidates"] == 10.0 and d.pending[P + "rounds"] == 2.0
    rows, _, _ = d.draw(3, step=1)  # a new step without a decision (the engine's empty step)
    assert d.pending[P + "candidates"] == 6.0
    _, metrics = d.decide(batch_of(rows, step=1))
    assert metrics[P + "candidates"] == 6.0 and d.pending == {} and d.decisions == 1
    # with pre-rollout, what skipping saved: every group here had zero variance
    assert metrics[P + "zero_variance_through"] == 1.0


def test_the_log_records_the_proportions_drawn_at(tmp_path):
    d = driver(tmp_path)
    rows, _, _ = d.draw(3, step=0)  # no mixer: the static 2/3, 1/3
    d.decide(batch_of(rows, step=0))
    d.decide(batch_of(rows, step=1))  # nothing drawn for step 1: the target is unknown
    d.close()
    steps = read_log(tmp_path).steps
    assert steps["target_a"].tolist()[0] == pytest.approx(2 / 3)
    assert steps["prerollout_candidates"].tolist()[0] == 6.0
    assert torch.isnan(torch.tensor(steps["target_a"].tolist()[1]))


def test_state_round_trip_continues_the_same_draws(tmp_path):
    a = driver()
    rows, _, _ = a.draw(3, step=0)
    a.decide(batch_of(rows, step=0))  # every row solved: GRESO skips them from now on
    state = a.state_dict()
    assert state["decisions"] == 1 and state["intake"]["sampler"]["cursor"] != [0, 0]
    assert state["strategy"]["history"] is not None
    b = driver()
    b.load_state_dict(state)
    assert b.decisions == 1
    assert a.draw(4, step=1)[0] == b.draw(4, step=1)[0]
    with pytest.raises(ValueError, match="no intake state"):
        b.load_state_dict({**state, "intake": None})


def test_save_flushes_the_log_and_restore_truncates_it(tmp_path, caplog):
    d = driver(tmp_path / "log")
    for step in range(3):
        rows, _, _ = d.draw(2, step=step)
        d.decide(batch_of(rows, step=step, reward=0.0))
        if step == 1:
            path = d.save(tmp_path / "ckpt")  # after 2 decisions
    assert path == tmp_path / "ckpt" / STATE_FILE
    d.close()
    assert read_log(tmp_path / "log").steps["step"].tolist() == [0, 1, 2]
    again = driver(tmp_path / "log")
    again.restore(tmp_path / "ckpt")  # a run past the checkpoint logged step 2: dropped
    assert again.decisions == 2
    assert read_log(tmp_path / "log").steps["step"].tolist() == [0, 1]
    fresh = driver(tmp_path / "log")
    with caplog.at_level("WARNING", logger="dataflex_rl.hosts.engine"):
        fresh.restore(tmp_path, step=1)  # a checkpoint folder without the state file
    assert "the strategy starts fresh" in caplog.text and fresh.decisions == 0
    assert read_log(tmp_path / "log").steps["step"].tolist() == [0]
