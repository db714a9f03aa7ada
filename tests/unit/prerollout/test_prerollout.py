"""Pre-rollout: prompt history and GRESO-style skipping."""

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.prerollout.greso import Greso
from tests.unit.prerollout.groups import group_batch as _batch

NAN = float("nan")


def test_history_records_one_outcome_per_group_under_its_own_key():
    h = PromptHistory(size=2)
    # "x": 1 of 2 correct, 8 tokens; "y": all correct (zero variance); "z": all wrong
    h.update(_batch({"x": [1.0, 0.0], "y": [1.0, 1.0], "z": [0.0, 0.0, 0.0]}, step=3))
    assert h.get("x") == [(3, 0.5, False, 8)]
    assert h.get("y") == [(3, 1.0, True, 8)]
    assert h.get("z") == [(3, 0.0, True, 12)]
    assert h.get("never") == [] and len(h) == 3


def test_history_interleaved_rows_and_inactive_rows():
    # rows of two prompts interleaved; "b"'s NaN row is not counted; "c" is only padding
    b = from_lists(
        [1.0, 0.0, NAN, 1.0, 1.0, 0.5],
        [0, 1, 1, 0, 1, 2],
        [2, 3, 4, 5, 6, 7],
        prompt_keys=("a", "b", "b", "a", "b", "c"),
        step=1,
        is_padding=torch.tensor([False] * 5 + [True]),
    )
    h = PromptHistory()
    h.update(b)
    assert h.get("a") == [(1, 1.0, True, 7)]
    assert h.get("b") == [(1, 0.5, False, 9)]
    assert h.get("c") == []


def test_history_is_bounded_and_round_trips():
    h = PromptHistory(size=2)
    for step in range(4):
        h.update(_batch({"x": [float(step % 2), 0.0]}, step=step))
    assert [o[0] for o in h.get("x")] == [2, 3]
    h2 = PromptHistory(size=2)
    h2.load_state_dict(h.state_dict())
    assert h2.get("x") == h.get("x")
    h2.update(_batch({"x": [1.0, 1.0]}, step=4))
    assert [o[0] for o in h2.get("x")] == [3, 4] and [o[0] for o in h.get("x")] == [2, 3]


def test_history_without_prompt_keys_records_nothing():
    h = PromptHistory()
    h.update(from_lists([1.0, 0.0], [0, 0]))
    assert len(h) == 0


# ---------------------------------------------------------------- greso
def _history(**groups):
    h = PromptHistory()
    h.update(_batch(groups))
    return h


def test_greso_skips_only_zero_variance_prompts():
    h = _history(easy=[1.0, 1.0], hard=[0.0, 0.0], mixed=[1.0, 0.0])
    keys = ["easy", "hard", "mixed", "new"]
    # explore_prob 0: every skippable prompt is skipped; mixed and unseen prompts never are
    keep, m = Greso(explore_prob=0.0, min_explore=0.0).filter(h, keys, 0, torch.Generator())
    assert keep.tolist() == [False, False, True, True]
    assert m["dataflex/prerollout/skipped"] == 2.0
    assert m["dataflex/prerollout/skipped_easy"] == 1.0
    assert m["dataflex/prerollout/skipped_hard"] == 1.0
    assert m["dataflex/prerollout/tokens_saved_est"] == 16.0  # 2 groups x 2 x 4 tokens
    # explore_prob 1: nothing is skipped
    keep, _ = Greso(explore_prob=1.0).filter(h, keys, 0, torch.Generator())
    assert keep.tolist() == [True] * 4


def test_greso_explores_with_the_given_probability_deterministically():
    h = _history(**{f"p{i}": [1.0, 1.0] for i in range(2000)})
    keys = [f"p{i}" for i in range(2000)]
    g = Greso(explore_prob=0.3)
    keep1, _ = g.filter(h, keys, 0, torch.Generator().manual_seed(7))
    keep2, _ = g.filter(h, keys, 0, torch.Generator().manual_seed(7))
    assert torch.equal(keep1, keep2)
    assert abs(float(keep1.float().mean()) - 0.3) < 0.05  # ~N(0.3, 0.01)


def test_greso_streak_needs_that_many_zero_variance_outcomes():
    h = _history(x=[1.0, 1.0])
    g = Greso(streak=2, explore_prob=0.0, min_explore=0.0)
    assert g.filter(h, ["x"], 0, None)[0].tolist() == [True]  # one outcome only
    h.update(_batch({"x": [1.0, 1.0]}, step=1))
    assert g.filter(h, ["x"], 1, None)[0].tolist() == [False]
    h.update(_batch({"x": [0.0, 0.0]}, step=2))  # easy then hard: no streak
    assert g.filter(h, ["x"], 2, None)[0].tolist() == [True]


