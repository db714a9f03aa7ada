"""``target_difficulty`` and the intake's curriculum draw: hand-worked pass rates, targets,
weights and draw frequencies (a do-nothing draw, the pools' plain walk, fails each), the
mix's counts kept exactly, the refusals, and the prompt-history cache of the intake."""

from __future__ import annotations

import math
import time

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.curriculum.target import TargetDifficulty
from dataflex_rl.hosts.common.intake import Intake

Q = math.exp(-2.0)  # the weight of a prompt 2 widths (.3 at width .15) from the target


def _groups(groups: list[tuple[str, list[float]]], step: int = 0):
    """A batch of one group per (key, rewards)."""
    rewards, gids, keys = [], [], []
    for g, (key, rs) in enumerate(groups):
        rewards += rs
        gids += [g] * len(rs)
        keys += [key] * len(rs)
    return from_lists(rewards, gids, [1] * len(rewards), prompt_keys=tuple(keys), step=step)


def _rate(k: int, n: int = 10) -> list[float]:
    """``n`` rewards, ``k`` of them successes."""
    return [1.0] * k + [0.0] * (n - k)


def _curriculum(**params) -> dict:
    return {"name": "c", "curriculum": {"actuator": {"name": "target_difficulty", **params}}}


# ------------------------------------------------------------------------ hand-worked
def test_hand_worked_pass_rates_with_and_without_the_prior():
    h = PromptHistory(4)
    h.update(_groups([("a", [1.0, 0, 0, 0]), ("b", [1.0, 1, 1, 1])], step=0))
    h.update(_groups([("a", [1.0, 1, 0, 0])], step=1))
    o = h.outcomes(["a", "b", "c"])
    # a: 1 + 2 successes of 8 responses; b: 4 of 4; c never seen: the prior
    assert TargetDifficulty().pass_rate(o).tolist() == [0.375, 1.0, 0.5]
    # 2 pseudo-responses at .5: a (1 + 3) / 10, b (1 + 4) / 6; c still the prior
    got = TargetDifficulty(prior=0.5, prior_weight=2.0).pass_rate(o).tolist()
    assert got == pytest.approx([0.4, 5 / 6, 0.5], abs=1e-15)
    assert TargetDifficulty(prior=0.2).pass_rate(o).tolist()[2] == 0.2
    # a history of 1 remembers a's last group only: 2 of 4
    h1 = PromptHistory(1)
    h1.update(_groups([("a", [1.0, 0, 0, 0])], step=0))
    h1.update(_groups([("a", [1.0, 1, 0, 0])], step=1))
    assert TargetDifficulty().pass_rate(h1.outcomes(["a"])).tolist() == [0.5]


def test_hand_worked_targets_of_the_schedules():
    assert [TargetDifficulty(target=0.4).target_at(s) for s in (0, 7, 10**6)] == [0.4] * 3
    lin = TargetDifficulty(schedule="linear", start=0.8, end=0.3, steps=200)
    got = [lin.target_at(s) for s in (0, 50, 100, 200, 500)]
    assert got == pytest.approx([0.8, 0.675, 0.55, 0.3, 0.3], abs=1e-12)
    rising = TargetDifficulty(schedule="linear", start=0.2, end=0.6, steps=4)
    assert [rising.target_at(s) for s in range(6)] == pytest.approx(
        [0.2, 0.3, 0.4, 0.5, 0.6, 0.6], abs=1e-12
    )


def test_hand_worked_log_weights():
    rate = torch.tensor([0.375, 1.0, 0.5], dtype=torch.float64)
    # z = (p - .5) / .15 = -5/6, 10/3, 0: log w = -z^2 / 2
    lw = TargetDifficulty(target=0.5, width=0.15).log_weights(rate, 0)
    assert lw.tolist() == pytest.approx([-25 / 72, -50 / 9, 0.0], abs=1e-12)
    # floor .1: w = .1 + .9 exp(-z^2 / 2)
    w = TargetDifficulty(target=0.5, width=0.15, floor=0.1).log_weights(rate, 0).exp()
    want = [0.1 + 0.9 * math.exp(-25 / 72), 0.1 + 0.9 * math.exp(-50 / 9), 1.0]
    assert w.tolist() == pytest.approx(want, rel=1e-12)


