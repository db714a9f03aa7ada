"""Interfaces of scorers and actuators, and the registries that hold them (docs/extending.md).

A score is [B, T] (``token``), [B] (``response``), [G] (``group``) or [D] (``domain``, from a
stateful scorer); a strategy whose scorer's granularity its actuator does not `accepts` is
rejected when built. The registries import the built-in packages on their first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.component import Component
from dataflex_rl.core.config import param
from dataflex_rl.core.history import Outcomes, PromptHistory
from dataflex_rl.core.registry import Registry


@dataclass
class Scorer(Component):
    """Signals -> one score per token, response, group or domain."""

    kind: ClassVar[str] = "scorer"
    granularity: ClassVar[str] = "response"
    #: optional `RolloutBatch` fields this scorer reads ("advantages", "old_log_probs", ...)
    requires: ClassVar[tuple[str, ...]] = ()
    group_based: ClassVar[bool] = False

    def score(self, batch: RolloutBatch) -> Tensor:
        """Score every unit of the batch; inactive rows may hold any finite value."""
        raise NotImplementedError


def expected_score_shape(granularity: str, batch: RolloutBatch) -> tuple[int, ...]:
    """The shape a score of ``granularity`` must have for ``batch``."""
    B = batch.batch_size
    return {
        "token": (B, int(batch.response_mask.shape[1])),
        "response": (B,),
        "group": (batch.num_groups,),
        "domain": (batch.num_domains,),
    }[granularity]


def checked_scores(scorer: Scorer, batch: RolloutBatch) -> Tensor:
    """``scorer.score(batch)``, refused with an error naming the scorer and the expected shape
    when it is not a tensor of its granularity's shape ([B, T], [B], [G] or [D])."""
    scores = scorer.score(batch)
    check_score_shape(
        scorer, scores, expected_score_shape(scorer.granularity, batch), "score(batch)"
    )
    return scores


def check_score_shape(scorer: Scorer, scores, expected: tuple[int, ...], call: str) -> None:
    """Raise `TypeError` unless ``scores`` is a tensor, `ValueError` unless it has shape
    ``expected`` and a real dtype."""
    name = type(scorer).__qualname__
    dims = {"token": "[B, T]", "response": "[B]", "group": "[G]", "domain": "[D]"}
    want = f"{dims.get(scorer.granularity, '?')} = {tuple(expected)}"
    if not isinstance(scores, Tensor):
        raise TypeError(
            f"scorer {name}.{call} must return a torch.Tensor of shape {want} "
            f"({scorer.granularity}-level scores), got {type(scores).__name__}"
        )
    if tuple(scores.shape) != tuple(expected):
        raise ValueError(
            f"scorer {name}.{call} returned shape {tuple(scores.shape)}; "
            f"{scorer.granularity}-level scores must have shape {want}"
        )
    if not (scores.is_floating_point() or scores.dtype in (torch.bool, torch.int64, torch.int32)):
        raise ValueError(
            f"scorer {name}.{call} returned dtype {scores.dtype}; scores must be real numbers"
        )


@dataclass
class DomainScorer(Scorer):
    """A per-domain signal accumulated over a window of **steps** (stateful)."""

    granularity: ClassVar[str] = "domain"

    def observe(self, batch: RolloutBatch) -> None:
        """Record this step's batch."""
        raise NotImplementedError

    def values(self, num_domains: int) -> tuple[Tensor, Tensor]:
        """([D] float signal, [D] bool: the domain has data in the window)."""
        raise NotImplementedError

    def score(self, batch: RolloutBatch) -> Tensor:
        return self.values(batch.num_domains)[0]


