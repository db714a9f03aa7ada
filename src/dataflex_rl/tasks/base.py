"""Problems, task domains, task sets and the domain registry.

A `Domain` is one procedurally generated task family with an exact 0/1 verifier. A `TaskSet`
holds, per domain, a pool of training candidates and a held-out evaluation set whose prompts
never occur in the training pool. `build_taskset` makes one from registered domain names.

Difficulty: every built-in domain has numbered ``LEVELS`` (presets of its knobs) and accepts
each knob as a keyword that overrides the level. ``build_taskset(difficulty=...)`` maps a domain
name to a level (``{"math": 3}``) or to keywords (``{"math": {"max_operand": 50}}``).
"""

from __future__ import annotations

import inspect
import itertools
import logging
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from dataflex_rl.core.registry import ConfigError, Registry, UnknownNameError, suggest

log = logging.getLogger(__name__)
_INT = re.compile(r"[+-]?\d+")


def canonical(text: str | None) -> str:
    """Canonical form of an answer: outer whitespace stripped, integers normalized.

    ``" 085 "`` -> ``"85"``, ``"+7"`` -> ``"7"``, ``"-0"`` -> ``"0"``; any other text is only
    stripped. ``None`` becomes ``""``.

    Args:
        text: an answer or a model response.
    """
    if text is None:
        return ""
    s = str(text).strip()
    if len(s) <= 64 and _INT.fullmatch(s):
        return str(int(s))
    return s