def _three_prompt_intake(strategy: Strategy, seed: int = 0) -> Intake:
    """One domain of prompts x, y, z with pass rates .2, .5, .8 in the strategy's history."""
    strategy.decide(_groups([("x", _rate(2)), ("y", _rate(5)), ("z", _rate(8))]))
    return Intake([["x", "y", "z"]], ("d",), torch.ones(1), seeds=(seed, seed))


def test_hand_worked_draw_frequencies_at_a_constant_target():
    # weights e^-2, 1, e^-2: y is the first draw with probability 1 / (1 + 2 e^-2) = .787
    # (a plain walk of the pool: 1/3); a pair holds y unless both others are drawn,
    # 1 - 2 e^-4 / ((1 + 2 e^-2)(1 + e^-2)) = .975 (plain: 2/3)
    s = Strategy(_curriculum(target=0.5, width=0.15))
    intake = _three_prompt_intake(s)
    n = 1500
    first = sum(intake.draw(1, s, step)[0] == ["y"] for step in range(1, n + 1))
    p1 = 1 / (1 + 2 * Q)
    assert abs(first / n - p1) < 4 * math.sqrt(p1 * (1 - p1) / n)
    pairs = sum("y" in intake.draw(2, s, step)[0] for step in range(n + 1, 2 * n + 1))
    p2 = 1 - 2 * Q * Q / ((1 + 2 * Q) * (1 + Q))
    assert abs(pairs / n - p2) < 4 * math.sqrt(p2 * (1 - p2) / n)


def test_hand_worked_linear_schedule_moves_the_draw():
    # start .8 end .2 over 10^5 steps: over steps 1-400 the target stays above .797, where z
    # (.8) weighs about 1, y e^-2, x e^-8 (z first with probability > .87); from step 10^5
    # on x (.2) weighs 1, y e^-2, z e^-8
    s = Strategy(_curriculum(schedule="linear", start=0.8, end=0.2, steps=100_000))
    intake = _three_prompt_intake(s)
    early = [intake.draw(1, s, k)[0][0] for k in range(1, 401)]
    late = [intake.draw(1, s, 100_000 + k)[0][0] for k in range(400)]
    assert early.count("z") > 320 and early.count("x") < 5
    assert late.count("x") > 320 and late.count("z") < 5
    _, _, m = intake.draw(1, s, 50_000)
    assert m["dataflex/curriculum/target"] == pytest.approx(0.5)


# ------------------------------------------------------------------------ the intake
def _pools():
    return [[f"m{i}" for i in range(40)], [f"l{i}" for i in range(25)], [f"s{i}" for i in range(7)]]


def _seen(strategy: Strategy, pools, step: int = 0) -> None:
    """Every prompt of the pools decided once, its pass rate (i mod 5) / 4."""
    groups = [(k, _rate(i % 5, 4)) for pool in pools for i, k in enumerate(pool)]
    strategy.decide(_groups(groups, step))


def test_domain_counts_follow_the_mix_exactly_and_prompts_differ():
    pools = _pools()
    static = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    plain_s = Strategy("baseline")
    cur_s = Strategy(_curriculum(target=0.0, width=0.05))
    _seen(cur_s, pools)
    plain = Intake(pools, ("m", "l", "s"), static, seeds=(3, 4))
    cur = Intake(pools, ("m", "l", "s"), static, seeds=(3, 4))
    rates = []
    for step, n in enumerate((5, 1, 7, 3, 16, 2), start=1):
        items_p, dom_p, _ = plain.draw(n, plain_s, step)
        items_c, dom_c, m = cur.draw(n, cur_s, step)
        assert dom_c == dom_p  # the mix's counts (and order) are the plain draw's
        assert all(item in pools[d] for item, d in zip(items_c, dom_c))
        assert len(set(items_c)) == len(items_c)
        rates.append(m["dataflex/curriculum/drawn_pass_rate"])
    # target 0 at width .05: the prompts of pass rate 0 (i = 0 mod 5) first; the 7 prompts
    # of s hold two, so a step that draws 3 of s draws one at .25 (1/16 of step 5's mean)
    assert rates == [0.0, 0.0, 0.0, 0.0, 0.25 / 16, 0.0]


