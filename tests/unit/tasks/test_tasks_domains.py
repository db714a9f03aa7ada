"""The built-in domains: hand-worked answers, determinism, difficulty, charsets, lengths."""

from __future__ import annotations

import random
import re
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks import make_domain
from dataflex_rl.tasks.arithmetic import MathDomain, evaluate
from dataflex_rl.tasks.logic import LogicDomain, bool_formula
from dataflex_rl.tasks.science import LAWS, UNITS, ScienceDomain

BUILTIN = ("math", "logic", "science")
LEVELS = [(name, lvl) for name in BUILTIN for lvl in make_domain(name).LEVELS]
LEVELS += [
    ("logic", {"level": lvl, "form": form})
    for lvl in (1, 2, 3)
    for form in ("horn", "bool", "order+horn+bool")
]


def test_evaluate_precedence():
    assert evaluate([37, 48], ["+"]) == 85
    assert evaluate([3, 4, 5], ["+", "*"]) == 23
    assert evaluate([3, 4, 5], ["*", "-"]) == 7
    assert evaluate([10, 2, 3, 4], ["-", "*", "+"]) == 8


def test_math_problems_are_right():
    d = MathDomain(level=3)
    for p in d.generate(300, 0):
        expr = p.prompt[:-1]
        assert p.prompt.endswith("=") and re.fullmatch(r"\d+([-+*]\d+)+", expr)
        assert int(p.answer) == eval(expr)  # the prompt is plain Python arithmetic
        right_of_star = re.findall(r"\*(\d+)", expr)
        assert all(len(x) == 1 for x in right_of_star)


def test_math_verify_hand_worked():
    p = MathDomain().make("37+48=", "85")
    assert p.key == "math:37+48="
    assert [MathDomain().verify(p, r) for r in ("85", " 85 ", "085", "86", "8", "85=", "")] == [
        1.0,
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


def test_math_no_negatives_when_disallowed():
    ps = MathDomain(level=1).generate(500, 0, allow_fewer=True)
    assert all(int(p.answer) >= 0 for p in ps)
    assert any(int(p.answer) < 0 for p in MathDomain(level=2).generate(500, 0))


def _order_holds(prompt: str, answer: str) -> bool:
    rank = {c: i for i, c in enumerate(answer)}
    for fact in prompt[:-1].split(","):
        a, op, b = fact
        if (rank[a] < rank[b]) != (op == "<"):
            return False
    return True


def test_logic_order_problems_are_right():
    d = LogicDomain(level=3, form="order")
    for p in d.generate(300, 0):
        assert p.prompt.endswith("?") and len(set(p.answer)) == len(p.answer)
        assert set(p.answer) == set(re.sub(r"[<>,?]", "", p.prompt))
        assert _order_holds(p.prompt, p.answer)
        # the facts form one chain, so the order is unique
        assert len(p.prompt[:-1].split(",")) == len(p.answer) - 1


def test_logic_order_hand_worked():
    d = LogicDomain(form="order")
    p = d.make("b<a,c<b,d>a?", "cbad")
    assert _order_holds(p.prompt, p.answer)
    assert [d.verify(p, r) for r in ("cbad", " cbad\n", "cabd", "cba", "CBAD", "c b a d")] == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


def _python_bool(prompt: str) -> str:
    expr = prompt[:-1].replace("T", " True ").replace("F", " False ")
    expr = expr.replace("&", " and ").replace("|", " or ").replace("!", " not ")
    return "T" if eval(expr) else "F"


def test_logic_bool_problems_are_right():
    d = LogicDomain(level=3, form="bool")
    ps = d.generate(300, 0)
    for p in ps:
        assert p.prompt.endswith("=") and len(p.prompt) <= 24
        assert p.answer == _python_bool(p.prompt)
    share_true = sum(p.answer == "T" for p in ps) / len(ps)
    assert 0.3 < share_true < 0.7
    assert d.verify(d.make("T&(F|T)=", "T"), "T") == 1.0
    assert d.verify(d.make("T&(F|T)=", "T"), "F") == 0.0


def test_bool_formula_depth():
    rng = random.Random(0)
    for depth in range(4):
        text, value, _ = bool_formula(rng, depth)
        assert text.count("&") + text.count("|") + text.count("!") >= depth
        assert ("T" if value else "F") == _python_bool(text + "=")


def _horn_answer(prompt: str) -> str:
    fact, *rules = prompt[:-1].split(",")
    edges = [r.split("-") for r in rules]
    true, frontier = {fact}, [fact]
    while frontier:
        x = frontier.pop()
        for a, b in edges:
            if a == x and b not in true:
                true.add(b)
                frontier.append(b)
    return "".join(sorted(true))


def test_logic_horn_problems_are_right():
    for level in (1, 2, 3):
        d = LogicDomain(level=level, form="horn")
        for p in d.generate(300, level):
            assert re.fullmatch(r"[a-h](,[a-h]-[a-h])+\?", p.prompt), p.prompt
            assert p.answer == _horn_answer(p.prompt)
            hops = len(p.answer) - 1
            assert d.min_hops <= hops <= d.max_hops
    d = LogicDomain(form="horn")
    p = d.make("c,c-a,a-f,b-e?", "acf")
    assert _horn_answer(p.prompt) == "acf"
    assert [d.verify(p, r) for r in ("acf", "acf\n", "caf", "acfb", "ac")] == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
    ]


