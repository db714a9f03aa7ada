"""Problems, task domains (generated task families with exact 0/1 verifiers), task sets
(per domain: disjoint eval / train / warm-start splits) and the domain registry."""

from __future__ import annotations

import itertools
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataflex_rl.core.config import check, signature_schema
from dataflex_rl.core.registry import ConfigError, Registry, UnknownNameError, suggest

_INT = re.compile(r"[+-]?\d+")


def canonical(text: str | None) -> str:
    """Canonical form of an answer: stripped, integers normalized (``" +085 "`` -> ``"85"``);
    ``None`` -> ``""``."""
    if text is None:
        return ""
    s = str(text).strip()
    if len(s) <= 64 and _INT.fullmatch(s):
        return str(int(s))
    return s


def exact_match(answer: str, response: str | None) -> float:
    """1.0 if the canonical forms of ``answer`` and ``response`` are equal, else 0.0 (an empty
    response is always wrong)."""
    r = canonical(response)
    return 1.0 if r and r == canonical(answer) else 0.0


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference answer.

    ``key`` identifies the prompt across runs (``"<domain>:<prompt>"`` for generated ones);
    ``answer`` is canonical; ``extra`` holds source-specific data (chat messages, ...),
    ignored by equality and hashing.
    """

    key: str
    domain: str
    prompt: str
    answer: str
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


def _prompts(items: Iterable[Problem | str]) -> set[str]:
    return {p.prompt if isinstance(p, Problem) else str(p) for p in items}


@dataclass(frozen=True)
class Draw:
    """Distinct problems collected from a generator stream (in stream order), with per task
    type the ``draws`` (repeats included) and the ``kept`` new prompts."""

    problems: list[Problem]
    draws: dict[str, int]
    kept: dict[str, int]

    def keep_rate(self, task_type: str | None = None) -> float:
        """Kept / drawn for ``task_type`` (``None``: all types); 1.0 before any draw."""
        if task_type is None:
            n, k = sum(self.draws.values()), sum(self.kept.values())
        else:
            n, k = self.draws.get(task_type, 0), self.kept.get(task_type, 0)
        return k / n if n else 1.0

    def saturated_types(self, factor: float = 0.9, min_repeats: int = 5) -> list[tuple[str, float]]:
        """Task types whose prompts ran short: (type, keep rate), lowest rate first; a type
        is saturated when its keep rate is below ``factor`` times the overall one and it
        repeated a prompt at least ``min_repeats`` times."""
        overall = self.keep_rate()
        out = [
            (t, self.keep_rate(t))
            for t in self.draws
            if self.draws[t] - self.kept.get(t, 0) >= min_repeats
            and self.keep_rate(t) < factor * overall
        ]
        return sorted(out, key=lambda tr: (tr[1], tr[0]))


class Domain(ABC):
    """One task family: a deterministic generator, an exact 0/1 verifier and a character set.

    Subclasses set ``name``, ``LEVELS`` (level number -> knob values) and ``DEFAULT_LEVEL``,
    implement `sample`, `charset`, and call `resolve` in ``__init__``; one whose prompts come
    in distinct kinds overrides `task_type`.
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
        """Knob values of ``level`` with the non-``None`` ``overrides`` applied, also stored
        (plus ``level``) in ``self.settings``; ConfigError for an unknown level."""
        lvl = self.DEFAULT_LEVEL if level is None else level
        if lvl not in self.LEVELS:
            raise ConfigError(
                f"{self.name}: unknown difficulty level {lvl!r}; "
                f"valid levels: {sorted(self.LEVELS)}"
            )
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

    def task_type(self, prompt: str) -> str:
        """The kind of problem ``prompt`` is (default: the domain's name); `build_taskset`
        checks that no kind runs out of distinct prompts before the others."""
        return self.name

    def make(self, prompt: str, answer: str, **extra: Any) -> Problem:
        """A `Problem` of this domain with the standard key ``"<name>:<prompt>"``."""
        return Problem(f"{self.name}:{prompt}", self.name, prompt, answer, extra)

    def stream(self, seed: int, n: int) -> Iterator[tuple[str, str] | tuple[str, str, dict]]:
        """The deterministic generator stream of ``seed``: ``(prompt, answer[, extra])``
        draws, prompts possibly repeating (``n``: the distinct problems wanted; the default
        stream is endless)."""
        rng = random.Random(f"{self.name}:{seed}")
        return (self.sample(rng) for _ in itertools.count())

    def generate(
        self, n: int, seed: int, *, exclude: Iterable[Problem | str] = (), allow_fewer: bool = False
    ) -> list[Problem]:
        """``n`` problems with distinct prompts (not in ``exclude``), deterministic given
        ``seed`` and the settings; the first ``k`` are those of ``generate(k, seed)``.

        Raises:
            ConfigError: too few distinct prompts for ``n`` (unless ``allow_fewer``).
        """
        return self.draw(n, seed, exclude=exclude, allow_fewer=allow_fewer).problems

    def draw(
        self, n: int, seed: int, *, exclude: Iterable[Problem | str] = (), allow_fewer: bool = False
    ) -> Draw:
        """`generate`, with the per-type tallies of the draws it took (see `Draw`); drawing
        an excluded prompt counts as a repeat, and ``MAX_MISSES`` repeats in a row stop it."""
        seen = _prompts(exclude)
        out: list[Problem] = []
        draws: dict[str, int] = {}
        kept: dict[str, int] = {}
        misses = 0
        budget = self.ATTEMPTS_PER_PROBLEM * n + 1000 if n > 0 else 0
        for prompt, answer, *extra in itertools.islice(self.stream(seed, n), budget):
            kind = self.task_type(prompt)
            draws[kind] = draws.get(kind, 0) + 1
            if prompt in seen:
                misses += 1
                if misses >= self.MAX_MISSES:
                    break
                continue
            misses = 0
            seen.add(prompt)
            kept[kind] = kept.get(kind, 0) + 1
            out.append(self.make(prompt, answer, **(extra[0] if extra else {})))
            if len(out) >= n:
                break
        if len(out) < n and not allow_fewer:
            raise ConfigError(
                f"{self.name} ({self.settings}): found only {len(out)} distinct "
                f"prompts for n={n}; ask for fewer or raise the difficulty"
            )
        return Draw(out, draws, kept)

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
    """Instantiate the registered domain ``name`` (or ``"module:Class"``) at ``difficulty``:
    None (default level), a level number, or keyword knobs (may include ``"level"``)."""
    cls = DOMAINS.get(name)
    if difficulty is None:
        kwargs: dict[str, Any] = {}
    elif isinstance(difficulty, bool) or not isinstance(difficulty, (int, Mapping)):
        raise ConfigError(
            f"difficulty of domain {name!r} must be a level number or a mapping "
            f"of knobs, got {difficulty!r}"
        )
    elif isinstance(difficulty, int):
        kwargs = {"level": difficulty}
    else:
        kwargs = dict(difficulty)
    # the knobs are the constructor's keyword arguments: checked (types, unknown keys) by the
    # package's one config validator; each domain checks its ranges when it is built
    check(signature_schema(cls.__init__), kwargs, f"difficulty.{name}")
    return cls(**kwargs)