def test_the_draw_is_seeded_and_deterministic():
    pools = _pools()
    a, b = (Strategy(_curriculum(target=0.3)) for _ in range(2))
    for s in (a, b):
        _seen(s, pools)
    ia, ib = (Intake(pools, ("m", "l", "s"), torch.ones(3) / 3, seeds=(1, 2)) for _ in "ab")
    for step in range(1, 6):
        assert ia.draw(9, a, step) == ib.draw(9, b, step)
    ic = Intake(pools, ("m", "l", "s"), torch.ones(3) / 3, seeds=(1, 3))
    assert [ic.draw(9, a, s)[0] for s in range(6, 9)] != [ia.draw(9, a, s)[0] for s in range(6, 9)]


def test_a_step_never_draws_a_prompt_twice_until_its_pool_runs_out():
    # refill rounds (several draws of one step) and pre-rollout candidate rounds alike
    s = Strategy(_curriculum(target=0.5, width=0.01))
    intake = _three_prompt_intake(s)
    got = [intake.draw(1, s, 1)[0][0] for _ in range(3)]
    assert got[0] == "y" and sorted(got) == ["x", "y", "z"]
    assert intake.draw(1, s, 1)[0] == ["y"]  # the pool ran out: y, the heaviest, again
    assert intake.draw(1, s, 2)[0] == ["y"]  # a new step starts afresh
    # 5 of 3: the whole pool by weight (y first), then again its first 2 in that order
    items = intake.draw(5, s, 3)[0]
    assert items[:3] == items[3:] + items[2:3] and items[0] == "y"


def test_with_prerollout_candidates_come_from_the_curriculum():
    s = Strategy({**_curriculum(target=1.0, width=0.05), "prerollout": {"actuator": "greso"}})
    pools = _pools()
    _seen(s, pools)
    intake = Intake(pools, ("m", "l", "s"), torch.ones(3) / 3, seeds=(0, 0))
    items, _, m = intake.draw(6, s, 1)
    assert len(items) == 6 and len(set(items)) == 6
    assert m["dataflex/curriculum/active"] == 1.0
    assert "dataflex/prerollout/candidates" in m


def test_before_warm_up_the_intake_walks_its_pools_as_without_a_curriculum():
    pools = _pools()
    s = Strategy({"name": "c", "curriculum": {"actuator": "target_difficulty", "warmup_steps": 2}})
    plain = Intake(pools, ("m", "l", "s"), torch.ones(3) / 3, seeds=(5, 5))
    cur = Intake(pools, ("m", "l", "s"), torch.ones(3) / 3, seeds=(5, 5))
    for step in (0, 1):
        items, _, m = cur.draw(4, s, step)
        assert items == plain.draw(4, Strategy("baseline"), step)[0]
        assert m["dataflex/curriculum/active"] == 0.0 and "dataflex/curriculum/target" not in m
    assert s.prompt_log_weights(s.history.rows(torch.tensor([-1])), 1) is None
    assert s.prompt_log_weights(s.history.rows(torch.tensor([-1])), 2) is not None
    assert cur.draw(4, s, 2)[2]["dataflex/curriculum/active"] == 1.0


def test_the_history_rows_follow_growth_and_a_restored_history():
    pools = _pools()
    s = Strategy(_curriculum())
    intake = Intake(pools, ("m", "l", "s"), torch.ones(3) / 3)
    key_of = lambda d, i: pools[d][i]  # noqa: E731
    rows = intake._history_rows(s.history, key_of)
    assert (rows == -1).all()
    s.decide(_groups([("l3", [1.0, 0]), ("m0", [0.0, 0])]))
    rows = intake._history_rows(s.history, key_of).clone()
    assert rows[40 + 3] == 0 and rows[0] == 1 and int((rows >= 0).sum()) == 2
    # a history restored with other contents: every row mapped again
    other = PromptHistory(4)
    other.update(_groups([("s6", [1.0, 1]), ("l3", [0.0, 1])]))
    s.history.load_state_dict(other.state_dict())
    rows = intake._history_rows(s.history, key_of)
    assert rows[40 + 25 + 6] == 0 and rows[40 + 3] == 1 and rows[0] == -1