def test_logic_horn_distractors_never_fire():
    d = LogicDomain(form="horn", distractors=0)
    for p in d.generate(100, 0):
        assert len(p.prompt[:-1].split(",")) == len(p.answer)  # fact + one rule per hop


def test_logic_combined_forms():
    d = LogicDomain(form="order+bool+horn")
    ps = d.generate(300, 0)
    kinds = {
        "order"
        if "<" in p.prompt or ">" in p.prompt
        else "bool"
        if p.prompt.endswith("=")
        else "horn"
        for p in ps
    }
    assert kinds == {"order", "bool", "horn"}
    assert set(d.charset()) == set(LogicDomain(form="order").charset()) | set(
        LogicDomain(form="bool").charset()
    ) | set(LogicDomain(form="horn").charset())


def test_science_problems_are_right():
    d = ScienceDomain(level=3)
    factors = {small: (big, f) for big, small, f in UNITS}
    bigs = {big: (small, f) for big, small, f in UNITS}
    for p in d.generate(400, 0):
        m = re.fullmatch(r"(\w)=(\w)(\w) (\w)=(\d+) (\w)=(\d+) (\w)=", p.prompt)
        if m:
            x, y, z, g1, v1, g2, v2, unknown = m.groups()
            assert (x, y, z) in LAWS and unknown not in (g1, g2)
            vals = {g1: int(v1), g2: int(v2), unknown: int(p.answer)}
            assert vals[x] == vals[y] * vals[z]
            continue
        m = re.fullmatch(r"(\d+)([a-zA-Z]+)=\?([a-zA-Z]+)", p.prompt)
        assert m, p.prompt
        value, src, dst = int(m.group(1)), m.group(2), m.group(3)
        if src in bigs and bigs[src][0] == dst:
            assert int(p.answer) == value * bigs[src][1]
        else:
            assert factors[src][0] == dst and int(p.answer) * factors[src][1] == value


def test_science_hand_worked():
    d = ScienceDomain()
    p = d.make("F=ma m=4 a=7 F=", "28")
    assert [d.verify(p, r) for r in ("28", "28 ", "27", "28N", "")] == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_science_forward_only_without_inverse():
    ps = ScienceDomain(level=1).generate(300, 0)
    for p in ps:
        if "=?" not in p.prompt:
            assert p.prompt.split()[0][0] == p.prompt.split()[-1][0]  # asks for the product
        else:
            head, dst = p.prompt.split("=?")
            assert any(
                dst == small and head.endswith(big) and head[: -len(big)].isdigit()
                for big, small, _ in UNITS
            ), p.prompt