_SPLIT_NAMES = {"eval": "eval", "train": "training", "warm": "warm-start"}


@dataclass
class TaskSet:
    """Held-out evaluation sets, training pools and warm-start splits, per domain (in id
    order ``domains``), pairwise disjoint within a domain (ConfigError otherwise).

    ``handlers``: the `Domain` of each name (a missing one is built at its default
    difficulty); ``warm``: supervised warm-start problems, never GRPO.
    """

    domains: tuple[str, ...]
    train: dict[str, list[Problem]]
    eval: dict[str, list[Problem]]
    handlers: dict[str, Domain] = field(default_factory=dict, repr=False)
    warm: dict[str, list[Problem]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.domains = tuple(self.domains)
        splits = (("train", self.train), ("eval", self.eval), ("warm", self.warm))
        for split, pools in splits:
            extra = set(pools) - set(self.domains)
            if extra:
                raise ConfigError(
                    f"TaskSet.{split} has domains {sorted(extra)} not in "
                    f"domains {list(self.domains)}"
                )
        self.warm = {d: list(self.warm.get(d, ())) for d in self.domains}
        for d in self.domains:
            prompts = {split: _prompts(pools.get(d, ())) for split, pools in splits}
            for a, b in (("eval", "train"), ("eval", "warm"), ("train", "warm")):
                shared = prompts[a] & prompts[b]
                if shared:
                    raise ConfigError(
                        f"TaskSet: {len(shared)} {_SPLIT_NAMES[a]} prompts of "
                        f"domain {d!r} are also {_SPLIT_NAMES[b]} prompts, "
                        f"e.g. {sorted(shared)[0]!r}"
                    )

    def handler(self, domain: str) -> Domain:
        """The `Domain` object that verifies and generates problems of ``domain``."""
        if domain not in self.handlers:
            if domain not in self.domains:
                raise UnknownNameError(
                    f"unknown domain {domain!r}."
                    f"{suggest(domain, list(self.domains))} "
                    f"Domains of this task set: {', '.join(self.domains)}"
                )
            self.handlers[domain] = make_domain(domain)
        return self.handlers[domain]

    def verify(self, problem: Problem, response: str | None) -> float:
        """Exactly 0.0 or 1.0: is ``response`` a correct answer to ``problem``?"""
        return 1.0 if self.handler(problem.domain).verify(problem, response) >= 1.0 else 0.0

    def verify_many(
        self, problems: Sequence[Problem], responses: Sequence[str | None]
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
        for pools in (self.train, self.eval, self.warm):
            for problems in pools.values():
                for p in problems:
                    chars.update(p.prompt)
                    chars.update(p.answer)
        return "".join(sorted(chars))

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per domain: pool, eval and warm sizes and the domain's settings (for logs)."""
        return {
            d: {
                "train": len(self.train.get(d, ())),
                "eval": len(self.eval.get(d, ())),
                "warm": len(self.warm.get(d, ())),
                "settings": dict(getattr(self.handlers.get(d), "settings", {})),
            }
            for d in self.domains
        }


def _per_domain(value: int | Mapping[str, int], domains: Sequence[str], what: str) -> dict:
    if isinstance(value, Mapping):
        unknown = set(value) - set(domains)
        if unknown:
            raise ConfigError(
                f"{what}: unknown domains {sorted(unknown)}; domains: {list(domains)}"
            )
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


def build_taskset(
    domains: Sequence[str | Domain] = ("math", "logic", "science"),
    train_size: int | Mapping[str, int] = 2000,
    eval_size: int | Mapping[str, int] = 200,
    seed: int = 0,
    difficulty: Mapping[str, int | Mapping[str, Any]] | None = None,
    *,
    eval_seed: int | None = None,
    warm_size: int | Mapping[str, int] = 0,
) -> TaskSet:
    """Draw one de-duplicated prompt stream per domain and split it at random.

    Per domain, the first ``eval_size + train_size + warm_size`` distinct prompts of the
    stream of ``seed`` are shuffled (``eval_seed``) and cut into eval, train and warm, in that
    order; so the evaluation set depends on both seeds, the settings and all three sizes.

    Args:
        domains: registered domain names (or `Domain` objects), in id order.
        train_size: training pool size, for all domains or per domain.
        eval_size: evaluation set size, for all domains or per domain.
        seed: seed of the generator stream (which prompts are drawn).
        difficulty: per domain name, a level number or a mapping of knobs (see `make_domain`).
        eval_seed: seed of the shuffle that assigns drawn prompts to the splits; ``None``
            uses ``seed``.
        warm_size: warm-start split size, for all domains or per domain (0: none).

    Raises:
        ConfigError: duplicate or unknown domains, unknown difficulty keys, bad sizes, too few
            distinct prompts, or a task type that runs out of them before the others.
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
            raise ConfigError(
                f"difficulty: unknown domain {key!r}.{suggest(key, list(names))} "
                f"Domains: {', '.join(names)}"
            )
    for name in names:
        if handlers[name] is None:
            handlers[name] = make_domain(name, difficulty.get(name))
        elif name in difficulty:
            raise ConfigError(
                f"difficulty.{name}: domain {name!r} was given as an object; "
                f"set its difficulty when constructing it"
            )
    train_n = _per_domain(train_size, names, "train_size")
    eval_n = _per_domain(eval_size, names, "eval_size")
    warm_n = _per_domain(warm_size, names, "warm_size")
    eseed = seed if eval_seed is None else eval_seed
    train, evals, warm = {}, {}, {}
    for name, h in handlers.items():
        e, t, w = eval_n[name], train_n[name], warm_n[name]
        problems = _draw_checked(h, e + t + w, seed)
        random.Random(f"split:{name}:{eseed}").shuffle(problems)
        evals[name], train[name], warm[name] = (
            problems[:e],
            problems[e : e + t],
            problems[e + t :],
        )
    return TaskSet(names, train, evals, handlers, warm)


def _draw_checked(domain: Domain, n: int, seed: int) -> list[Problem]:
    """``n`` distinct problems of ``domain``'s stream, or an error naming what ran short."""
    drawn = domain.draw(n, seed, allow_fewer=True)
    saturated = drawn.saturated_types()
    if saturated:
        kind, rate = saturated[0]
        repeats = drawn.draws[kind] - drawn.kept.get(kind, 0)
        others = "".join(f"; also {t!r} ({r:.1%})" for t, r in saturated[1:])
        raise ConfigError(
            f"{domain.name} ({domain.settings}): task type {kind!r} keeps only {rate:.1%} of "
            f"its draws as new prompts ({repeats} repeats in {drawn.draws[kind]} draws; all "
            f"types: {drawn.keep_rate():.1%}{others}); the level has too few distinct prompts "
            f"of type {kind!r} for eval+train+warm = {n}, so the splits would under-represent "
            f"it. Lower the sizes or raise the difficulty"
        )
    if len(drawn.problems) < n:
        raise ConfigError(
            f"{domain.name} ({domain.settings}): found only "
            f"{len(drawn.problems)} distinct prompts for eval+train+warm = {n}; "
            f"lower the sizes or raise the difficulty"
        )
    return drawn.problems
