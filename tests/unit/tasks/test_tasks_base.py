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
from dataflex_rl.tasks.base import Draw

#: explicit settings with room for thousands of distinct prompts of every task type
ROOMY = {
    "math": {"level": 4, "ops": "+-"},
    "logic": {"level": 3, "form": "order+horn"},
    "science": {"kinds": ("law",), "max_value": 40},
}
#: math with operands 0-3: only 32 distinct 2-term prompts beside 256 3-term ones
FEW_TWO_TERM = {
    "math": {
        "form": "expr",
        "max_operand": 3,
        "min_terms": 2,
        "max_terms": 3,
        "ops": "+-",
        "allow_negative": True,
    }
}


def _prompts(problems):
    return {p.prompt for p in problems}


@pytest.mark.parametrize(
    "text,expected",
    [
        (" 85 ", "85"),
        ("085", "85"),
        ("+7", "7"),
        ("-0", "0"),
        ("-12", "-12"),
        ("\t12\n", "12"),
        ("cbad", "cbad"),
        (" T ", "T"),
        ("8 5", "8 5"),
        ("85.0", "85.0"),
        (None, ""),
        ("", ""),
    ],
)
def test_canonical(text, expected):
    assert canonical(text) == expected


@pytest.mark.parametrize(
    "answer,response,score",
    [
        ("85", "85", 1.0),
        ("85", " 85\n", 1.0),
        ("85", "085", 1.0),
        ("-21", "-21", 1.0),
        ("85", "86", 0.0),
        ("85", "8", 0.0),
        ("85", "850", 0.0),
        ("85", "85 85", 0.0),
        ("85", "85x", 0.0),
        ("85", "x85", 0.0),
        ("85", "", 0.0),
        ("85", None, 0.0),
        ("85", "   ", 0.0),
        ("-21", "21", 0.0),
        ("cbad", "cbad", 1.0),
        ("cbad", "cba", 0.0),
        ("cbad", "CBAD", 0.0),
        ("", "", 0.0),
    ],
)
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
    assert make_domain("math").settings["level"] == 5  # the engine's default
    assert make_domain("math").settings["form"] == "sort"
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


def test_splits_are_disjoint_and_of_the_requested_sizes():
    ts = build_taskset(
        train_size=300,
        eval_size=50,
        seed=3,
        difficulty=ROOMY,
        warm_size={"math": 200, "logic": 100, "science": 0},
    )
    assert ts.domains == ("math", "logic", "science")
    for d in ts.domains:
        warm_n = {"math": 200, "logic": 100, "science": 0}[d]
        train, evals, warm = (_prompts(ts.train[d]), _prompts(ts.eval[d]), _prompts(ts.warm[d]))
        assert (len(ts.train[d]), len(ts.eval[d]), len(ts.warm[d])) == (300, 50, warm_n)
        assert (len(train), len(evals), len(warm)) == (300, 50, warm_n)
        assert not train & evals and not train & warm and not evals & warm
        assert all(
            p.domain == d and p.key == f"{d}:{p.prompt}"
            for p in ts.train[d] + ts.eval[d] + ts.warm[d]
        )
    assert ts.summary()["math"] == {
        "train": 300,
        "eval": 50,
        "warm": 200,
        "settings": ts.handler("math").settings,
    }


def test_build_taskset_is_deterministic_and_seeded():
    def build(**kw):
        return build_taskset(
            train_size=100, eval_size=20, warm_size=30, difficulty=ROOMY, **{"seed": 1, **kw}
        )

    a, b = build(), build()
    assert (a.train, a.eval, a.warm) == (b.train, b.eval, b.warm)
    c = build(seed=2)
    assert a.train["math"] != c.train["math"] and a.eval["math"] != c.eval["math"]


def _union(ts, d):
    return _prompts(ts.eval[d]) | _prompts(ts.train[d]) | _prompts(ts.warm[d])


def test_seed_draws_the_prompts_and_eval_seed_splits_them():
    # seed picks which prompts are drawn; eval_seed only reassigns them to the splits
    a = build_taskset(
        train_size=100, eval_size=20, warm_size=30, seed=1, eval_seed=7, difficulty=ROOMY
    )
    b = build_taskset(
        train_size=100, eval_size=20, warm_size=30, seed=1, eval_seed=8, difficulty=ROOMY
    )
    c = build_taskset(
        train_size=100, eval_size=20, warm_size=30, seed=1, difficulty=ROOMY, eval_seed=None
    )
    for d in a.domains:
        assert _union(a, d) == _union(b, d) == _union(c, d)
        assert _union(a, d) == _prompts(a.handler(d).generate(150, 1))
        assert a.eval[d] != b.eval[d] and a.eval[d] != c.eval[d]
    same = build_taskset(
        train_size=100, eval_size=20, warm_size=30, seed=1, eval_seed=1, difficulty=ROOMY
    )
    assert same.eval == c.eval  # eval_seed None means seed