def test_greso_adapts_exploration_and_round_trips():
    g = Greso(explore_prob=0.5, adapt_step=0.1, target_zero_variance=0.5, min_explore=0.25)
    # 2 of 4 groups all-correct (share .5 > .25) -> p_easy falls; no all-wrong -> p_hard rises
    b = _batch({"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [1.0, 0.0], "d": [0.0, 1.0]})
    g.observe(b, PromptHistory())
    assert g.state_dict() == {"p": {"easy": pytest.approx(0.4), "hard": pytest.approx(0.6)}}
    for _ in range(5):
        g.observe(b, PromptHistory())
    assert g.state_dict()["p"]["easy"] == 0.25  # never below min_explore
    assert g.state_dict()["p"]["hard"] == 1.0  # never above 1
    g2 = Greso(explore_prob=0.5, adapt_step=0.1, target_zero_variance=0.5, min_explore=0.25)
    g2.load_state_dict(g.state_dict())
    assert g2.state_dict() == g.state_dict()


def test_strategy_filter_prompts_schedule_and_history():
    s = Strategy(
        {
            "prerollout": {
                "actuator": {
                    "name": "greso",
                    "explore_prob": 0.0,
                    "min_explore": 0.0,
                    "adapt_step": 0.0,
                },
                "warmup_steps": 1,
            }
        }
    )
    s.decide(_batch({"easy": [1.0, 1.0], "mixed": [1.0, 0.0]}, step=0))
    keys = ["easy", "mixed"]
    keep, m = s.filter_prompts(keys, step=0)  # still warming up
    assert keep.tolist() == [True, True] and m["dataflex/prerollout/active"] == 0.0
    keep, m = s.filter_prompts(keys, step=1, generator=torch.Generator().manual_seed(0))
    assert keep.tolist() == [False, True] and m["dataflex/prerollout/active"] == 1.0
    assert Strategy("baseline").filter_prompts(keys, 5)[0].tolist() == [True, True]


def test_history_mean_tokens_is_over_every_remembered_group():
    h = PromptHistory(size=2)
    h.update(_batch({"x": [1.0, 1.0]}, lengths=[1, 2]))  # 3 tokens (dropped later)
    h.update(_batch({"x": [1.0, 1.0]}, step=1, lengths=[4, 6]))  # 10 tokens
    h.update(_batch({"x": [1.0, 1.0]}, step=2, lengths=[10, 20]))  # 30 tokens
    assert h.mean_tokens("x") == 20.0  # (10 + 30) / 2
    assert h.mean_tokens("never") is None


def test_greso_tokens_saved_uses_the_mean_of_the_prompts_history():
    h = PromptHistory(size=4)
    h.update(_batch({"e": [1.0, 1.0], "m": [1.0, 0.0]}, lengths=[3, 3, 5, 5]))  # e: 6
    h.update(_batch({"e": [1.0, 1.0], "m": [1.0, 0.0]}, step=1, lengths=[5, 5, 5, 5]))  # e: 10
    h.update(_batch({"e": [1.0, 1.0]}, step=2, lengths=[1, 1]))  # e: 2
    keep, m = Greso(explore_prob=0.0, min_explore=0.0).filter(h, ["e", "m"], 3, None)
    assert keep.tolist() == [False, True]
    # mean of e's 3 groups (6 + 10 + 2) / 3 = 6, not the last group's 2
    assert m["dataflex/prerollout/tokens_saved_est"] == 6.0


def test_greso_compound_exploration_falls_with_the_run_length():
    # 3000 prompts with one all-correct outcome, 3000 with three in a row
    h = PromptHistory(size=4)
    one = {f"o{i}": [1.0, 1.0] for i in range(3000)}
    three = {f"t{i}": [1.0, 1.0] for i in range(3000)}
    h.update(_batch({**one, **three}, step=0))
    h.update(_batch(three, step=1))
    h.update(_batch(three, step=2))
    keep, _ = Greso(explore_prob=0.5).filter(
        h, list(one) + list(three), 3, torch.Generator().manual_seed(0)
    )
    # generated with probability 0.5 and 0.5 ** 3 = 0.125 (sd ~0.009 and ~0.006)
    assert abs(float(keep[:3000].float().mean()) - 0.5) < 0.04
    assert abs(float(keep[3000:].float().mean()) - 0.125) < 0.03
    flat, _ = Greso(explore_prob=0.5, compound=False).filter(
        h, list(three), 3, torch.Generator().manual_seed(0)
    )
    assert abs(float(flat.float().mean()) - 0.5) < 0.04


def test_greso_run_counts_only_the_latest_kind():
    h = PromptHistory(size=4)
    for step, rs in enumerate([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]):
        h.update(_batch({"x": rs, "y": rs if step < 2 else [1.0, 0.0]}, step=step))
    easy, hard, tokens = Greso().runs(h, ["x", "y", "new"])
    assert easy.tolist() == [0, 0, 0] and hard.tolist() == [2, 0, 0]  # y ends mixed
    assert tokens[:2].tolist() == [8.0, 8.0] and torch.isnan(tokens[2])


def test_history_keeps_every_group_of_a_prompt_seen_twice_in_one_batch():
    b = from_lists(
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        [0, 0, 1, 1, 2, 2],
        prompt_keys=("x", "x", "y", "y", "x", "x"),
        step=7,
    )
    h = PromptHistory(size=4)
    h.update(b)
    assert h.get("x") == [(7, 1.0, True, 8), (7, 0.0, True, 8)]  # group order
    assert h.get("y") == [(7, 0.5, False, 8)]


def test_history_grows_past_its_first_capacity_and_loads_the_old_format():
    h = PromptHistory(size=2)
    h.update(_batch({i: [1.0, 0.0] for i in range(200)}, step=1))  # int keys, as in verl
    assert len(h) == 200 and h.get(199) == [(1, 0.5, False, 8)]
    old = {"size": 2, "data": {"x": [(1, 1.0, True, 6), (2, 0.0, True, 4)]}}  # format 1
    h2 = PromptHistory()
    h2.load_state_dict(old)
    assert h2.get("x") == [(1, 1.0, True, 6), (2, 0.0, True, 4)] and h2.size == 2
    with pytest.raises(ValueError, match="history_size must be >= 1"):
        PromptHistory(0)


# ---------------------------------------------------------------- thompson
def _groups_of_8(h, key, successes, step=0):
    h.update(_batch({key: [1.0] * successes + [0.0] * (8 - successes)}, step=step))


def test_thompson_posterior_counts_responses_with_discount():
    from dataflex_rl.prerollout.thompson import ThompsonBand

    h = PromptHistory(size=4)
    _groups_of_8(h, "x", 6)
    _groups_of_8(h, "x", 8, step=1)
    a, b, n = ThompsonBand(discount=0.5).posterior(h, ["x", "new"])
    # newest group weight 1, the one before 0.5: a = 1 + 0.5*6 + 8, b = 1 + 0.5*2 + 0
    assert a.tolist() == [12.0, 1.0] and b.tolist() == [2.0, 1.0] and n.tolist() == [2, 0]


def test_thompson_skips_by_the_drawn_solve_rate():
    from dataflex_rl.prerollout.thompson import ThompsonBand

    h = PromptHistory(size=4)
    for step in range(4):  # 1000 prompts always solved, 1000 solved half the time
        h.update(
            _batch(
                {
                    **{f"e{i}": [1.0] * 8 for i in range(1000)},
                    **{f"m{i}": [1.0, 0.0] * 4 for i in range(1000)},
                },
                step=step,
            )
        )
    keys = [f"e{i}" for i in range(1000)] + [f"m{i}" for i in range(1000)] + ["new"]
    policy = ThompsonBand(low=0.1, high=0.9)
    keep, m = policy.filter(h, keys, 4, torch.Generator().manual_seed(1))
    # Beta(33, 1): P(theta > 0.9) = 1 - 0.9**33 = 0.969; Beta(17, 17) stays inside the band
    assert abs(float((~keep[:1000]).float().mean()) - (1 - 0.9**33)) < 0.02
    assert bool(keep[1000:].all())  # the mixed ones and the unseen prompt
    assert m["dataflex/prerollout/skipped_easy"] == float((~keep).sum())
    assert m["dataflex/prerollout/skipped_hard"] == 0.0
    assert m["dataflex/prerollout/tokens_saved_est"] == 32.0 * float((~keep).sum())
    again, _ = policy.filter(h, keys, 4, torch.Generator().manual_seed(1))
    assert torch.equal(keep, again)


def test_thompson_band_must_be_ordered():
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.prerollout.thompson import ThompsonBand

    with pytest.raises(ConfigError, match="need low < high"):
        ThompsonBand(low=0.6, high=0.4)
