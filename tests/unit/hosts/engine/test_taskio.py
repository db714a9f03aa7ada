"""The engine's view of the task package: warm-start pairs come from the warm split."""

from __future__ import annotations

from dataflex_rl.hosts.engine.taskio import build_tasks, warm_pairs
from dataflex_rl.tasks import Problem, TaskSet

DIFFICULTY = {"math": {"level": 4, "ops": "+-"}, "logic": 3}


def train_pairs(taskset) -> tuple[list[str], list[str], list[int]]:
    """All training-pool (prompt, answer) pairs with their domain index, domain by domain."""
    prompts, answers, groups = [], [], []
    for i, d in enumerate(taskset.domains):
        prompts.extend(p.prompt for p in taskset.train[d])
        answers.extend(p.answer for p in taskset.train[d])
        groups.extend([i] * len(taskset.train[d]))
    return prompts, answers, groups


def test_warm_pairs_are_the_warm_split():
    ts = build_tasks(
        ["math", "logic"], 0, train_size=20, eval_size=5, warm_size=15, difficulty=DIFFICULTY
    )
    prompts, answers, groups = warm_pairs(ts)
    expected = ts.warm["math"] + ts.warm["logic"]
    assert prompts == [p.prompt for p in expected]
    assert answers == [p.answer for p in expected]
    assert groups == [0] * 15 + [1] * 15
    held = {p.prompt for d in ts.domains for p in ts.eval[d] + ts.train[d]}
    assert not held & set(prompts)


def test_without_a_warm_split_warm_pairs_are_the_training_pools():
    ts = build_tasks(["math", "logic"], 0, train_size=20, eval_size=5, difficulty=DIFFICULTY)
    assert warm_pairs(ts) == train_pairs(ts)
    # per domain: a domain without warm problems trains on its pool
    p, q = Problem("math:1+1=", "math", "1+1=", "2"), Problem("math:2+2=", "math", "2+2=", "4")
    mixed = TaskSet(
        ("math", "logic"),
        {"math": [p], "logic": ts.train["logic"]},
        {"math": [], "logic": []},
        warm={"math": [q]},
    )
    prompts, _, groups = warm_pairs(mixed)
    assert prompts == ["2+2="] + [x.prompt for x in ts.train["logic"]]
    assert groups == [0] + [1] * 20