@dataclass
class Selector(Component):
    """Scores -> keep mask over responses (section ``select``) or, at ``level`` token, over
    the tokens of the responses ``select`` kept (section ``tokens``)."""

    kind: ClassVar[str] = "selector"
    default_scorer: ClassVar[str | None] = None
    accepts: ClassVar[frozenset[str]] = frozenset({"response", "group"})
    #: "response" -> a [B] keep mask; "token" -> a [B, T] keep mask over tokens (a response
    #: with no kept token is dropped)
    level: ClassVar[str] = "response"
    group_based: ClassVar[bool] = False
    #: whether a response's keep depends on its own score alone (fed a group-level score, the
    #: selector then keeps or drops whole groups, each from its own outcomes: refilling
    #: replaces what it drops)
    elementwise: ClassVar[bool] = False
    #: paper defaults of the selection options, overridable in the spec
    recompute_advantages_default: ClassVar[bool] = False
    renormalize_default: ClassVar[bool] = True
    #: optional `RolloutBatch` fields the selector itself reads (beside its scorer's)
    requires: ClassVar[tuple[str, ...]] = ()

    def select(self, scores: Tensor, batch: RolloutBatch) -> Tensor:
        """The keep mask at ``level``: [B] bool, or [B, T] bool for a token-level selector.
        Inactive rows (and padding tokens) are dropped afterwards whatever this returns."""
        raise NotImplementedError


@dataclass
class Reweighter(Component):
    """Scores -> non-negative raw weights; the strategy normalizes them to mean 1."""

    kind: ClassVar[str] = "reweighter"
    default_scorer: ClassVar[str | None] = None
    accepts: ClassVar[frozenset[str]] = frozenset({"response", "group"})
    #: "response" -> [B] weights; "token" -> [B, T] weights
    level: ClassVar[str] = "response"
    group_based: ClassVar[bool] = False
    #: whether the strategy normalizes the raw weights to mean 1 (False: they are applied as
    #: they are, on every kept row; ``maxrl``'s weights turn each advantage into another)
    normalized: ClassVar[bool] = True
    #: optional `RolloutBatch` fields the reweighter itself reads (beside its scorer's)
    requires: ClassVar[tuple[str, ...]] = ()

    def raw_weights(self, scores: Tensor, batch: RolloutBatch, norm_mask: Tensor) -> Tensor:
        """Raw weights at ``level``: [B] for ``response``, [B, T] for ``token``; finite and
        >= 0 on the rows (tokens) that count, anything elsewhere (the strategy masks them).
        ``norm_mask`` [B] marks the normalization set. Normalization to mean 1 is the
        strategy's (`dataflex_rl.core.strategy.normalized_weights`)."""
        raise NotImplementedError


@dataclass
class Mixer(Component):
    """A per-domain signal -> domain proportions (before the floor is applied)."""

    kind: ClassVar[str] = "mixer"
    default_scorer: ClassVar[str | None] = None
    accepts: ClassVar[frozenset[str]] = frozenset({"domain"})
    #: whether a domain scorer must feed it (``static`` needs none)
    needs_signal: ClassVar[bool] = True
    floor: float = param(
        0.05,
        "minimum proportion of every domain, still true after "
        "renormalization (D * floor must be <= 1)",
        ge=0.0,
        lt=1.0,
    )

    def initial(self, prior: Tensor, domains: tuple[str, ...]) -> Tensor:
        """[D] proportions before the first update (default: the prior)."""
        return prior

    def raw_proportions(
        self, values: Tensor | None, observed: Tensor | None, drawn: Tensor, prior: Tensor
    ) -> Tensor:
        """[D] non-negative scores summing to 1 (the floor is mixed in by the strategy).

        Args:
            values: [D] the signal (None when ``needs_signal`` is False).
            observed: [D] bool, the domain has data in the signal's window.
            drawn: [D] int64 responses drawn from each domain so far.
            prior: [D] the proportions before the first update.
        """
        raise NotImplementedError