def test_union_has_the_prefix_property_but_sizes_reshuffle_the_splits():
    small = build_taskset(train_size=100, eval_size=20, warm_size=0, difficulty=ROOMY)
    large = build_taskset(train_size=100, eval_size=20, warm_size=80, difficulty=ROOMY)
    for d in small.domains:
        assert _union(small, d) < _union(large, d)
        # the held-out set is a random part of the whole draw, so it depends on every size:
        # a policy warm-started beside one split has seen held-out prompts of another
        assert small.eval[d] != large.eval[d]


def test_every_task_type_has_the_same_share_in_every_split():
    ts = build_taskset(
        ("logic",),
        train_size=1000,
        eval_size=1000,
        warm_size=1000,
        difficulty={"logic": ROOMY["logic"]},
    )
    h = ts.handler("logic")

    def share(problems):
        return sum(h.task_type(p.prompt) == "order" for p in problems) / len(problems)

    overall = share(ts.eval["logic"] + ts.train["logic"] + ts.warm["logic"])
    assert 0.45 < overall < 0.55
    # a random split of 3,000 prompts: a third's share has sd sqrt(.25/1000 * 2/3) = 0.013
    for split in (ts.eval, ts.train, ts.warm):
        assert abs(share(split["logic"]) - overall) < 0.05


def test_a_saturating_task_type_is_an_error_naming_it():
    with pytest.raises(ConfigError) as err:
        build_taskset(
            ("math",), train_size=100, eval_size=20, warm_size=30, difficulty=FEW_TWO_TERM
        )
    msg = str(err.value)
    assert "task type '2-term'" in msg and "'max_operand': 3" in msg
    assert "too few distinct prompts of type '2-term' for eval+train+warm = 150" in msg
    assert "keeps only" in msg and "Lower the sizes or raise the difficulty" in msg
    # a few prompts are fine: 2-term prompts are not yet repeated much
    ts = build_taskset(("math",), train_size=8, eval_size=4, difficulty=FEW_TWO_TERM)
    assert len(ts.train["math"]) == 8


def test_roomy_settings_raise_no_error_at_large_sizes():
    ts = build_taskset(train_size=2000, eval_size=200, warm_size=800, difficulty=ROOMY)
    assert all(len(ts.warm[d]) == 800 for d in ts.domains)


def test_draw_saturated_types_hand_worked():
    # overall keep rate 106/110 = 0.964, threshold 0.9 * 0.964 = 0.867
    few = Draw([], draws={"a": 100, "b": 10}, kept={"a": 100, "b": 6})
    assert few.keep_rate("b") == pytest.approx(0.6) and few.saturated_types() == []  # 4 repeats
    # 5 repeats: b keeps 6/11 = 0.545 < 0.9 * 106/111
    many = Draw([], draws={"a": 100, "b": 11}, kept={"a": 100, "b": 6})
    assert many.saturated_types() == [("b", pytest.approx(6 / 11))]
    # a type kept at nearly the overall rate is fine however many repeats it has
    even = Draw([], draws={"a": 1000, "b": 1000}, kept={"a": 800, "b": 760})
    assert even.saturated_types() == []
    assert Draw([], {}, {}).keep_rate() == 1.0


def test_build_taskset_per_domain_sizes_and_difficulty():
    ts = build_taskset(
        ("logic", "math"),
        train_size={"logic": 10, "math": 20},
        eval_size=5,
        difficulty={"math": 3, "logic": {"form": "bool"}},
    )
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


def test_a_stream_out_of_prompts_is_an_error():
    d = {"math": {"level": 1, "max_terms": 2, "ops": "+"}}  # 100 distinct prompts, one type
    ts = build_taskset(("math",), train_size=70, eval_size=20, warm_size=10, difficulty=d)
    assert _union(ts, "math") == _prompts(
        MathDomain(level=1, max_terms=2, ops="+").generate(100, 0)
    )
    with pytest.raises(
        ConfigError, match="found only 100 distinct prompts for eval.train.warm = 520"
    ):
        build_taskset(("math",), train_size=500, eval_size=20, difficulty=d)