def exact_match(answer: str, response: str | None) -> float:
    """1.0 if the canonical forms of ``answer`` and ``response`` are equal, else 0.0.

    An empty response is always wrong, even against an empty answer.

    Args:
        answer: the reference answer.
        response: the model's response (text generated after the prompt).
    """
    r = canonical(response)
    return 1.0 if r and r == canonical(answer) else 0.0


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference answer.

    Args:
        key: identity of the prompt across runs, ``"<domain>:<prompt>"`` for generated problems;
            two problems of one domain share a key exactly when they share a prompt.
        domain: name of the domain the problem belongs to.
        prompt: the text given to the policy.
        answer: the canonical answer (the supervised warm start trains on it).
        extra: host- or source-specific data (chat messages, a reasoning-gym entry, ...);
            ignored by equality and hashing.
    """

    key: str
    domain: str
    prompt: str
    answer: str
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


def _prompts(items: Iterable[Problem | str]) -> set[str]:
    return {p.prompt if isinstance(p, Problem) else str(p) for p in items}


class Domain(ABC):
    """One task family: a deterministic generator, an exact 0/1 verifier and a character set.

    Subclasses set ``name``, ``LEVELS`` (level number -> knob values) and ``DEFAULT_LEVEL``,
    implement `sample`, `charset`, and call `resolve` in ``__init__``.
    """

    name: ClassVar[str] = ""
    LEVELS: ClassVar[dict[int, dict[str, Any]]] = {}
    DEFAULT_LEVEL: ClassVar[int] = 2
    #: how many draws per requested problem `generate` tries before giving up
    ATTEMPTS_PER_PROBLEM: ClassVar[int] = 50
    #: `generate` stops after this many draws in a row that repeat a prompt
    MAX_MISSES: ClassVar[int] = 5000

    settings: dict[str, Any]

    def resolve(self, level: int | None, **overrides: Any) -> dict[str, Any]:
        """Knob values of ``level`` with the non-``None`` ``overrides`` applied.

        Stores the result (plus ``level``) in ``self.settings`` and returns it.

        Raises:
            ConfigError: unknown level.
        """
        lvl = self.DEFAULT_LEVEL if level is None else level
        if lvl not in self.LEVELS:
            raise ConfigError(f"{self.name}: unknown difficulty level {lvl!r}; "
                              f"valid levels: {sorted(self.LEVELS)}")
        values = dict(self.LEVELS[lvl])
        values.update({k: v for k, v in overrides.items() if v is not None})
        self.settings = {"level": lvl, **values}
        return values

    @abstractmethod
    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Draw one ``(prompt, answer)`` pair using only ``rng``."""

    @abstractmethod
    def charset(self) -> str:
        """Every character this domain's prompts and answers can use (sorted, no duplicates)."""

    def make(self, prompt: str, answer: str, **extra: Any) -> Problem:
        """A `Problem` of this domain with the standard key ``"<name>:<prompt>"``."""
        return Problem(f"{self.name}:{prompt}", self.name, prompt, answer, extra)

    def generate(self, n: int, seed: int, *, exclude: Iterable[Problem | str] = (),
                 allow_fewer: bool = False) -> list[Problem]:
        """``n`` problems with distinct prompts, deterministic given ``seed`` and the settings.

        The first ``k`` problems of ``generate(n, seed)`` are those of ``generate(k, seed)``.
        Drawing stops early once ``MAX_MISSES`` draws in a row repeat a prompt (the settings
        have run out of new prompts).

        Args:
            n: number of problems.
            seed: generator seed.
            exclude: problems or prompts that must not be returned (e.g. an evaluation set).
            allow_fewer: return fewer than ``n`` problems instead of raising when the settings
                run out of distinct prompts.

        Raises:
            ConfigError: the settings have too few distinct prompts for ``n`` (unless
                ``allow_fewer``).
        """
        rng = random.Random(f"{self.name}:{seed}")
        return self._collect((self.sample(rng) for _ in itertools.count()), n, exclude,
                             allow_fewer)

    def _collect(self, draws: Iterator[tuple[str, str, dict]] | Iterator[tuple[str, str]],
                 n: int, exclude: Iterable[Problem | str], allow_fewer: bool) -> list[Problem]:
        seen = _prompts(exclude)
        out: list[Problem] = []
        misses = 0
        budget = self.ATTEMPTS_PER_PROBLEM * n + 1000 if n > 0 else 0
        for prompt, answer, *extra in itertools.islice(draws, budget):
            if prompt in seen:
                misses += 1
                if misses >= self.MAX_MISSES:
                    break
                continue
            misses = 0
            seen.add(prompt)
            out.append(self.make(prompt, answer, **(extra[0] if extra else {})))
            if len(out) >= n:
                break
        if len(out) < n and not allow_fewer:
            raise ConfigError(f"{self.name} ({self.settings}): found only {len(out)} distinct "
                              f"prompts for n={n}; ask for fewer or raise the difficulty")
        return out

    def verify(self, problem: Problem, response: str | None) -> float:
        """1.0 if ``response`` (the text generated after the prompt) is correct, else 0.0."""
        return exact_match(problem.answer, response)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in getattr(self, "settings", {}).items())
        return f"{type(self).__name__}({args})"


DOMAINS: Registry[type[Domain]] = Registry("domain", Domain)
DOMAINS.register("math", "dataflex_rl.tasks.arithmetic:MathDomain")
DOMAINS.register("logic", "dataflex_rl.tasks.logic:LogicDomain")
DOMAINS.register("science", "dataflex_rl.tasks.science:ScienceDomain")
DOMAINS.register("rg_arithmetic", "dataflex_rl.tasks.rgym:ReasoningGymArithmetic")


def make_domain(name: str, difficulty: int | Mapping[str, Any] | None = None) -> Domain:
    """Instantiate the registered domain ``name`` at a difficulty.

    Args:
        name: a registered domain name or ``"module:Class"``.
        difficulty: ``None`` (default level), a level number, or keyword knobs (may include
            ``"level"``).

    Raises:
        UnknownNameError: unknown domain name.
        ConfigError: unknown knob (named, with the valid ones) or invalid value.
    """
    cls = DOMAINS.get(name)
    if difficulty is None:
        kwargs: dict[str, Any] = {}
    elif isinstance(difficulty, bool) or not isinstance(difficulty, (int, Mapping)):
        raise ConfigError(f"difficulty of domain {name!r} must be a level number or a mapping "
                          f"of knobs, got {difficulty!r}")
    elif isinstance(difficulty, int):
        kwargs = {"level": difficulty}
    else:
        kwargs = dict(difficulty)
    params = inspect.signature(cls.__init__).parameters
    valid = [p for p in params if p != "self"
             and params[p].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                        inspect.Parameter.VAR_KEYWORD)]
    for key in kwargs:
        if key not in valid:
            raise ConfigError(f"difficulty.{name}: unknown key {key!r}.{suggest(key, valid)} "
                              f"Valid keys: {', '.join(valid)}")
    return cls(**kwargs)


