"""Refill (dynamic sampling): each round draws exactly the missing groups through the intake,
stops at the round limit or a full batch, and its figures are worked out by hand."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import parse_strategy
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.refill import REFILL, run_refill
from dataflex_rl.hosts.common.step import Generation

R = REFILL
ROWS = ["a"] * 8 + ["b"] * 4  # static proportions 2/3, 1/3 (the pools' sizes)


def dapo(rounds: int = 4, **more) -> dict:
    return {"name": "d", "select": {"preset": "dapo"}, "refill": {"max_rounds": rounds}, **more}


def groups(signal: list[bool], step: int = 0, keys=None):
    """Two responses per group: rewards 1, 0 (signal) or 1, 1 (zero variance)."""
    rewards = [r for s in signal for r in ((1.0, 0.0) if s else (1.0, 1.0))]
    G = len(signal)
    return from_lists(
        rewards,
        [g for g in range(G) for _ in range(2)],
        prompt_keys=None if keys is None else tuple(k for k in keys for _ in range(2)),
        step=step,
    )


def loop(strategy, n, first, outcomes, granule=1):
    """`run_refill` with a stand-in intake (prompt i is the integer i) whose round r comes
    back with ``outcomes[r - 1]`` for its first groups (the rest zero-variance)."""
    asked, counter = [], iter(range(1000))

    def draw(k):
        asked.append(k)
        return [next(counter) for _ in range(k)], [0] * k

    def generate(items, doms, rnd):
        signal = (outcomes[rnd - 1] + [False] * len(items))[: len(items)]
        return groups(signal)

    batches, taken, _, metrics = run_refill(strategy, draw, n, first, generate, granule)
    return asked, (batches, taken), metrics


def test_round_two_draws_exactly_the_dropped_groups_and_the_limit_stops_it():
    # 4 groups, 2 zero-variance: round 1 draws 2 and keeps 1; round 2 draws 1, keeps none;
    # round 3 draws 1, keeps none; the limit (3) stops the step 1 group short
    s = Strategy(dapo(3))
    asked, (batches, taken), m = loop(s, 4, groups([True, True, False, False]), [[True], [], []])
    assert asked == [2, 1, 1] and len(batches) == 3 and taken == [2, 1, 1]
    assert m == {
        R + "rounds": 3.0,
        R + "prompts_drawn": 4.0,
        R + "groups_kept": 3.0,
        R + "missing": 1.0,
        R + "full": 0.0,
        R + "groups_generated": 8.0,
        R + "overgeneration": 2.0,  # 8 groups generated for 4
        R + "zero_variance_before": 0.5,
        R + "zero_variance_after": 0.25,  # 1 slot of 4 holds no group with signal
    }


def test_a_full_batch_stops_refilling():
    s = Strategy(dapo(4))
    asked, _, m = loop(s, 4, groups([True, False, False, True]), [[True, True]])
    assert asked == [2] and m[R + "full"] == 1.0 and m[R + "rounds"] == 1.0
    assert m[R + "missing"] == 0.0 and m[R + "zero_variance_after"] == 0.0
    # nothing dropped: no round at all
    asked, _, m = loop(s, 2, groups([True, True]), [])
    assert asked == [] and m[R + "rounds"] == 0.0 and m[R + "overgeneration"] == 1.0


def test_a_granule_rounds_each_draw_up_and_the_step_ends_at_its_last_kept_group():
    # 3 missing, granule 2: 4 drawn, kept: yes, no, yes, yes -> the 3rd kept group is the
    # round's 4th: the step uses 4 groups; then kept yes, yes, yes, no -> uses 3, discards 1
    s = Strategy(dapo(2))
    first = groups([True, False, False, False])
    asked, (_, taken), m = loop(s, 4, first, [[True, False, True, True]], granule=2)
    assert asked == [4] and taken == [4]
    asked, (_, taken), m = loop(s, 4, first, [[True, True, True]], granule=2)
    assert asked == [4] and taken == [3]
    assert m[R + "groups_kept"] == 4.0 and m[R + "full"] == 1.0 and m[R + "groups_generated"] == 8


def test_overdraw_draws_the_count_expected_to_fill_the_step():
    # 8 groups, 2 kept: 6 missing x 8 generated / 2 kept = 24, at most 8 -> 8; then kept 2
    # of those: 4 of 16 generated kept, 4 missing x 16 / 4 = 16 -> 8
    s = Strategy({"select": "dapo", "refill": {"max_rounds": 2, "overdraw": True}})
    first = groups([True, True] + [False] * 6)
    asked, _, m = loop(s, 8, first, [[True, True], [True] * 8])
    assert asked == [8, 8] and m[R + "full"] == 1.0
    # nothing kept yet: a whole batch
    asked, _, _ = loop(s, 4, groups([False] * 4), [[True] * 4])
    assert asked == [4]
    # exact draws (the default) ask for the 6 missing
    asked, _, _ = loop(Strategy(dapo(1)), 8, first, [[]])
    assert asked == [6]


def test_difffilter_band_refills_what_it_drops():
    # solve rate in (.2, .8) over 5 responses keeps 2 or 3 correct; 1 of 5 is dropped
    s = Strategy({"select": "difffilter", "refill": {"max_rounds": 1}})
    b = from_lists([1, 1, 0, 0, 0] + [1, 0, 0, 0, 0], [0] * 5 + [1] * 5)
    assert s.groups_kept(b).tolist() == [True, False]
    assert s.refill_rounds == 1 and Strategy("difffilter").refill_rounds == 0


def test_a_selector_not_yet_due_keeps_every_group():
    s = Strategy({"select": {"preset": "dapo", "warmup_steps": 2}, "refill": {"max_rounds": 2}})
    assert s.groups_kept(groups([False, True], step=1)).tolist() == [True, True]
    assert s.groups_kept(groups([False, True], step=2)).tolist() == [False, True]


@pytest.mark.parametrize(
    "spec, key, words",
    [
        ({"select": "dapo", "refill": {"max_rounds": 0}}, "refill.max_rounds", ">= 1"),
        ({"select": "dapo", "refill": {"rounds": 2}}, "refill.rounds", "max_rounds"),
        ({"refill": {"max_rounds": 2}}, "refill", "no 'select' section"),
        ({"select": "maxvar", "refill": {}}, "refill", "'max_variance'"),
        ({"select": "topk", "refill": {}}, "refill", "'top_fraction'"),
        # band over a response-level score keeps parts of groups
        ({"select": {"scorer": "reward", "actuator": "band"}, "refill": {}}, "refill", "band"),
    ],
)
def test_bad_refill_settings_are_refused_naming_the_key(spec, key, words):
    with pytest.raises(ConfigError, match=key) as e:
        parse_strategy(spec)
    assert words in str(e.value)


def test_the_driver_refills_through_the_intake_with_the_mix_and_the_skip_policy():
    # greso without exploration skips a prompt whose remembered group was all-correct: rows
    # 0-2 (domain a) and 8 (domain b) are; refill draws pass the skip policy (none of them is
    # generated) and follow the static proportions 2/3, 1/3 (the engine's intake: audits=True)
    spec = dapo(
        2,
        prerollout={"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}},
    )
    strategy = Strategy(spec, domains=("a", "b"))
    pools = [list(range(8)), list(range(8, 12))]
    intake = Intake(pools, ("a", "b"), torch.tensor([2 / 3, 1 / 3]), seeds=(1, 1), audits=True)
    d = Driver(strategy, intake)
    solved = [0, 1, 2, 8]
    d.decide(
        from_lists(
            [1.0] * 8,
            [g for g in range(4) for _ in range(2)],
            domain_ids=torch.tensor([0, 0, 0, 0, 0, 0, 1, 1]),
            domains=("a", "b"),
            prompt_keys=tuple(k for k in solved for _ in range(2)),
            step=0,
        )
    )
    seen = []

    class Host:  # every group zero-variance: two refill rounds of 3, none kept
        def generate(self, items, doms, rnd):
            seen.append((list(items), list(doms)))
            return Generation(groups([False] * len(items), step=1, keys=items))

        def assemble(self, generations, rows, group_ids, items, doms):
            # nothing kept: the first generation's slots
            assert rows.tolist() == list(range(generations[0].batch.batch_size))
            return None, generations[0].batch

    out = d.step(Host(), 3, 1)
    m = out.metrics
    assert m[R + "rounds"] == 2.0 and [len(i) for i, _ in seen] == [3, 3, 3]
    drawn = [r for items, _ in seen for r in items]
    assert not set(drawn) & set(solved)
    assert all(sorted(doms) == [0, 0, 1] for _, doms in seen[1:])  # 2/3, 1/3 of 3
    # the refill draws' pre-rollout counts add up with the first draw's; the 6 refill groups
    # are generated and not trained on
    assert m[R + "discarded"] == 6.0
    assert m["dataflex/prerollout/candidates"] >= 9
