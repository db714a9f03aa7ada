"""The declared verifiers of loaded datasets: exact, numeric (with its number parser), math."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.verifiers import (
    ExactVerifier,
    NumericVerifier,
    build_verifier,
    normalize_text,
    parse_number,
    response_number,
    verifier_kinds,
)


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", Fraction(42)),
        ("-3.5", Fraction(-7, 2)),
        ("+.5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("1,234,567.25", Fraction(4938269, 4)),  # 1234567.25 = 4938269/4
        ("6.02e23", Fraction(602) * 10**21),
        ("1E-3", Fraction(1, 1000)),
        ("3/4", Fraction(3, 4)),
        ("-1 / 2", Fraction(-1, 2)),
        ("0.5/0.25", Fraction(2)),
        ("\u22122", Fraction(-2)),  # a Unicode minus sign
        ("  7  ", Fraction(7)),
    ],
)
def test_parse_number_reads(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text", ["", "abc", "1,23", "12,3456", "1/2/3", "1/0", "1e", "--1", "1 2", "1e1000", None]
)
def test_parse_number_refuses(text):
    assert parse_number(text) is None


def test_the_number_of_a_response():
    # whole response, else the last \boxed{}, else the last number of the text
    assert response_number("0.5") == Fraction(1, 2)
    assert response_number("so x = 3, and the answer is 1/2.") == Fraction(1, 2)
    assert response_number(r"first 3, then \boxed{-4.5} and 7 apples") == Fraction(-9, 2)
    assert response_number("the 2nd try gives v2 = 8") == 8  # '2nd' and 'v2' are not numbers
    assert response_number("no number") is None and response_number(None) is None


def test_numeric_verifier_hand_worked():
    v = NumericVerifier()  # rel_tol 1e-6, abs_tol 1e-9
    assert v("1/2", "0.5") == 1.0
    # |0.51 - 0.5| = 0.01 > 1e-6 * 0.51
    assert v("0.51", "0.5") == 0.0
    assert v("1,000", "1e3") == 1.0 and v("x", "1") == 0.0 and v("", "0") == 0.0
    # 0.3333333 vs 1/3: difference 3.3e-8, bound 1e-6 * 1/3 = 3.3e-7 -> accepted
    assert v("0.3333333", "1/3") == 1.0
    # |0.333 - 1/3| = 3.3e-4: rejected at 1e-6, accepted at rel_tol 1e-3 (bound 3.3e-4 ... >)
    assert v("0.333", "1/3") == 0.0 and NumericVerifier(rel_tol=1e-3)("0.333", "1/3") == 1.0
    # near zero the absolute tolerance decides: |1e-10 - 0| = 1e-10 <= 1e-9
    assert v("1e-10", "0") == 1.0 and v("1e-8", "0") == 0.0
    assert v.check_truth("12.5") is None and "not a number" in v.check_truth("twelve")


def test_exact_verifier_normalization():
    v = ExactVerifier()
    assert normalize_text("  Paris.  ") == "paris"
    assert normalize_text("A \t b\nC") == "a b c"
    assert normalize_text("085") == "85" and normalize_text("ﬁve") == "five"  # NFKC ligature
    assert v("PARIS", "paris") == 1.0 and v("paris.", "Paris") == 1.0
    assert v("pari", "paris") == 0.0 and v("", "") == 0.0 and v(None, "x") == 0.0
    assert v("0085", "85") == 1.0 and v("85.0", "85") == 0.0  # exact is not numeric
    assert ExactVerifier(case_sensitive=True)("PARIS", "paris") == 0.0


def test_math_kind_uses_math_verify():
    pytest.importorskip("math_verify")
    v = build_verifier("math")
    assert v(r"It is \boxed{\frac{1}{2}}", "0.5") == 1.0 and v(r"\boxed{2}", "0.5") == 0.0


def test_build_verifier_errors_name_the_key():
    assert verifier_kinds() == ["domain", "exact", "math", "numeric"]
    with pytest.raises(ConfigError, match=r"^v.sci: unknown verifier kind 'numerc'. Did you mean"):
        build_verifier("numerc", "v.sci")
    with pytest.raises(ConfigError, match=r"^v.sci.reltol: unknown parameter .* 'rel_tol'"):
        build_verifier({"kind": "numeric", "reltol": 0.1}, "v.sci")
    with pytest.raises(ConfigError, match=r"^v.sci.rel_tol: must be >= 0.0, got -1"):
        build_verifier({"kind": "numeric", "rel_tol": -1}, "v.sci")
    with pytest.raises(ConfigError, match=r"^v.sci: missing required key 'kind'"):
        build_verifier({"rel_tol": 0.1}, "v.sci")
    with pytest.raises(ConfigError, match="takes no parameters"):
        build_verifier({"kind": "json:dumps", "x": 1}, "v.sci")
    assert build_verifier({"kind": "numeric", "rel_tol": 0.1})("1.05", "1") == 1.0


# ---------------------------------------------------------------- property: parser vs oracle
@st.composite
def decimals(draw):
    """(text, exact value) of a decimal number written one of the accepted ways."""
    integer = draw(st.integers(0, 10**12))
    commas = draw(st.booleans())
    digits = draw(st.one_of(st.none(), st.text("0123456789", max_size=6)))
    head = f"{integer:,}" if commas else str(integer)
    if digits and integer == 0 and draw(st.booleans()):
        head = ""  # '.25'
    text = head if digits is None else f"{head}.{digits}"
    value = Fraction(integer) + (Fraction(int(digits), 10 ** len(digits)) if digits else 0)
    return text, value


@st.composite
def numbers(draw):
    sign = draw(st.sampled_from(["", "+", "-"]))
    text, value = draw(decimals())
    if draw(st.booleans()):  # a fraction
        den_text, den = draw(decimals())
        if den == 0:
            return sign + text + "/" + den_text, None
        space = draw(st.sampled_from(["", " "]))
        text, value = f"{text}{space}/{space}{den_text}", value / den
    elif draw(st.booleans()):  # scientific notation
        exp = draw(st.integers(-300, 300))
        text = f"{text}{draw(st.sampled_from('eE'))}{exp}"
        value *= Fraction(10) ** exp
    return sign + text, -value if sign == "-" else value


@settings(max_examples=300, deadline=None)
@given(numbers())
def test_parse_number_matches_a_plain_oracle(case):
    text, value = case
    assert parse_number(text) == value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_parse_number_never_raises_and_round_trips(text):
    value = parse_number(text)
    assert value is None or isinstance(value, Fraction)
    as_fraction = None if value is None else f"{value.numerator}/{value.denominator}"
    if as_fraction is not None and len(as_fraction) <= 128:  # reads back as itself
        assert parse_number(as_fraction) == value