@settings(max_examples=25, deadline=None)
@given(
    e=st.integers(0, 30),
    t=st.integers(0, 30),
    w=st.integers(0, 30),
    seed=st.integers(0, 10**6),
    eval_seed=st.integers(0, 10**6),
)
def test_property_splits_partition_the_first_distinct_prompts(e, t, w, seed, eval_seed):
    ts = build_taskset(
        ("logic",),
        train_size=t,
        eval_size=e,
        warm_size=w,
        seed=seed,
        eval_seed=eval_seed,
        difficulty={"logic": ROOMY["logic"]},
    )
    splits = [ts.eval["logic"], ts.train["logic"], ts.warm["logic"]]
    assert [len(s) for s in splits] == [e, t, w]
    first = ts.handler("logic").generate(e + t + w, seed)
    assert sorted(p.prompt for s in splits for p in s) == sorted(p.prompt for p in first)


def test_taskset_rejects_shared_prompts():
    p = Problem("math:1+1=", "math", "1+1=", "2")
    with pytest.raises(ConfigError, match="eval prompts of domain 'math' are also training"):
        TaskSet(("math",), {"math": [p]}, {"math": [p]})
    with pytest.raises(ConfigError, match="eval prompts of domain 'math' are also warm-start"):
        TaskSet(("math",), {"math": []}, {"math": [p]}, warm={"math": [p]})
    with pytest.raises(ConfigError, match="training prompts of domain 'math' are also warm"):
        TaskSet(("math",), {"math": [p]}, {"math": []}, warm={"math": [p]})
    with pytest.raises(ConfigError, match="not in domains"):
        TaskSet(("math",), {"logic": []}, {})
    with pytest.raises(ConfigError, match="TaskSet.warm has domains"):
        TaskSet(("math",), {"math": []}, {}, warm={"logic": []})


def test_taskset_without_warm_split_has_empty_ones():
    ts = TaskSet(("math", "logic"), {"math": [], "logic": []}, {"math": [], "logic": []})
    assert ts.warm == {"math": [], "logic": []}
    assert build_taskset(("math",), train_size=5, eval_size=5).warm == {"math": []}


def test_taskset_verify_dispatch_and_unknown_domain():
    ts = TaskSet(("math",), {"math": []}, {"math": []})  # handler built on demand
    p = Problem("math:2+2=", "math", "2+2=", "4")
    assert ts.verify(p, "4") == 1.0 and ts.verify(p, "5") == 0.0
    assert ts.verify_many([p, p], [" 4", "44"]) == [1.0, 0.0]
    with pytest.raises(UnknownNameError, match="unknown domain 'maht'"):
        ts.verify(Problem("maht:1", "maht", "1", "1"), "1")
    with pytest.raises(ValueError):
        ts.verify_many([p], [])


def test_taskset_charset_covers_everything():
    ts = build_taskset(train_size=200, eval_size=50, warm_size=50, difficulty=ROOMY)
    cs = set(ts.charset())
    for pools in (ts.train, ts.eval, ts.warm):
        for problems in pools.values():
            for p in problems:
                assert set(p.prompt + p.answer) <= cs


def test_generate_zero_and_exclude_everything():
    d = MathDomain(level=1, max_terms=2, ops="+")
    assert d.generate(0, 0) == []
    everything = d.generate(100, 0)
    assert d.generate(5, 1, exclude=everything, allow_fewer=True) == []


@settings(max_examples=60, deadline=None)
@given(x=st.integers(-(10**9), 10**9), pad=st.sampled_from(["", " ", "\n", "\t "]))
def test_property_integer_answers(x, pad):
    assert exact_match(str(x), f"{pad}{x}{pad}") == 1.0
    assert exact_match(str(x), str(x + 1)) == 0.0
    assert exact_match(str(x), f"{x}.5") == 0.0


def test_core_tasks_need_no_optional_packages():
    import os
    import subprocess
    import sys

    code = (
        "import sys; from dataflex_rl.tasks import build_taskset, load_dataset; "
        "build_taskset(train_size=5, eval_size=5); "
        "print(sorted(m for m in ('reasoning_gym', 'math_verify', 'pyarrow', 'pandas') "
        "if m in sys.modules))"
    )
    src = os.path.dirname(os.path.abspath(list(sys.modules["dataflex_rl"].__path__)[0]))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.strip() == "[]"


def test_difficulty_knobs_are_type_checked_by_the_config_validator():
    # bool("false") is True: a knob given as a string is refused, not silently coerced
    with pytest.raises(
        ConfigError,
        match=r"^difficulty\.math\.allow_negative: expected "
        r"bool \| null, got str \('false'\)$",
    ):
        make_domain("math", {"allow_negative": "false"})
    with pytest.raises(ConfigError, match=r"^difficulty\.logic\.min_vars: expected int"):
        make_domain("logic", {"min_vars": 3.0})