def test_a_pool_of_100k_prompts_draws_fast():
    pools = [[f"p{i}" for i in range(60_000)], [f"q{i}" for i in range(40_000)]]
    s = Strategy(_curriculum(target=0.2))
    seen = [(k, _rate(i % 3, 3)) for i, k in enumerate(pools[0][:2000] + pools[1][:2000])]
    s.decide(_groups(seen))
    intake = Intake(pools, ("p", "q"), torch.ones(2) / 2)
    intake.draw(16, s, 1)  # reads the pools' keys once
    t0 = time.perf_counter()
    for step in range(2, 7):
        s.decide(
            _groups([(k, _rate(1, 3)) for k in pools[0][5000 + 16 * step : 5016 + 16 * step]], step)
        )
        items, _, _ = intake.draw(16, s, step)
        assert len(items) == 16
    assert (time.perf_counter() - t0) / 5 < 1.0  # a few ms each on a quiet machine


# ------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    "section, match",
    [
        ({"actuator": {"name": "target_difficulty", "width": 0}}, r"curriculum\.actuator\.width"),
        (
            {"actuator": {"name": "target_difficulty", "target": 1.5}},
            r"curriculum\.actuator\.target",
        ),
        (
            {"actuator": {"name": "target_difficulty", "schedule": "cosine"}},
            r"curriculum\.actuator\.schedule",
        ),
        ({"actuator": {"name": "target_dificulty"}}, r"target_difficulty"),
        ({"actuator": {"name": "target_difficulty", "stepz": 3}}, r"curriculum\.actuator\.stepz"),
        ({"actuator": "target_difficulty", "scorer": "reward"}, r"curriculum\.scorer: .*no scorer"),
        ({"actuator": "target_difficulty", "history_size": 0}, r"curriculum\.history_size"),
        ({"preset": "dump_ucb"}, r"curriculum presets: nemotron_curriculum"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(section, match):
    with pytest.raises(ConfigError, match=match):
        Strategy({"name": "c", "curriculum": section})


def test_one_prompt_history_for_prerollout_and_curriculum():
    s = Strategy({**_curriculum(), "prerollout": {"actuator": "greso", "history_size": 6}})
    assert s.history.size == 6
    s = Strategy({"name": "c", "curriculum": {"actuator": "target_difficulty", "history_size": 3}})
    assert s.history.size == 3
    assert Strategy(_curriculum()).history.size == 4
    with pytest.raises(ConfigError, match=r"curriculum\.history_size: 3, but prerollout"):
        Strategy(
            {
                "name": "c",
                "curriculum": {"actuator": "target_difficulty", "history_size": 3},
                "prerollout": {"actuator": "greso"},
            },
        )


def test_the_strategy_records_outcomes_and_saves_them():
    s = Strategy("nemotron_curriculum")
    s.decide(_groups([("a", [1.0, 0])]))
    assert s.history.get("a") == [(0, 0.5, False, 2)]
    t = Strategy("nemotron_curriculum")
    t.load_state_dict(s.state_dict())
    assert t.history.get("a") == [(0, 0.5, False, 2)]
    d = s.decide(_groups([("a", [1.0, 0])], step=1))  # the decision itself: keep all, weight 1
    assert d.keep_mask.all() and (d.weights_per_response == 1).all()


def test_a_host_builds_its_intake_for_a_curriculum_and_takes_its_proportions():
    from dataflex_rl.core.spec import parse_strategy
    from dataflex_rl.hosts.common.config import HostConfig, check_proportions, uses_intake

    spec = parse_strategy("nemotron_curriculum")
    assert uses_intake(spec)
    check_proportions(HostConfig(proportions=[0.5, 0.5]), spec)  # no mix: the intake's own
    mixing = parse_strategy({"name": "m", "mix": "static", "curriculum": "nemotron_curriculum"})
    with pytest.raises(ConfigError, match=r"dataflex\.proportions: only used by"):
        check_proportions(HostConfig(proportions=[0.5, 0.5]), mixing)
