"""Domains backed by reasoning-gym generators (optional: ``pip install reasoning-gym``).

reasoning-gym's prompts are long instructions, far beyond a character-level policy, and its
``score_answer`` gives partial credit (an answer that *contains* the oracle scores
``len(oracle)/len(answer)``). A `ReasoningGymDomain` therefore rebuilds a short prompt from each
entry's metadata and forces scores to 0/1: a response scores 1.0 only if reasoning-gym gives it
full credit.
"""

from __future__ import annotations

import hashlib
import importlib
import random
import re
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.base import Domain, Problem, exact_match

MAX_PROMPT = 24
_INT = re.compile(r"\d+")


def _reasoning_gym() -> Any:
    from dataflex_rl.deps import require

    require("reasoning_gym", "reasoning-gym domains")
    return importlib.import_module("reasoning_gym")


def binary_score(score: float | None) -> float:
    """1.0 for full credit, 0.0 for anything less (partial credit included)."""
    return 1.0 if score is not None and float(score) >= 1.0 else 0.0


class ReasoningGymDomain(Domain):
    """Base class: a reasoning-gym dataset with short prompts rebuilt from entry metadata.

    Subclasses set ``dataset`` (the reasoning-gym name), build ``self.rg_config`` (keyword
    arguments of its config) in ``__init__`` and implement `short_prompt`. Entries whose
    rebuilt prompt is longer than ``MAX_PROMPT`` characters are skipped.
    """

    dataset: ClassVar[str] = ""
    rg_config: dict[str, Any]

    @abstractmethod
    def short_prompt(self, entry: dict[str, Any]) -> str:
        """A short prompt for one reasoning-gym entry (from its ``metadata``)."""

    def short_answer(self, entry: dict[str, Any]) -> str:
        """The canonical answer of an entry (its ``answer``)."""
        return str(entry["answer"]).strip()

    def sample(self, rng: random.Random) -> tuple[str, str]:
        entry = self._dataset(rng.getrandbits(48), 1)[0]
        return self.short_prompt(entry), self.short_answer(entry)

    def _dataset(self, seed: int, size: int) -> Any:
        rg = _reasoning_gym()
        return rg.create_dataset(self.dataset, seed=seed, size=size, **self.rg_config)

    def stream(self, seed: int, n: int) -> Iterator[tuple[str, str, dict]]:
        """Entries of a dataset seeded by a hash of (domain, ``seed``) (reasoning-gym seeds
        entry ``i`` with ``seed + i``: nearby seeds would share entries), as short prompts;
        those longer than ``MAX_PROMPT`` are skipped."""
        base = int.from_bytes(hashlib.sha256(f"{self.name}:{seed}".encode()).digest()[:6], "big")
        limit = self.ATTEMPTS_PER_PROBLEM * n + 1000
        ds = self._dataset(base, limit)

        def draws() -> Iterator[tuple[str, str, dict]]:
            for idx in range(limit):
                entry = ds[idx]
                prompt = self.short_prompt(entry)
                if len(prompt) <= MAX_PROMPT:
                    yield prompt, self.short_answer(entry), {"rg_entry": entry}

        return draws()

    def verify(self, problem: Problem, response: str | None) -> float:
        """reasoning-gym's ``score_answer`` on the stripped response, forced to 0/1 (without
        the entry, e.g. loaded from a file: an exact comparison with ``problem.answer``)."""
        entry = problem.extra.get("rg_entry") if problem.extra else None
        if entry is None:
            return exact_match(problem.answer, response)
        text = "" if response is None else str(response).strip()
        if not text:
            return 0.0
        if not hasattr(self, "_scorer"):
            self._scorer = self._dataset(0, 1)
        return binary_score(self._scorer.score_answer(text, entry))


class ReasoningGymArithmetic(ReasoningGymDomain):
    """reasoning-gym ``basic_arithmetic`` as ``"-7-(35+2)="`` -> ``"-44"``.

    Args:
        level: preset of the knobs below (1 easiest .. 3; default 2).
        min_terms: fewest operands.
        max_terms: most operands.
        min_digits: fewest digits per operand (the generator draws one count per problem).
        max_digits: most digits per operand.
        operators: subset of ``"+-*"`` (reasoning-gym's ``/`` is floor division, left out).
        allow_parentheses: allow parenthesized sub-expressions.

    Levels (operands / digits / operators): 1 = 2 / 1 / ``+-``; 2 = 2-3 / 1-2 / ``+-``;
    3 = 2-4 / 1-2 / ``+-*``.
    """

    name = "rg_arithmetic"
    dataset = "basic_arithmetic"
    #: the knobs of a level, in order (the columns of `LEVELS`)
    KNOBS = tuple("min_terms max_terms min_digits max_digits operators allow_parentheses".split())
    LEVELS = {
        1: dict(zip(KNOBS, (2, 2, 1, 1, "+-", False))),
        2: dict(zip(KNOBS, (2, 3, 1, 2, "+-", True))),
        3: dict(zip(KNOBS, (2, 4, 1, 2, "+-*", True))),
    }

    def __init__(
        self,
        level: int | None = None,
        *,
        min_terms: int | None = None,
        max_terms: int | None = None,
        min_digits: int | None = None,
        max_digits: int | None = None,
        operators: str | None = None,
        allow_parentheses: bool | None = None,
    ) -> None:
        s = self.resolve(
            level,
            min_terms=min_terms,
            max_terms=max_terms,
            min_digits=min_digits,
            max_digits=max_digits,
            operators=operators,
            allow_parentheses=allow_parentheses,
        )
        ops = str(s["operators"])
        if not ops or set(ops) - set("+-*"):
            raise ConfigError(
                f"rg_arithmetic: operators must be a non-empty subset of '+-*', got {ops!r}"
            )
        if not 2 <= s["min_terms"] <= s["max_terms"] <= 4:
            raise ConfigError("rg_arithmetic: need 2 <= min_terms <= max_terms <= 4")
        if not 1 <= s["min_digits"] <= s["max_digits"] <= 3:
            raise ConfigError("rg_arithmetic: need 1 <= min_digits <= max_digits <= 3")
        # the parenthesis-free generator ignores precedence, so '*' needs the other one
        parens = bool(s["allow_parentheses"]) or "*" in ops
        self.rg_config = dict(
            min_terms=int(s["min_terms"]),
            max_terms=int(s["max_terms"]),
            min_digits=int(s["min_digits"]),
            max_digits=int(s["max_digits"]),
            operators=tuple(ops),
            allow_parentheses=parens,
            allow_negation=parens,
            whitespace="no_space",
        )

    def short_prompt(self, entry: dict[str, Any]) -> str:
        return "".join(str(entry["metadata"]["expression"]).split()) + "="

    def task_type(self, prompt: str) -> str:
        """``"<n>-term"``: the number of integer literals in the expression."""
        return f"{len(_INT.findall(prompt))}-term"

    def charset(self) -> str:
        extra = "()" if self.rg_config["allow_parentheses"] else ""
        return "".join(sorted(set("0123456789=-" + "".join(self.rg_config["operators"]) + extra)))