@pytest.mark.parametrize("name,level", LEVELS)
def test_generate_is_deterministic_and_prefix_stable(name, level):
    d = make_domain(name, level)
    a = d.generate(150, 5)
    assert a == make_domain(name, level).generate(150, 5)
    assert a[:40] == d.generate(40, 5)
    assert a != d.generate(150, 6)
    assert len({p.prompt for p in a}) == 150


@pytest.mark.parametrize("name,level", LEVELS)
def test_charset_covers_and_lengths_fit_a_char_model(name, level):
    d = make_domain(name, level)
    cs = d.charset()
    assert cs == "".join(sorted(set(cs)))
    for p in d.generate(400, 1, allow_fewer=True):
        assert set(p.prompt) | set(p.answer) <= set(cs), p
        # answers fit the engine's default response budget (10 tokens, EOS included)
        assert len(p.prompt) <= 24 and 1 <= len(p.answer) <= 9, p


def test_exclude_is_respected():
    d = ScienceDomain()
    first = d.generate(100, 0)
    again = d.generate(100, 0, exclude=first)
    assert not {p.prompt for p in first} & {p.prompt for p in again}
    again2 = d.generate(100, 0, exclude=[p.prompt for p in first])
    assert again == again2


def test_difficulty_knob_changes_the_distribution():
    def mean_len(name, level, f):
        return statistics.mean(f(p) for p in make_domain(name, level).generate(300, 0))

    assert (
        mean_len("math", 1, lambda p: len(p.answer))
        < mean_len("math", 2, lambda p: len(p.answer))
        < mean_len("math", 4, lambda p: len(p.answer))
    )
    assert (
        mean_len("logic", 1, lambda p: len(p.answer))
        < mean_len("logic", 2, lambda p: len(p.answer))
        < mean_len("logic", 3, lambda p: len(p.answer))
    )
    assert mean_len("logic", 1, lambda p: len(p.prompt)) < mean_len(
        "logic", 3, lambda p: len(p.prompt)
    )
    order = [LogicDomain(level=lvl, form="order").generate(300, 0) for lvl in (1, 3)]
    assert statistics.mean(len(p.answer) for p in order[0]) < statistics.mean(
        len(p.answer) for p in order[1]
    )
    assert mean_len("science", 1, lambda p: int(p.answer)) < mean_len(
        "science", 3, lambda p: int(p.answer)
    )
    ops = {c for p in MathDomain(level=3).generate(300, 0) for c in p.prompt}
    assert "*" in ops and "*" not in {c for p in MathDomain(2).generate(300, 0) for c in p.prompt}
    terms = [
        len(re.split(r"[-+*]", p.prompt[:-1]))
        for p in MathDomain(2, min_terms=4, max_terms=4).generate(50, 0)
    ]
    assert set(terms) == {4}
    operands = [
        int(x)
        for p in MathDomain(2, max_operand=5, ops="+").generate(50, 0)
        for x in p.prompt[:-1].split("+")
    ]
    assert max(operands) == 5 and min(operands) == 0


@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("math", {"ops": "+/"}, "ops"),
        ("math", {"min_terms": 1}, "min_terms"),
        ("math", {"max_operand": 1000}, "max_operand"),
        ("math", {"max_operand": 0}, "max_operand"),
        ("logic", {"form": "xor"}, "form"),
        ("logic", {"letters": "aab"}, "letters"),
        ("logic", {"max_vars": 8}, "max_vars"),
        ("logic", {"max_depth": 5}, "max_depth"),
        ("logic", {"form": "order+order"}, "form"),
        ("logic", {"max_hops": 5}, "max_hops"),
        ("logic", {"distractors": 4}, "distractors"),
        ("logic", {"letters": "abc"}, "letters"),
        ("science", {"kinds": ("law", "chem")}, "kinds"),
        ("science", {"level": 2, "max_value": 100}, "max_value"),
        ("science", {"max_value": 1000}, "max_value"),
        ("science", {"units": "imperial"}, "units"),
        ("math", {"form": "roman"}, "form"),
        ("math", {"max_terms": 13}, "max_terms"),
    ],
)
def test_bad_knobs_raise(name, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_domain(name, kwargs)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(BUILTIN),
    level=st.integers(1, 3),
    seed=st.integers(0, 10**6),
    junk=st.sampled_from(["9", "x", " 1", "T", "a"]),
)
def test_property_answer_verifies_and_perturbation_fails(name, level, seed, junk):
    d = make_domain(name, level)
    for p in d.generate(5, seed):
        assert d.verify(p, p.answer) == 1.0
        assert d.verify(p, f"  {p.answer}\n") == 1.0
        assert d.verify(p, p.answer + junk) == 0.0
        assert d.verify(p, p.answer[:-1]) == 0.0