@dataclass
class TaskSet:
    """Training pools and held-out evaluation sets, per domain.

    Args:
        domains: domain names, in id order.
        train: per-domain pools of training candidates.
        eval: per-domain held-out problems; no eval prompt occurs in the same domain's pool.
        handlers: the `Domain` object of each name (used by `verify` and `sample_train`);
            a missing one is built from `DOMAINS` at its default difficulty.

    Raises:
        ConfigError: pools and domains disagree, or an eval prompt is also a training prompt.
    """

    domains: tuple[str, ...]
    train: dict[str, list[Problem]]
    eval: dict[str, list[Problem]]
    handlers: dict[str, Domain] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.domains = tuple(self.domains)
        for split, pools in (("train", self.train), ("eval", self.eval)):
            extra = set(pools) - set(self.domains)
            if extra:
                raise ConfigError(f"TaskSet.{split} has domains {sorted(extra)} not in "
                                  f"domains {list(self.domains)}")
        for d in self.domains:
            shared = _prompts(self.train.get(d, ())) & _prompts(self.eval.get(d, ()))
            if shared:
                raise ConfigError(f"TaskSet: {len(shared)} eval prompts of domain {d!r} are "
                                  f"also training prompts, e.g. {sorted(shared)[0]!r}")

    def handler(self, domain: str) -> Domain:
        """The `Domain` object that verifies and generates problems of ``domain``."""
        if domain not in self.handlers:
            if domain not in self.domains:
                raise UnknownNameError(f"unknown domain {domain!r}."
                                       f"{suggest(domain, list(self.domains))} "
                                       f"Domains of this task set: {', '.join(self.domains)}")
            self.handlers[domain] = make_domain(domain)
        return self.handlers[domain]

    def verify(self, problem: Problem, response: str | None) -> float:
        """Exactly 0.0 or 1.0: is ``response`` a correct answer to ``problem``?"""
        return 1.0 if self.handler(problem.domain).verify(problem, response) >= 1.0 else 0.0

    def verify_many(self, problems: Sequence[Problem], responses: Sequence[str | None]
                    ) -> list[float]:
        """`verify` for each (problem, response) pair."""
        if len(problems) != len(responses):
            raise ValueError(f"{len(problems)} problems but {len(responses)} responses")
        return [self.verify(p, r) for p, r in zip(problems, responses)]

    def charset(self) -> str:
        """Sorted characters of every domain's charset and of every stored prompt and answer."""
        chars: set[str] = set()
        for d in self.domains:
            handler = self.handlers.get(d)
            if handler is not None and hasattr(handler, "charset"):
                chars.update(handler.charset())
        for pools in (self.train, self.eval):
            for problems in pools.values():
                for p in problems:
                    chars.update(p.prompt)
                    chars.update(p.answer)
        return "".join(sorted(chars))

    def sample_train(self, domain: str, n: int, seed: int, *, disjoint_from_pool: bool = False,
                     allow_fewer: bool = False) -> list[Problem]:
        """``n`` freshly generated training problems of ``domain``, never an eval prompt.

        Use it for supervised warm-start data drawn "from the generators". With the seed that
        built the pool (and ``disjoint_from_pool=False``) it returns the pool's first ``n``.

        Args:
            domain: the domain.
            n: number of problems.
            seed: generator seed.
            disjoint_from_pool: also avoid every prompt of the training pool, so accuracy on
                the pool is not inflated by memorizing warm-start data.
            allow_fewer: return fewer when the domain runs out of distinct prompts.
        """
        exclude = list(self.eval.get(domain, ()))
        if disjoint_from_pool:
            exclude += self.train.get(domain, [])
        return self.handler(domain).generate(n, seed, exclude=exclude, allow_fewer=allow_fewer)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per domain: pool and eval sizes and the domain's settings (for logs)."""
        return {d: {"train": len(self.train.get(d, ())), "eval": len(self.eval.get(d, ())),
                    "settings": dict(getattr(self.handlers.get(d), "settings", {}))}
                for d in self.domains}


