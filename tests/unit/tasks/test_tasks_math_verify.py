"""The free-form math verifier (math-verify) and final-answer extraction."""

from __future__ import annotations

import sys
import threading

import pytest

from dataflex_rl.tasks.base import Problem
from dataflex_rl.tasks.math_verify import extract_answer


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so the answer is \\boxed{72}.", "72"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\fbox{ 3 }", "3"),
        ("we get 12 apples, then 1,250 pears", "1250"),
        ("total -3.5 degrees", "-3.5"),
        ("\\boxed{unclosed 5", "5"),
        ("no numbers here", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.fixture(scope="module")
def verifier():
    pytest.importorskip("math_verify")
    from dataflex_rl.tasks.math_verify import MathVerifier

    return MathVerifier()


@pytest.mark.parametrize(
    "response,truth,score",
    [
        ("The answer is \\boxed{72}.", "72", 1.0),
        ("so the answer is 72.", "72", 1.0),
        ("I think 71, no wait, 72", "72", 1.0),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{\\frac12}", "0.5", 1.0),
        ("$x^2+1$", "x^2+1", 1.0),
        ("\\boxed{72.0}", "72", 1.0),
        ("  \\boxed{72}  \n", "72", 1.0),
        ("72 or 73?", "72", 0.0),
        ("The answer is -3", "3", 0.0),
        ("\\boxed{72.001}", "72", 0.0),
        ("\\boxed{71}", "72", 0.0),
        ("", "72", 0.0),
        ("   ", "72", 0.0),
        (None, "72", 0.0),
        ("no idea", "72", 0.0),
    ],
)
def test_math_verifier_is_zero_or_one(verifier, response, truth, score):
    got = verifier(response, truth)
    assert got == score and type(got) is float


def test_math_verifier_problem_with_several_answers(verifier):
    p = Problem("m:#1", "m", "Half of one?", "0.5", {"answers": ["0.5", "1/2"]})
    assert verifier.verify(p, "\\boxed{1/2}") == 1.0
    assert verifier.verify(p, "\\boxed{2}") == 0.0


def test_math_verifier_symbols_and_empty_truth(verifier):
    assert verifier("the answer is \\boxed{B}", "B") == 1.0
    assert verifier("the answer is \\boxed{C}", "B") == 0.0
    assert verifier("\\boxed{}", "") == 0.0


def test_math_verifier_works_outside_the_main_thread(verifier):
    out = []
    t = threading.Thread(target=lambda: out.append(verifier("\\boxed{4}", "4")))
    t.start()
    t.join()
    assert out == [1.0]


def verify_math(response, ground_truth) -> float:
    """`MathVerifier` with default settings: exactly 0.0 or 1.0."""
    from dataflex_rl.tasks.math_verify import MathVerifier

    return MathVerifier()(response, ground_truth)


def test_verify_math_function():
    pytest.importorskip("math_verify")

    assert verify_math("\\boxed{10}", 10) == 1.0
    assert verify_math("\\boxed{11}", 10) == 0.0


def test_missing_math_verify_is_a_clear_error(monkeypatch):
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.tasks.math_verify import MathVerifier

    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes the import fail
    with pytest.raises(ConfigError, match="pip install math-verify"):
        MathVerifier()