@pytest.mark.parametrize(
    "prompt,expected",
    [
        ("37+48=", "2-term"),
        ("3-4+5=", "3-term"),
        ("3*4=", "2-term-mul"),
        ("10-2*3+4=", "4-term-mul"),
    ],
)
def test_math_task_type_hand_worked(prompt, expected):
    assert MathDomain().task_type(prompt) == expected


def test_math_task_type_counts_the_operands():
    d = MathDomain(level=4)
    types = set()
    for p in d.generate(400, 0):
        operands = re.findall(r"\d+", p.prompt)  # operands are never negative
        expected = f"{len(operands)}-term" + ("-mul" if "*" in p.prompt else "")
        assert d.task_type(p.prompt) == expected
        types.add(expected)
    assert types == {f"{n}-term{m}" for n in (2, 3, 4) for m in ("", "-mul")}


@pytest.mark.parametrize("form", ["order", "horn", "bool"])
def test_logic_task_type_is_the_form_it_was_drawn_from(form):
    for level in (1, 2, 3):
        d = LogicDomain(level=level, form=form)
        assert {d.task_type(p.prompt) for p in d.generate(200, level)} == {form}
    mixed = LogicDomain(form="order+horn+bool")
    assert {mixed.task_type(p.prompt) for p in mixed.generate(200, 0)} == {"order", "horn", "bool"}


@pytest.mark.parametrize("kind", ["law", "unit"])
def test_science_task_type_is_the_kind_it_was_drawn_from(kind):
    for level in (1, 2, 3):
        d = ScienceDomain(level=level, kinds=(kind,))
        assert {d.task_type(p.prompt) for p in d.generate(60, level)} == {kind}


def test_math_sort_answers_are_the_prompt_digits_in_ascending_order():
    d = MathDomain(5)
    assert d.settings["form"] == "sort"
    problems = d.generate(300, 3)
    for p in problems:
        assert p.prompt.startswith("sort") and p.prompt.endswith("=")
        digits = p.prompt[len("sort") : -1]
        assert digits.isdigit() and 8 <= len(digits) <= 9
        assert p.answer == "".join(sorted(digits)) and d.task_type(p.prompt) == "sort"
    assert {len(p.answer) for p in problems} == {8, 9}
    # hand-worked: leading zeros are kept (the answer is a digit string, not a number)
    assert d.verify(d.make("sort30210=", "00123"), "00123") == 1.0


def test_metric_units_convert_by_powers_of_ten_in_both_directions():
    power = {"km": 3, "m": 0, "cm": -2, "mm": -3, "kg": 3, "g": 0, "mg": -3, "L": 0, "mL": -3}
    d = ScienceDomain(4)
    pairs = set()
    for p in d.generate(2000, 0):
        x, a, b = re.fullmatch(r"(\d+)([a-zA-Z]+)=\?([a-zA-Z]+)", p.prompt).groups()
        # x a = answer b, scaled by 10^3 so every exponent is >= 0
        assert int(x) * 10 ** (power[a] + 3) == int(p.answer) * 10 ** (power[b] + 3), p
        assert 1 <= int(x if power[a] > power[b] else p.answer) <= 999
        pairs.add((a, b))
    # 10 pairs of units of one dimension, each asked both ways
    assert len(pairs) == 20 and ("km", "mm") in pairs and ("mm", "km") in pairs
    assert d.verify(d.make("37km=?cm", "3700000"), "3700000") == 1.0