def _per_domain(value: int | Mapping[str, int], domains: Sequence[str], what: str) -> dict:
    if isinstance(value, Mapping):
        unknown = set(value) - set(domains)
        if unknown:
            raise ConfigError(f"{what}: unknown domains {sorted(unknown)}; "
                              f"domains: {list(domains)}")
        out = {d: value.get(d) for d in domains}
        missing = [d for d, v in out.items() if v is None]
        if missing:
            raise ConfigError(f"{what}: no size for domains {missing}")
    else:
        out = {d: value for d in domains}
    for d, v in out.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{what}.{d}: must be an integer >= 0, got {v!r}")
    return out


def build_taskset(domains: Sequence[str | Domain] = ("math", "logic", "science"),
                  train_size: int | Mapping[str, int] = 2000,
                  eval_size: int | Mapping[str, int] = 200, seed: int = 0,
                  difficulty: Mapping[str, int | Mapping[str, Any]] | None = None, *,
                  eval_seed: int | None = None) -> TaskSet:
    """Generate training pools and disjoint held-out evaluation sets.

    The evaluation set of each domain is drawn first (seed ``-1 - eval_seed``), then the
    training pool (seed ``seed``) excluding every evaluation prompt. A domain whose settings
    have fewer distinct prompts than ``train_size`` gets a smaller pool (with a warning); its
    evaluation set must be full.

    Args:
        domains: registered domain names (or `Domain` objects), in id order.
        train_size: training pool size, for all domains or per domain.
        eval_size: evaluation set size, for all domains or per domain.
        seed: seed of the training pools.
        difficulty: per domain name, a level number or a mapping of knobs (see `make_domain`).
        eval_seed: seed of the evaluation sets; ``None`` uses ``seed``. Fix it to keep one
            evaluation set across training seeds.

    Raises:
        ConfigError: duplicate or unknown domains, unknown difficulty keys, bad sizes, or a
            difficulty with too few distinct prompts for the evaluation set.
    """
    handlers: dict[str, Domain] = {}
    for d in domains:
        handler = d if isinstance(d, Domain) else None
        name = handler.name if handler is not None else d
        if not isinstance(name, str) or not name:
            raise ConfigError(f"domains: expected names or Domain objects, got {d!r}")
        if name in handlers:
            raise ConfigError(f"domains: {name!r} is listed twice")
        handlers[name] = handler  # type: ignore[assignment]
    names = tuple(handlers)
    difficulty = dict(difficulty or {})
    for key in difficulty:
        if key not in handlers:
            raise ConfigError(f"difficulty: unknown domain {key!r}.{suggest(key, list(names))} "
                              f"Domains: {', '.join(names)}")
    for name in names:
        if handlers[name] is None:
            handlers[name] = make_domain(name, difficulty.get(name))
        elif name in difficulty:
            raise ConfigError(f"difficulty.{name}: domain {name!r} was given as an object; "
                              f"set its difficulty when constructing it")
    train_n = _per_domain(train_size, names, "train_size")
    eval_n = _per_domain(eval_size, names, "eval_size")
    eseed = seed if eval_seed is None else eval_seed
    train, evals = {}, {}
    for name, h in handlers.items():
        evals[name] = h.generate(eval_n[name], -1 - eseed)
        train[name] = h.generate(train_n[name], seed, exclude=evals[name], allow_fewer=True)
        if len(train[name]) < train_n[name]:
            log.warning("domain %r at %s has only %d distinct training prompts (asked for %d)",
                        name, h.settings, len(train[name]), train_n[name])
    return TaskSet(names, train, evals, handlers)
