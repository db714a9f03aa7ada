"""reasoning-gym-backed domains: short rebuilt prompts and 0/1 scores."""

from __future__ import annotations

import sys

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks import build_taskset, make_domain
from dataflex_rl.tasks.rgym import binary_score


@pytest.mark.parametrize(
    "score,expected", [(1.0, 1.0), (0.5, 0.0), (0.999, 0.0), (0.0, 0.0), (None, 0.0), (1, 1.0)]
)
def test_binary_score(score, expected):
    assert binary_score(score) == expected


def test_missing_reasoning_gym_is_a_clear_error(monkeypatch):
    make_domain("rg_arithmetic")  # the adapter module itself needs nothing
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes the import fail
    with pytest.raises(ConfigError, match="reasoning-gym"):
        make_domain("rg_arithmetic").generate(3, 0)


@pytest.fixture(scope="module")
def rg_tasks():
    pytest.importorskip("reasoning_gym")
    return build_taskset(("rg_arithmetic",), train_size=60, eval_size=20, seed=0)


def test_short_prompts_correct_answers_and_disjoint(rg_tasks):
    d = rg_tasks.handler("rg_arithmetic")
    cs = set(d.charset())
    train, evals = rg_tasks.train["rg_arithmetic"], rg_tasks.eval["rg_arithmetic"]
    assert len(train) == 60 and len(evals) == 20
    assert not {p.prompt for p in train} & {p.prompt for p in evals}
    for p in train + evals:
        assert len(p.prompt) <= 24 and p.prompt.endswith("=") and " " not in p.prompt
        assert set(p.prompt + p.answer) <= cs
        assert int(p.answer) == eval(p.prompt[:-1])  # the rebuilt prompt is the expression
        assert p.extra["rg_entry"]["answer"] == p.answer


def test_partial_credit_is_forced_to_zero(rg_tasks):
    d = rg_tasks.handler("rg_arithmetic")
    p = rg_tasks.train["rg_arithmetic"][0]
    raw = d._dataset(0, 1).score_answer(p.answer + "x", p.extra["rg_entry"])
    assert 0.0 < raw < 1.0  # reasoning-gym itself gives partial credit here
    assert rg_tasks.verify(p, p.answer + "x") == 0.0
    assert rg_tasks.verify(p, f" {p.answer}\n") == 1.0
    assert rg_tasks.verify(p, "") == 0.0


def test_deterministic_given_seed(rg_tasks):
    again = build_taskset(("rg_arithmetic",), train_size=60, eval_size=20, seed=0)
    assert again.train == rg_tasks.train and again.eval == rg_tasks.eval


def test_without_entry_falls_back_to_exact(rg_tasks):
    d = rg_tasks.handler("rg_arithmetic")
    p = rg_tasks.train["rg_arithmetic"][0]
    bare = d.make(p.prompt, p.answer)
    assert d.verify(bare, p.answer) == 1.0 and d.verify(bare, p.answer + "1") == 0.0


def test_levels_change_operators():
    pytest.importorskip("reasoning_gym")
    easy = make_domain("rg_arithmetic", 1).generate(50, 0)
    hard = make_domain("rg_arithmetic", 3).generate(200, 0)
    assert all("(" not in p.prompt and "*" not in p.prompt for p in easy)
    assert any("*" in p.prompt for p in hard)
    with pytest.raises(ConfigError, match="operators"):
        make_domain("rg_arithmetic", {"operators": "+/"})


def test_task_type_counts_the_operands(rg_tasks):
    d = rg_tasks.handler("rg_arithmetic")
    assert d.task_type("-7-(35+2)=") == "3-term"
    types = {d.task_type(p.prompt) for p in rg_tasks.train["rg_arithmetic"]}
    assert types == {"2-term", "3-term"}  # level 2: 2-3 operands
    assert rg_tasks.warm == {"rg_arithmetic": []}
