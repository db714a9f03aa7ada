"""Declared answer verifiers for loaded datasets: ``exact``, ``numeric``, ``math`` and
``domain`` (docs/datasets.md#verifiers).

A verifier is a declared dataclass called as ``verifier(response, ground_truth) -> 0.0 | 1.0``;
it also checks each ground truth when the dataset is loaded (`check_truth`), so a domain
that would silently score 0 is an error before training.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dataflex_rl.core.config import Checked, param, validate
from dataflex_rl.core.registry import ConfigError, Registry, UnknownNameError, suggest
from dataflex_rl.tasks.base import Problem, canonical, make_domain

# a decimal number: thousands groups with commas, or plain digits; an optional fraction part
_DEC = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
# exponents are capped at three digits (a number with a million-digit exponent is not an answer)
_NUMBER = re.compile(rf"(?P<sign>[+-]?)(?P<mant>{_DEC})(?:[eE](?P<exp>[+-]?\d{{1,3}}))?")
_FRACTION = re.compile(rf"(?P<sign>[+-]?)(?P<num>{_DEC})\s*/\s*(?P<den>{_DEC})")
# numbers inside a longer text: not preceded by a letter, digit, dot or comma-digit
_IN_TEXT = re.compile(
    rf"(?<![\w.])[+-]?(?:{_DEC})(?:\s*/\s*(?:{_DEC})|[eE][+-]?\d{{1,3}})?(?![\w])"
)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_SPACE = re.compile(r"\s+")
#: longest text `parse_number` reads as a whole (longer ones are not one number)
MAX_NUMBER_CHARS = 128


def _decimal(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def parse_number(text: str | None) -> Fraction | None:
    """The exact value of ``text`` if the whole (stripped) text is one number, else None.

    Reads ``42``, ``-3.5``, ``+.5``, ``1,234,567.25``, ``6.02e23`` (exponent of at most
    three digits) and fractions ``-1 / 2``; not ``1,23``, ``1/2/3`` or a zero denominator.
    """
    if text is None:
        return None
    s = str(text).strip().replace("\u2212", "-")
    if not s or len(s) > MAX_NUMBER_CHARS:
        return None
    m = _NUMBER.fullmatch(s)
    if m is not None:
        value = _decimal(m["mant"])
        if m["exp"]:
            value *= Fraction(10) ** int(m["exp"])
        return -value if m["sign"] == "-" else value
    m = _FRACTION.fullmatch(s)
    if m is not None:
        den = _decimal(m["den"])
        if den == 0:
            return None
        value = _decimal(m["num"]) / den
        return -value if m["sign"] == "-" else value
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces, or None."""
    for m in reversed(list(_BOX.finditer(text))):
        depth = 1
        for i in range(m.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[m.end() : i]
    return None


def response_number(response: str | None) -> Fraction | None:
    """The number a response answers: the whole response if it is one, else the content of
    its last ``\\boxed{}``, else the last number in its text (None when there is none)."""
    if response is None:
        return None
    text = str(response).replace("\u2212", "-")
    whole = parse_number(text)
    if whole is not None:
        return whole
    boxed = last_boxed(text)
    if boxed is not None:
        return parse_number(boxed)
    found = _IN_TEXT.findall(text)
    return parse_number(found[-1]) if found else None


def normalize_text(text: str | None, case_sensitive: bool = False) -> str:
    """The form `ExactVerifier` compares: NFKC, case folded (unless ``case_sensitive``),
    whitespace runs collapsed to one space, outer whitespace and one trailing period dropped,
    integers canonical (``" 085 "`` -> ``"85"``)."""
    if text is None:
        return ""
    s = unicodedata.normalize("NFKC", str(text))
    s = _SPACE.sub(" ", s).strip()
    if not case_sensitive:
        s = s.casefold()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return canonical(s)


class Verifier(Checked):
    """Base of the declared verifiers: ``verifier(response, ground_truth)`` is 0.0 or 1.0."""

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        raise NotImplementedError

    def check_truth(self, ground_truth: str) -> str | None:
        """Why ``ground_truth`` cannot be verified by this verifier, or None if it can."""
        return None


@dataclass
class ExactVerifier(Verifier):
    """Normalized exact match (`normalize_text` of both sides equal; an empty response is
    wrong)."""

    case_sensitive: bool = param(False, "compare case (default: case folded)")

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        got = normalize_text(response, self.case_sensitive)
        return 1.0 if got and got == normalize_text(ground_truth, self.case_sensitive) else 0.0


@dataclass
class NumericVerifier(Verifier):
    """The response's number equals the ground truth within a tolerance.

    Correct when ``|got - truth| <= max(rel_tol * max(|got|, |truth|), abs_tol)`` (as
    ``math.isclose``), computed exactly on rationals.
    """

    rel_tol: float = param(1e-6, "relative tolerance", ge=0.0, lt=1.0)
    abs_tol: float = param(1e-9, "absolute tolerance (matters for answers near 0)", ge=0.0)

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        truth = parse_number(ground_truth)
        got = response_number(response)
        if truth is None or got is None:
            return 0.0
        bound = max(Fraction(self.rel_tol) * max(abs(got), abs(truth)), Fraction(self.abs_tol))
        return 1.0 if abs(got - truth) <= bound else 0.0

    def check_truth(self, ground_truth: str) -> str | None:
        if parse_number(ground_truth) is None:
            return f"ground truth {ground_truth!r:.60} is not a number"
        return None


@dataclass
class MathVerify(Verifier):
    """Symbolic comparison with math-verify (needs the ``tasks`` extra)."""

    float_rounding: int = param(6, "decimal places numbers are rounded to", ge=0)
    numeric_precision: int = param(15, "digits used in numeric comparison", ge=1)
    strict: bool = param(True, "math-verify's strict mode (variables and relations must match)")
    timeout_seconds: int | None = param(5, "per-call limit (main thread only; null: none)", ge=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        from dataflex_rl.tasks.math_verify import MathVerifier

        self._impl = MathVerifier(
            float_rounding=self.float_rounding,
            numeric_precision=self.numeric_precision,
            strict=self.strict,
            timeout_seconds=self.timeout_seconds,
        )

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        return self._impl(response, ground_truth)


@dataclass
class DomainVerifier(Verifier):
    """The verifier of a registered task domain (``math``, ``logic``, ``science``, ...): the
    rule the engine scores that domain's generated prompts with (for the built-in domains an
    exact match of canonical answers: outer whitespace stripped, integers normalized, case
    kept). A domain whose verifier reads more than the ground truth (a reasoning-gym entry)
    compares exactly, as it does for any loaded problem."""

    domain: str = param(
        doc="a registered domain name; in a dataset's verifiers mapping: default the key"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._handler = make_domain(self.domain)

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        problem = Problem("", self.domain, "", str(ground_truth))
        return 1.0 if self._handler.verify(problem, response) >= 1.0 else 0.0


VERIFIERS: Registry[type[Verifier]] = Registry("verifier", Verifier)
VERIFIERS.register("exact", ExactVerifier)
VERIFIERS.register("numeric", NumericVerifier)
VERIFIERS.register("math", MathVerify)
VERIFIERS.register("domain", DomainVerifier)


def verifier_kinds() -> list[str]:
    """The registered verifier kinds (``exact``, ``math``, ``numeric``)."""
    return VERIFIERS.names()


def build_verifier(
    spec: Any, where: str = "verifier", domain: str | None = None
) -> Callable[[str | None, Any], float]:
    """A verifier from its config: a kind (``"numeric"``), a mapping ``{kind: ..., **params}``
    or ``"module:attr"`` naming a ``(response, ground_truth) -> float`` callable.

    ``where``: the config key, for messages; ``domain``: the ``domain`` kind's default.
    """
    if isinstance(spec, Mapping):
        params = dict(spec)
        kind = params.pop("kind", None)
        if kind is None:
            raise ConfigError(
                f"{where}: missing required key 'kind' (one of {', '.join(verifier_kinds())})"
            )
    else:
        kind, params = spec, {}
    if not isinstance(kind, str):
        raise ConfigError(f"{where}: expected a verifier kind or a mapping, got {spec!r}")
    if ":" in kind and kind not in VERIFIERS:
        if params:
            raise ConfigError(f"{where}: a 'module:attr' verifier takes no parameters")
        from dataflex_rl.core.registry import import_object

        fn = import_object(kind, where)
        if not callable(fn):
            raise ConfigError(f"{where}: {kind!r} is not callable")
        return fn  # type: ignore[return-value]
    try:
        cls = VERIFIERS.get(kind)
    except UnknownNameError:
        raise ConfigError(
            f"{where}: unknown verifier kind {kind!r}.{suggest(kind, verifier_kinds())} "
            f"Valid kinds: {', '.join(verifier_kinds())}, or 'module:attr'"
        ) from None
    if cls is DomainVerifier and domain is not None:
        params.setdefault("domain", domain)
    return validate(cls, params, where, noun=f"parameter of verifier {kind!r}")