@dataclass
class SkipPolicy(Component):
    """Prompt history -> which candidate prompts to generate (the pre-rollout actuator)."""

    kind: ClassVar[str] = "skip policy"
    needs_signal: ClassVar[bool] = False
    #: whether it reads the policy's prompt representation (`feature_layer` not None): a
    #: host must be able to compute one (the engine and TRL can, verl cannot)
    reads_features: ClassVar[bool] = False

    @property
    def feature_layer(self) -> int | None:
        """The prompt representation the policy reads (None: none; k: the policy model's
        hidden states after k layers, mean-pooled over the prompt's tokens, 0 being its
        token embeddings). A host passes it to `filter` as ``features``."""
        return None

    def filter(
        self,
        history: PromptHistory,
        keys: list,
        step: int,
        generator: torch.Generator | None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        """([N] bool keep, metrics) for candidate prompts ``keys`` (``features``: [N, H] their
        representations, when `feature_layer` asks for one)."""
        raise NotImplementedError

    def audit_mask(
        self, skip: Tensor, plain: Tensor, generator: torch.Generator | None
    ) -> Tensor | None:
        """[N] bool: skipped candidates (``skip``) generated anyway but not trained on, to
        measure the false-skip rate (None: no audit, and no randomness drawn). ``plain``: [N]
        bool the candidates of the plain batch (those generated had nothing been skipped)."""
        return None

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        """Adapt to this step's outcomes (before ``history`` records them)."""

    def observe_audit(self, batch: RolloutBatch, history: PromptHistory) -> None:
        """Learn from the outcomes of audited prompts (skipped, generated, not trained on;
        before ``history`` records them); called before `observe` of the same step."""


@dataclass
class Curriculum(Component):
    """Prompt history -> how likely each prompt of a domain is to be drawn (the curriculum
    actuator): the intake draws each domain's quota (the mix's count, unchanged) without
    replacement with probabilities proportional to ``exp(log_weights)`` over the domain's pool.
    A prompt's weight reads its own remembered outcomes only (every prompt never seen weighs
    the same: the intake computes it once for them all).
    """

    kind: ClassVar[str] = "curriculum"
    needs_signal: ClassVar[bool] = False

    def pass_rate(self, outcomes: Outcomes) -> Tensor:
        """[N] float64 estimated pass rate of N prompts from their remembered ``outcomes``
        (a prompt never seen: the component's prior)."""
        raise NotImplementedError

    def target_at(self, step: int) -> float:
        """The pass rate the draw of step ``step`` aims at."""
        raise NotImplementedError

    def log_weights(self, pass_rate: Tensor, step: int) -> Tensor:
        """[N] float64 finite log-weights of prompts with estimated ``pass_rate`` [N] at
        ``step`` (only differences within a domain matter)."""
        raise NotImplementedError


#: the built-in components register themselves from these packages on a registry's first use
_BUILTINS = (
    "dataflex_rl.scorers",
    "dataflex_rl.select",
    "dataflex_rl.reweight",
    "dataflex_rl.mix",
    "dataflex_rl.prerollout",
    "dataflex_rl.curriculum",
)
SCORERS: Registry[type[Scorer]] = Registry("scorer", Scorer, _BUILTINS)
SELECTORS: Registry[type[Selector]] = Registry("selector", Selector, _BUILTINS)
REWEIGHTERS: Registry[type[Reweighter]] = Registry("reweighter", Reweighter, _BUILTINS)
MIXERS: Registry[type[Mixer]] = Registry("mixer", Mixer, _BUILTINS)
SKIP_POLICIES: Registry[type[SkipPolicy]] = Registry("skip policy", SkipPolicy, _BUILTINS)
CURRICULA: Registry[type[Curriculum]] = Registry("curriculum", Curriculum, _BUILTINS)

#: mechanism name (a strategy section) -> the registry of its actuators; ``select`` takes
#: the selectors of level response, ``tokens`` those of level token
MECHANISM_REGISTRIES: dict[str, Registry] = {
    "select": SELECTORS,
    "tokens": SELECTORS,
    "reweight": REWEIGHTERS,
    "mix": MIXERS,
    "prerollout": SKIP_POLICIES,
    "curriculum": CURRICULA,
}
#: component kind -> its registry: the scorers and every mechanism's actuators
REGISTRIES: dict[str, Registry] = {
    reg.kind: reg for reg in (SCORERS, *MECHANISM_REGISTRIES.values())
}
