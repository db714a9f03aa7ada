"""Problems, canonical answers, task sets and `build_taskset`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.registry import ConfigError, UnknownNameError
from dataflex_rl.tasks import (
    DOMAINS,
    Problem,
    TaskSet,
    build_taskset,
    canonical,
    exact_match,
    make_domain,
)
from dataflex_rl.tasks.arithmetic import MathDomain


@pytest.mark.parametrize("text,expected", [
    (" 85 ", "85"), ("085", "85"), ("+7", "7"), ("-0", "0"), ("-12", "-12"), ("\t12\n", "12"),
    ("cbad", "cbad"), (" T ", "T"), ("8 5", "8 5"), ("85.0", "85.0"), (None, ""), ("", ""),
])
def test_canonical(text, expected):
    assert canonical(text) == expected


@pytest.mark.parametrize("answer,response,score", [
    ("85", "85", 1.0), ("85", " 85\n", 1.0), ("85", "085", 1.0), ("-21", "-21", 1.0),
    ("85", "86", 0.0), ("85", "8", 0.0), ("85", "850", 0.0), ("85", "85 85", 0.0),
    ("85", "85x", 0.0), ("85", "x85", 0.0), ("85", "", 0.0), ("85", None, 0.0),
    ("85", "   ", 0.0), ("-21", "21", 0.0), ("cbad", "cbad", 1.0), ("cbad", "cba", 0.0),
    ("cbad", "CBAD", 0.0), ("", "", 0.0),
])
def test_exact_match_is_zero_or_one(answer, response, score):
    got = exact_match(answer, response)
    assert got == score and type(got) is float


def test_problem_equality_ignores_extra():
    a = Problem("math:1+1=", "math", "1+1=", "2", {"x": [1]})
    b = Problem("math:1+1=", "math", "1+1=", "2")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.answer = "3"  # type: ignore[misc]


def test_registry_has_default_domains():
    for name in ("math", "logic", "science", "rg_arithmetic"):
        assert name in DOMAINS
    assert DOMAINS.get("math") is MathDomain


def test_make_domain_forms():
    assert make_domain("math").settings["level"] == 2
    assert make_domain("math", 3).settings["ops"] == "+-*"
    d = make_domain("math", {"level": 1, "max_operand": 50})
    assert d.settings["level"] == 1 and d.max_operand == 50 and d.ops == "+-"


def test_make_domain_errors_name_the_key():
    with pytest.raises(ConfigError, match="max_operands.*Did you mean 'max_operand'"):
        make_domain("math", {"max_operands": 3})
    with pytest.raises(ConfigError, match="level 9"):
        make_domain("math", 9)
    with pytest.raises(ConfigError, match="max_terms"):
        make_domain("math", {"min_terms": 3, "max_terms": 2})
    with pytest.raises(UnknownNameError, match="Did you mean 'math'"):
        make_domain("maths")
    with pytest.raises(ConfigError, match="level number or a mapping"):
        make_domain("math", "hard")  # type: ignore[arg-type]


def test_build_taskset_shapes_and_disjointness():
    ts = build_taskset(train_size=300, eval_size=50, seed=3)
    assert ts.domains == ("math", "logic", "science")
    for d in ts.domains:
        assert len(ts.train[d]) == 300 and len(ts.eval[d]) == 50
        train_prompts = {p.prompt for p in ts.train[d]}
        eval_prompts = {p.prompt for p in ts.eval[d]}
        assert len(train_prompts) == 300 and len(eval_prompts) == 50
        assert not train_prompts & eval_prompts
        assert all(p.domain == d and p.key == f"{d}:{p.prompt}" for p in ts.train[d])


def test_build_taskset_is_deterministic_and_seeded():
    a = build_taskset(train_size=100, eval_size=20, seed=1)
    b = build_taskset(train_size=100, eval_size=20, seed=1)
    c = build_taskset(train_size=100, eval_size=20, seed=2)
    assert a.train == b.train and a.eval == b.eval
    assert a.train["math"] != c.train["math"] and a.eval["math"] != c.eval["math"]


def test_fixed_eval_seed_keeps_eval_set_across_training_seeds():
    a = build_taskset(train_size=100, eval_size=20, seed=1, eval_seed=7)
    b = build_taskset(train_size=100, eval_size=20, seed=2, eval_seed=7)
    assert a.eval == b.eval and a.train != b.train


def test_build_taskset_per_domain_sizes_and_difficulty():
    ts = build_taskset(("logic", "math"), train_size={"logic": 10, "math": 20}, eval_size=5,
                       difficulty={"math": 3, "logic": {"form": "bool"}})
    assert ts.domains == ("logic", "math")
    assert len(ts.train["logic"]) == 10 and len(ts.train["math"]) == 20
    assert all(p.answer in ("T", "F") for p in ts.train["logic"])
    assert ts.summary()["math"]["settings"]["ops"] == "+-*"


def test_build_taskset_errors():
    with pytest.raises(ConfigError, match="difficulty: unknown domain 'maths'"):
        build_taskset(train_size=5, eval_size=5, difficulty={"maths": 2})
    with pytest.raises(ConfigError, match="listed twice"):
        build_taskset(("math", "math"), train_size=5, eval_size=5)
    with pytest.raises(ConfigError, match="train_size.math"):
        build_taskset(("math",), train_size=-1, eval_size=5)
    with pytest.raises(ConfigError, match="no size for domains"):
        build_taskset(("math", "logic"), train_size={"math": 5}, eval_size=5)
    with pytest.raises(UnknownNameError):
        build_taskset(("chemistry",), train_size=5, eval_size=5)


def test_build_taskset_accepts_domain_objects():
    ts = build_taskset((MathDomain(level=1),), train_size=10, eval_size=5)
    assert ts.handler("math").settings["level"] == 1
    with pytest.raises(ConfigError, match="given as an object"):
        build_taskset((MathDomain(),), train_size=10, eval_size=5, difficulty={"math": 2})


def test_small_space_shrinks_the_pool_but_eval_must_be_full(caplog):
    d = {"math": {"level": 1, "max_terms": 2, "ops": "+"}}  # 100 distinct prompts
    ts = build_taskset(("math",), train_size=500, eval_size=20, difficulty=d)
    assert len(ts.eval["math"]) == 20 and len(ts.train["math"]) == 80
    assert "only 80 distinct training prompts" in caplog.text
    with pytest.raises(ConfigError, match="found only 100 distinct prompts for n=200"):
        build_taskset(("math",), train_size=5, eval_size=200, difficulty=d)


def test_taskset_rejects_shared_prompts():
    p = Problem("math:1+1=", "math", "1+1=", "2")
    with pytest.raises(ConfigError, match="also training prompts"):
        TaskSet(("math",), {"math": [p]}, {"math": [p]})
    with pytest.raises(ConfigError, match="not in domains"):
        TaskSet(("math",), {"logic": []}, {})


def test_taskset_verify_dispatch_and_unknown_domain():
    ts = TaskSet(("math",), {"math": []}, {"math": []})  # handler built on demand
    p = Problem("math:2+2=", "math", "2+2=", "4")
    assert ts.verify(p, "4") == 1.0 and ts.verify(p, "5") == 0.0
    assert ts.verify_many([p, p], [" 4", "44"]) == [1.0, 0.0]
    with pytest.raises(UnknownNameError, match="unknown domain 'maht'"):
        ts.verify(Problem("maht:1", "maht", "1", "1"), "1")
    with pytest.raises(ValueError):
        ts.verify_many([p], [])


def test_sample_train_never_returns_eval_prompts():
    ts = build_taskset(("science",), train_size=50, eval_size=100, seed=0)
    fresh = ts.sample_train("science", 1000, seed=99)
    assert not {p.prompt for p in fresh} & {p.prompt for p in ts.eval["science"]}
    assert ts.sample_train("science", 50, seed=0) == ts.train["science"]
    warm = ts.sample_train("science", 500, seed=0, disjoint_from_pool=True)
    assert not {p.prompt for p in warm} & {p.prompt for p in ts.train["science"] + ts.eval[
        "science"]}
    with pytest.raises(ConfigError, match="found only"):
        ts.sample_train("science", 10**5, seed=1)
    assert 0 < len(ts.sample_train("science", 10**5, seed=1, allow_fewer=True)) < 10**5


def test_taskset_charset_covers_everything():
    ts = build_taskset(train_size=200, eval_size=50)
    cs = set(ts.charset())
    for pools in (ts.train, ts.eval):
        for problems in pools.values():
            for p in problems:
                assert set(p.prompt + p.answer) <= cs


def test_generate_zero_and_exclude_everything():
    d = MathDomain(level=1, max_terms=2, ops="+")
    assert d.generate(0, 0) == []
    everything = d.generate(100, 0)
    assert d.generate(5, 1, exclude=everything, allow_fewer=True) == []


@settings(max_examples=60, deadline=None)
@given(x=st.integers(-10**9, 10**9), pad=st.sampled_from(["", " ", "\n", "\t "]))
def test_property_integer_answers(x, pad):
    assert exact_match(str(x), f"{pad}{x}{pad}") == 1.0
    assert exact_match(str(x), str(x + 1)) == 0.0
    assert exact_match(str(x), f"{x}.5") == 0.0


def test_core_tasks_need_no_optional_packages():
    import os
    import subprocess
    import sys

    code = ("import sys; from dataflex_rl.tasks import build_taskset, load_dataset; "
            "build_taskset(train_size=5, eval_size=5); "
            "print(sorted(m for m in ('reasoning_gym', 'math_verify', 'pyarrow', 'pandas') "
            "if m in sys.modules))")
    src = os.path.dirname(os.path.abspath(list(sys.modules["dataflex_rl"].__path__)[0]))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert out.strip() == "[]"
