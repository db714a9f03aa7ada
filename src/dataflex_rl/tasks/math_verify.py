"""Free-form math answers of real language models, verified with ``math-verify`` (optional:
the ``tasks`` extra): the final answer is compared symbolically with the ground truth, exactly
0.0 or 1.0 (0.0 when it cannot be parsed).
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
    """The final answer of ``text`` (for logs): the content of the last ``\\boxed{...}`` /
    ``\\fbox{...}``, else the last number (thousands commas removed), else ``None``."""
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

    The arguments are math-verify's; ``timeout_seconds`` (per call) uses ``signal.alarm``,
    so it is disabled outside the main thread. ConfigError: math-verify is not installed.
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
