"""Free-form math answers of real language models, verified with ``math-verify`` (optional).

A response such as ``"... so the total is \\boxed{\\frac{1}{2}}"`` is reduced to its final answer
(the last ``\\boxed{}``, else an anchored or last expression / number, as math-verify extracts it)
and compared symbolically with the ground truth. The score is exactly 0.0 or 1.0; a response
that cannot be parsed scores 0.0.

Install with ``pip install math-verify`` (or the ``tasks`` extra of dataflex-rl).
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from typing import Any

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.base import Problem, canonical

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _math_verify() -> Any:
    from dataflex_rl.deps import require

    require("math_verify", "the math verifier")
    return importlib.import_module("math_verify")


def extract_answer(text: str | None) -> str | None:
    """The final answer of ``text`` as a string, for logs and inspection.

    The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced), else the last
    number (commas between thousands removed); ``None`` when there is neither.

    Args:
        text: a model response.
    """
    if not text:
        return None
    starts = [m.end() for m in _BOX.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


class MathVerifier:
    """Symbolic 0/1 comparison of a free-form response with a ground truth, via math-verify.

    Args:
        float_rounding: decimal places numbers are rounded to before comparing.
        numeric_precision: digits used in numeric comparison.
        strict: math-verify's strict mode (variables and relations must match).
        timeout_seconds: per-call limit for parsing and comparing; math-verify implements it
            with ``signal.alarm``, so outside the main thread it is disabled automatically.

    Raises:
        ConfigError: math-verify is not installed.
    """

    def __init__(
        self,
        *,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
        timeout_seconds: int | None = 5,
    ) -> None:
        self._mv = _math_verify()
        need = {"parse": "parsing_timeout", "verify": "timeout_seconds"}
        for fn, arg in need.items():
            if arg not in inspect.signature(getattr(self._mv, fn)).parameters:
                raise ConfigError(
                    f"math-verify is too old: {fn}() has no {arg!r}; pip install 'math-verify>=0.8'"
                )
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self.timeout_seconds = timeout_seconds

    def _timeout(self) -> int | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        return self.timeout_seconds

    def _parse(self, text: str, timeout: int | None) -> list:
        try:
            return self._mv.parse(text, parsing_timeout=timeout)
        except Exception:
            return []

    def parse_gold(self, ground_truth: Any) -> list:
        """math-verify's parse of a ground truth (wrapped in ``\\boxed{}`` unless it is LaTeX
        math already)."""
        gold = str(ground_truth).strip()
        timeout = self._timeout()
        if "\\boxed" in gold or "$" in gold:
            return self._parse(gold, timeout)
        return self._parse("\\boxed{" + gold + "}", timeout) or self._parse(gold, timeout)

    def __call__(self, response: str | None, ground_truth: Any) -> float:
        """1.0 if the final answer of ``response`` equals ``ground_truth``, else 0.0.

        Args:
            response: the model's response.
            ground_truth: the reference answer (a number, LaTeX, or text with ``\\boxed{}``).
        """
        if response is None or not str(response).strip():
            return 0.0
        gold = self.parse_gold(ground_truth)
        timeout = self._timeout()
        pred = self._parse(str(response), timeout)
        if not gold:  # the reference is not math: fall back to an exact comparison
            final = extract_answer(str(response))
            return 1.0 if final and canonical(final) == canonical(str(ground_truth)) else 0.0
        if not pred:
            return 0.0
        try:
            ok = self._mv.verify(
                gold,
                pred,
                float_rounding=self.float_rounding,
                numeric_precision=self.numeric_precision,
                strict=self.strict,
                timeout_seconds=timeout,
            )
        except Exception:
            return 0.0
        return 1.0 if ok is True else 0.0

    def verify(self, problem: Problem, response: str | None) -> float:
        """``self(response, answer)``, accepting any of ``problem.extra["answers"]`` if present."""
        answers = list(problem.extra.get("answers", ())) if problem.extra else []
        for answer in answers or [problem.answer]:
            if self(response, answer) >= 1.0:
                return 1.0
        return 0.0
