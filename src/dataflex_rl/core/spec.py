"""Strict strategy specs: YAML/dict -> validated, fully expanded `StrategySpec` (the file
format: docs/config.md). Unknown keys, names, wrong types and out-of-range values raise
`ConfigError` naming the key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import yaml

from dataflex_rl.core.base import MECHANISM_REGISTRIES, SCORERS, Scorer
from dataflex_rl.core.component import Component
from dataflex_rl.core.config import key_path, param, validate
from dataflex_rl.core.preset import PRESETS
from dataflex_rl.core.registry import ConfigError, suggest

MECHANISMS = tuple(MECHANISM_REGISTRIES)  # select, tokens, reweight, mix, prerollout, curriculum
#: group outcomes remembered per prompt when no section sets ``history_size``
HISTORY_SIZE = 4


@dataclass
class MechanismOptions:
    """Keys of every mechanism section: what to build, and when it acts."""

    #: other names of keys (alias -> key)
    aliases: ClassVar[Mapping[str, str]] = MappingProxyType({})
    preset: str | None = param(
        None, "preset whose section is expanded first, then overridden key by key"
    )
    scorer: str | dict | None = param(
        None, "scorer name, or a mapping with 'name' and its parameters (null: none)"
    )
    actuator: str | dict | None = param(
        None, "actuator name, or a mapping with 'name' and its parameters"
    )
    warmup_steps: int = param(0, "steps before the mechanism first acts", ge=0)
    every: int = param(1, "act on every N-th step after warm-up", ge=1)


@dataclass
class SelectOptions(MechanismOptions):
    """The ``select`` section."""

    recompute_advantages: bool | None = param(
        None,
        "re-centre GRPO advantages on the kept subset of each group (null: the "
        "selector's paper default)",
    )
    renormalize: bool | None = param(
        None, "average the loss over kept tokens only (null: paper default)"
    )


@dataclass
class TokensOptions(MechanismOptions):
    """The ``tokens`` section: which tokens of the responses ``select`` kept take part (a
    token-level selector, e.g. ``top_tokens``)."""

    renormalize: bool | None = param(
        None,
        "average the loss over the kept tokens only, whatever select.renormalize (false: the "
        "tokens not kept stay in the denominator with weight 0; null: the selector's paper "
        "default)",
    )


@dataclass
class ReweightOptions(MechanismOptions):
    """The ``reweight`` section."""

    normalize: str = param(
        "informative",
        "set over which weights have mean 1: informative "
        "(non-zero advantage) or every active response",
        choices=("informative", "active"),
    )


@dataclass
class MixOptions(MechanismOptions):
    """The ``mix`` section (``update_every`` is another name of ``every``)."""

    aliases: ClassVar[Mapping[str, str]] = MappingProxyType({"update_every": "every"})
    prior: list[float] | dict[str, float] | None = param(
        None, "proportions before warm-up (default uniform)", ge=0.0
    )


@dataclass
class PrerolloutOptions(MechanismOptions):
    """The ``prerollout`` section."""

    history_size: int = param(4, "group outcomes remembered per prompt", ge=1)


@dataclass
class CurriculumOptions(MechanismOptions):
    """The ``curriculum`` section: which prompts of each domain the intake draws (the mix's
    per-domain counts are unchanged), from the prompt history; before warm-up and on the
    steps that are not due the intake draws as without it."""

    history_size: int | None = param(
        None,
        "group outcomes remembered per prompt (null: prerollout's history_size, else 4; the "
        "two sections share one prompt history, so both set must agree)",
        ge=1,
    )


@dataclass
class RefillOptions:
    """The ``refill`` section: dynamic sampling (DAPO). After generation and scoring, the
    groups the selector drops are replaced by newly drawn prompts (through the intake: the
    mix proportions and the pre-rollout skip policy apply), generated and scored, until the
    step holds ``prompts_per_step`` kept groups or ``max_rounds`` refill rounds ran (the step
    then trains on what it has). Needs a selector that keeps or drops each group as a whole
    from that group's own outcomes."""

    max_rounds: int = param(
        4, "refill rounds at most after the step's first generation (>= 1)", ge=1
    )
    overdraw: bool = param(
        False,
        "draw the expected count that fills the step (missing groups / the share of the "
        "step's groups kept so far, at most prompts_per_step) instead of exactly the missing "
        "ones; groups past the step's last needed one are generated, not trained on",
    )


#: the modes of the ``rollouts`` section and the keys only each reads
ROLLOUT_MODES = {
    "until_signal": ("max_rounds",),
    "allocate": ("min_responses", "max_responses", "value", "prior_weight"),
    "sequential": ("first", "per_round", "max_rounds"),
}


@dataclass
class RolloutsOptions:
    """The ``rollouts`` section: per-prompt rollout budgets, how many responses each prompt
    gets within the step (docs/concepts.md#per-prompt-rollout-budgets).

    ``until_signal`` (Reinforce-Ada): after the step's first generation (G responses per
    prompt, the host's group size), each prompt whose responses all score alike is sampled
    again, G more per round, until its responses hold two outcomes or ``max_rounds`` ran;
    the update trains on a balanced subset of G responses per prompt. ``allocate`` (Knapsack
    RL): the step's G x prompts responses are shared among its prompts before generation,
    each getting between ``min_responses`` and ``max_responses``, by the greedy knapsack on
    each prompt's estimated pass rate; groups of uneven size, baselines per group.
    ``sequential`` (adaptive rollout within the step's budget): every prompt first gets
    ``first`` responses, then each round gives ``per_round`` more to every prompt whose
    responses all score alike (fewest responses first) until the step's G x prompts
    responses are spent or ``max_rounds`` ran; the update trains on every response (groups
    of uneven size, baselines per group)."""

    mode: str = param(
        "until_signal",
        "until_signal (sample until a group has two outcomes, train on a balanced G), "
        "allocate (share the step's responses among its prompts by estimated value) or "
        "sequential (a few responses each, then more to prompts without signal, within the "
        "step's responses)",
        choices=tuple(ROLLOUT_MODES),
    )
    max_rounds: int = param(
        3,
        "until_signal: extra rounds of G responses a prompt gets at most; sequential: rounds "
        "after the first (>= 1)",
        ge=1,
    )
    first: int = param(
        2,
        "sequential: responses every prompt gets first (>= 2: a group with two outcomes "
        "has a baseline; at most the group size G)",
        ge=2,
    )
    per_round: int = param(
        2, "sequential: more responses a prompt without signal gets per round", ge=1
    )
    min_responses: int = param(
        2, "allocate: fewest responses a prompt gets (>= 2: each group has a baseline)", ge=2
    )
    max_responses: int = param(32, "allocate: most responses a prompt gets", ge=2, le=100_000)
    value: str = param(
        "knapsack",
        "allocate: what a prompt's n responses are worth, from its pass rate p: signal "
        "(1 - p^n - (1-p)^n, the chance of two outcomes) or knapsack (that x p(1-p)^2)",
        choices=("signal", "knapsack"),
    )
    prior_weight: float = param(
        4.0,
        "allocate: pseudo-responses at its domain's pass rate added to a prompt's own "
        "remembered responses (a prompt never seen: its domain's rate)",
        ge=0.0,
        le=1e6,
    )


@dataclass
class AdmissionOptions:
    """The ``admission`` section: which queued groups enter the update under asynchronous
    training (docs/admission.md). A group is past its limit when its staleness (updates
    since the policy that generated it) exceeds ``max_staleness`` (one number, or one per
    domain); ``past: drop`` drops it and draws its prompt again, ``past: pace`` trains on it
    first and stops drawing its domain until the domain's queue is back within the limit
    (the domain's share is owed and made up once it is drawn again).

    Where it acts: the embedded engine with ``asynchronous.staleness`` >= 1 (everything
    above), and verl's asynchronous modes (``trainer.v1.trainer_mode`` =
    ``dataflex_colocate_async`` / ``dataflex_separate_async``), where ``past: drop`` with one
    limit is verl's own eviction of stale groups (``max_off_policy_threshold`` =
    ``max_staleness`` + 1; the evicted prompt is replaced by a new draw) and ``pace`` or
    per-domain limits are refused (docs/hosts/verl.md#asynchronous-modes). Refused where
    nothing waits: the engine with staleness 0, verl's sync mode, TRL."""

    max_staleness: int | dict[str, int] = param(
        2,
        "updates a group may lag the policy it is trained by: a number, or a mapping domain "
        "-> number (every domain named)",
        ge=0,
    )
    past: str = param(
        "drop",
        "a group past its limit: drop (not trained on; its prompt drawn again) or pace "
        "(trained on first; its domain not drawn until its queue is within the limit)",
        choices=("drop", "pace"),
    )


_SECTION = "a preset name or a mapping"


@dataclass
class StrategyFile:
    """The top level of a strategy file: any subset of the six mechanisms, and refilling."""

    name: str = param("custom", "strategy name (labels its runs and outputs)")
    description: str = param("", "one line on what the strategy does")
    select: str | dict | None = param(None, "which responses take part", expect=_SECTION)
    tokens: str | dict | None = param(
        None, "which tokens of the kept responses take part", expect=_SECTION
    )
    reweight: str | dict | None = param(
        None, "how much each response or token counts", expect=_SECTION
    )
    mix: str | dict | None = param(
        None, "which domains the next batches come from", expect=_SECTION
    )
    prerollout: str | dict | None = param(
        None, "which candidate prompts are generated", expect=_SECTION
    )
    curriculum: str | dict | None = param(
        None,
        "which prompts of each domain are drawn: toward a target pass rate",
        expect=_SECTION,
    )
    refill: dict | None = param(
        None,
        "dynamic sampling: replace the groups the selector drops with new draws "
        "(a mapping: max_rounds, overdraw)",
    )
    admission: dict | None = param(
        None,
        "asynchronous training: which queued groups enter the update (a mapping: "
        "max_staleness, past)",
    )
    rollouts: dict | None = param(
        None,
        "per-prompt rollout budgets: how many responses each prompt gets (a mapping: mode, "
        "and that mode's keys)",
    )


#: the declared keys of each mechanism section
SECTIONS: dict[str, type[MechanismOptions]] = {
    "select": SelectOptions,
    "tokens": TokensOptions,
    "reweight": ReweightOptions,
    "mix": MixOptions,
    "prerollout": PrerolloutOptions,
    "curriculum": CurriculumOptions,
}
#: keys of a section that are not options of the built mechanism
_WHAT = ("preset", "scorer", "actuator")


def mechanism_options(mechanism: str) -> dict[str, Any]:
    """The options of a mechanism (schedule and mechanism keys) with their defaults."""
    return {
        f.name: (f.default if f.default is not MISSING else f.default_factory())
        for f in fields(SECTIONS[mechanism])
        if f.name not in _WHAT
    }


@dataclass(frozen=True)
class ComponentRef:
    """A component by registry name (or ``module:attr``) with its hyperparameters."""

    name: str
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, **copy.deepcopy(self.params)}


@dataclass(frozen=True)
class MechanismSpec:
    """One mechanism, fully expanded."""

    mechanism: str
    actuator: ComponentRef
    scorer: ComponentRef | None = None
    options: dict = field(default_factory=dict)
    preset: str | None = None

    @property
    def warmup_steps(self) -> int:
        return self.options["warmup_steps"]

    @property
    def every(self) -> int:
        return self.options["every"]

    def to_dict(self) -> dict:
        out: dict = {}
        if self.preset:
            out["preset"] = self.preset
        if self.scorer is not None:
            out["scorer"] = self.scorer.to_dict()
        out["actuator"] = self.actuator.to_dict()
        out.update(copy.deepcopy(self.options))
        return out


@dataclass(frozen=True)
class RefillSpec:
    """The ``refill`` section, validated (`RefillOptions`)."""

    max_rounds: int = 4
    overdraw: bool = False

    def to_dict(self) -> dict:
        return {"max_rounds": self.max_rounds, "overdraw": self.overdraw}


@dataclass(frozen=True)
class RolloutsSpec:
    """The ``rollouts`` section, validated (`RolloutsOptions`; the options of its mode)."""

    mode: str = "until_signal"
    max_rounds: int = 3
    min_responses: int = 2
    max_responses: int = 32
    value: str = "knapsack"
    prior_weight: float = 4.0
    first: int = 2
    per_round: int = 2

    def to_dict(self) -> dict:
        return {"mode": self.mode, **{k: getattr(self, k) for k in ROLLOUT_MODES[self.mode]}}


@dataclass(frozen=True)
class AdmissionSpec:
    """The ``admission`` section, validated (`AdmissionOptions`)."""

    max_staleness: int | tuple[tuple[str, int], ...] = 2
    past: str = "drop"

    def limits(self, domains) -> list[int]:
        """The limit of each of ``domains`` (in order)."""
        if isinstance(self.max_staleness, int):
            return [self.max_staleness] * len(domains)
        table = dict(self.max_staleness)
        return [table[d] for d in domains]

    def to_dict(self) -> dict:
        m = self.max_staleness
        return {"max_staleness": m if isinstance(m, int) else dict(m), "past": self.past}


@dataclass(frozen=True)
class StrategySpec:
    """A whole strategy: any subset of the six mechanisms, and refilling (``refill``: the
    intake replaces the groups the selector drops; None: off)."""

    name: str = "baseline"
    description: str = ""
    select: MechanismSpec | None = None
    tokens: MechanismSpec | None = None
    reweight: MechanismSpec | None = None
    mix: MechanismSpec | None = None
    prerollout: MechanismSpec | None = None
    refill: RefillSpec | None = None
    curriculum: MechanismSpec | None = None
    rollouts: RolloutsSpec | None = None
    admission: AdmissionSpec | None = None

    def mechanisms(self) -> dict[str, MechanismSpec]:
        """The enabled mechanisms, in step order."""
        order = ("prerollout", "mix", "curriculum", "select", "tokens", "reweight")
        return {m: getattr(self, m) for m in order if getattr(self, m) is not None}

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        for m in MECHANISMS:
            if getattr(self, m) is not None:
                out[m] = getattr(self, m).to_dict()
        if self.refill is not None:
            out["refill"] = self.refill.to_dict()
        if self.rollouts is not None:
            out["rollouts"] = self.rollouts.to_dict()
        if self.admission is not None:
            out["admission"] = self.admission.to_dict()
        return out


def _component_ref(value: Any, where: str) -> ComponentRef:
    if isinstance(value, str):
        return ComponentRef(value, {})
    if isinstance(value, dict):
        if "name" not in value:
            raise ConfigError(f"{where}: a component mapping needs a 'name' key")
        if not isinstance(value["name"], str):
            raise ConfigError(f"{where}.name: expected str, got {type(value['name']).__name__}")
        params = {k: v for k, v in value.items() if k != "name"}
        return ComponentRef(value["name"], params)
    raise ConfigError(f"{where}: expected a name or a mapping, got {type(value).__name__}")


def _merge_ref(base: ComponentRef | None, value: Any, where: str) -> ComponentRef:
    """Override a preset's component: params-only mappings merge, a new name replaces."""
    if (
        base is not None
        and isinstance(value, dict)
        and ("name" not in value or value["name"] == base.name)
    ):
        params = {**base.params, **{k: v for k, v in value.items() if k != "name"}}
        return ComponentRef(base.name, params)
    return _component_ref(value, where)


def parse_mechanism(mechanism: str, value: Any, where: str) -> MechanismSpec:
    """Validate and expand one mechanism section (presets resolved, components checked)."""
    if isinstance(value, str):
        value = {"preset": value}
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: expected a preset name or a mapping, got {type(value).__name__}"
        )
    value = dict(value)
    schema = SECTIONS[mechanism]
    for alias, canonical in schema.aliases.items():
        if alias in value:
            if canonical in value:
                raise ConfigError(f"{where}: give either {alias!r} or {canonical!r}, not both")
            value[canonical] = value.pop(alias)
    section = validate(schema, value, where)
    preset_name = value.get("preset")
    base: MechanismSpec | None = None
    if preset_name is not None:
        base = parse_mechanism(
            mechanism, PRESETS.section(preset_name, mechanism, f"{where}.preset"), where
        )
    scorer = base.scorer if base else None
    if "scorer" in value:
        scorer = (
            None
            if value["scorer"] is None
            else _merge_ref(scorer, value["scorer"], f"{where}.scorer")
        )
    if "actuator" in value:
        actuator = _merge_ref(
            base.actuator if base else None, value["actuator"], f"{where}.actuator"
        )
    elif base is not None:
        actuator = base.actuator
    else:
        raise ConfigError(
            f"{where}: needs an 'actuator' (or a 'preset'). "
            f"Presets for {mechanism}: "
            f"{', '.join(PRESETS.with_section(mechanism))}"
        )
    options = dict(base.options) if base else mechanism_options(mechanism)
    for key in options:
        if key in value:
            options[key] = copy.deepcopy(getattr(section, key))
    spec = MechanismSpec(
        mechanism, actuator, scorer, options, preset_name or (base.preset if base else None)
    )
    resolve_mechanism(spec, where)  # validates names, params and the scorer's fit
    return spec


def resolve_mechanism(spec: MechanismSpec, where: str) -> tuple[Scorer | None, Component]:
    """Build a mechanism's scorer and actuator; check names, params and granularity fit."""
    act_cls = MECHANISM_REGISTRIES[spec.mechanism].get(spec.actuator.name)
    actuator = act_cls.from_config(spec.actuator.params, f"{where}.actuator")
    needs_signal = getattr(act_cls, "needs_signal", True)
    scorer_ref = spec.scorer
    if scorer_ref is None and needs_signal and getattr(act_cls, "default_scorer", None):
        scorer_ref = ComponentRef(act_cls.default_scorer, {})
    scorer = None
    if scorer_ref is not None:
        if not needs_signal:
            raise ConfigError(f"{where}.scorer: {spec.actuator.name!r} takes no scorer")
        sc_cls = SCORERS.get(scorer_ref.name)
        scorer = sc_cls.from_config(scorer_ref.params, f"{where}.scorer")
        accepts = getattr(act_cls, "accepts", frozenset())
        if sc_cls.granularity not in accepts:
            raise ConfigError(
                f"{where}: scorer {scorer_ref.name!r} gives {sc_cls.granularity}-level scores, "
                f"but {spec.mechanism} actuator {spec.actuator.name!r} accepts "
                f"{', '.join(sorted(accepts))}-level scores"
            )
    elif needs_signal:
        raise ConfigError(f"{where}: actuator {spec.actuator.name!r} needs a 'scorer'")
    _check_level(spec, act_cls, where)
    return scorer, actuator


def _check_level(spec: MechanismSpec, act_cls: type, where: str) -> None:
    """``select`` takes selectors that keep whole responses, ``tokens`` the ones that keep
    tokens (`Selector.level`)."""
    if spec.mechanism not in ("select", "tokens"):
        return
    level = getattr(act_cls, "level", "response")
    if spec.mechanism == "select" and level == "token":
        raise ConfigError(
            f"{where}.actuator: {spec.actuator.name!r} keeps tokens, not responses; put it in "
            "the strategy's 'tokens' section (e.g. tokens: {preset: high_entropy}), which "
            "acts on the responses 'select' keeps"
        )
    if spec.mechanism == "tokens" and level != "token":
        raise ConfigError(
            f"{where}.actuator: {spec.actuator.name!r} keeps whole responses, not tokens; put "
            "it in the strategy's 'select' section ('tokens' takes a token-level selector "
            "such as 'top_tokens')"
        )


def resolved_option(mspec: MechanismSpec, key: str) -> bool:
    """A mechanism option as it acts (what `Strategy` applies and hosts check against): the
    spec's value, else the actuator's ``<key>_default`` (False when it has none)."""
    value = mspec.options.get(key)
    if value is None:
        act_cls = MECHANISM_REGISTRIES[mspec.mechanism].get(mspec.actuator.name)
        value = getattr(act_cls, f"{key}_default", False)
    return bool(value)


def parse_strategy(value: Any, where: str = "strategy") -> StrategySpec:
    """Parse a strategy from a preset name, a mapping, a YAML file path or a `StrategySpec`.

    Raises:
        ConfigError: naming the key, listing valid choices.
    """
    if isinstance(value, StrategySpec):
        return value
    if isinstance(value, Path) or (isinstance(value, str) and value.endswith((".yaml", ".yml"))):
        return parse_strategy(load_yaml(value), where=str(value))
    if value is None:
        value = "baseline"
    if isinstance(value, str):
        if value not in PRESETS:
            raise ConfigError(
                f"{where}: unknown strategy preset {value!r}."
                f"{suggest(value, list(PRESETS))} Presets: {', '.join(PRESETS)}; "
                f"or a path to a .yaml strategy file"
            )
        preset = PRESETS[value]
        return parse_strategy(
            {"name": value, "description": preset.description, **copy.deepcopy(preset.spec)},
            where=f"{where}({value})",
        )
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: expected a preset name, a YAML path or a mapping, got {type(value).__name__}"
        )
    top = validate(StrategyFile, value, where)
    name, description = top.name, top.description
    parts = {
        m: parse_mechanism(m, value[m], key_path(where, m))
        for m in MECHANISMS
        if value.get(m) is not None
    }
    refill = None
    if value.get("refill") is not None:
        where_refill = key_path(where, "refill")
        options = validate(RefillOptions, value["refill"], where_refill)
        refill = RefillSpec(options.max_rounds, options.overdraw)
        check_refill_selector(parts.get("select"), where_refill)
    rollouts = None
    if value.get("rollouts") is not None:
        rollouts = parse_rollouts(value["rollouts"], key_path(where, "rollouts"))
        if refill is not None:
            raise ConfigError(
                f"{key_path(where, 'rollouts')}: per-prompt budgets and refill both decide "
                "what the step generates after its first generation (until_signal samples "
                "the prompts without signal again; refill replaces them); use one of the two"
            )
    admission = None
    if value.get("admission") is not None:
        admission = parse_admission(value["admission"], key_path(where, "admission"))
        if refill is not None or rollouts is not None:
            raise ConfigError(
                f"{key_path(where, 'admission')}: admission acts under asynchronous training, "
                "which runs neither refill nor per-prompt budgets; use one or the other"
            )
    check_absolute_reweight(parts, where)
    history_size(parts, where)
    return StrategySpec(
        name=name,
        description=description,
        refill=refill,
        rollouts=rollouts,
        admission=admission,
        **parts,
    )


def parse_admission(value: Any, where: str) -> AdmissionSpec:
    """The ``admission`` section (`AdmissionOptions`); a per-domain ``max_staleness`` needs
    an integer >= 0 for each domain it names (which domains: `Strategy` checks them)."""
    options = validate(AdmissionOptions, value, where)
    m = options.max_staleness
    if isinstance(m, dict):
        for d, v in m.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(
                    f"{key_path(where, 'max_staleness')}.{d}: expected an integer >= 0, got {v!r}"
                )
        m = tuple(sorted(m.items()))
    return AdmissionSpec(m, options.past)


def parse_rollouts(value: Any, where: str) -> RolloutsSpec:
    """The ``rollouts`` section (`RolloutsOptions`); ConfigError naming a key that the
    section's mode does not read, or ``max_responses`` below ``min_responses``."""
    options = validate(RolloutsOptions, value, where)
    mine = ROLLOUT_MODES[options.mode]
    other = sorted(
        {k for m, keys in ROLLOUT_MODES.items() for k in keys if k in value and k not in mine}
    )
    if other:
        raise ConfigError(
            f"{key_path(where, other[0])}: not read by mode {options.mode!r} (its keys: "
            f"{', '.join(['mode', *ROLLOUT_MODES[options.mode]])})"
        )
    if options.max_responses < options.min_responses:
        raise ConfigError(
            f"{key_path(where, 'max_responses')}: {options.max_responses} is below "
            f"min_responses ({options.min_responses})"
        )
    return RolloutsSpec(
        options.mode,
        options.max_rounds,
        options.min_responses,
        options.max_responses,
        options.value,
        float(options.prior_weight),
        options.first,
        options.per_round,
    )


def history_size(parts: Mapping[str, MechanismSpec | None], where: str = "strategy") -> int:
    """The size of the prompt history that ``prerollout`` and ``curriculum`` share (a
    `StrategySpec`'s ``parts`` as a mapping): the ``history_size`` they set, `HISTORY_SIZE`
    when neither does; ConfigError naming ``curriculum.history_size`` when both set it
    differently."""
    pre, cur = parts.get("prerollout"), parts.get("curriculum")
    mine = None if cur is None else cur.options.get("history_size")
    theirs = None if pre is None else pre.options["history_size"]
    if mine is not None and theirs is not None and mine != theirs:
        raise ConfigError(
            f"{key_path(where, 'curriculum')}.history_size: {mine}, but "
            f"prerollout.history_size is {theirs} (its default: 4); the two sections read "
            "one prompt history: give them the same value"
        )
    return mine if mine is not None else theirs if theirs is not None else HISTORY_SIZE


def drops_whole_groups(scorer: Scorer | None, selector: Component) -> bool:
    """Whether a selector keeps or drops each prompt group as a whole, from that group's own
    outcomes: an elementwise actuator (``band``: a response's keep depends on its own score
    only) fed by a group-level scorer (``solve_rate``, ``group_std``, ...)."""
    return (
        scorer is not None
        and scorer.granularity == "group"
        and bool(getattr(selector, "elementwise", False))
    )


def check_refill_selector(select: MechanismSpec | None, where: str) -> None:
    """ConfigError unless ``select`` drops whole groups, each from its own outcomes
    (`drops_whole_groups`), as refilling needs."""
    if select is None:
        raise ConfigError(
            f"{where}: refilling replaces the groups a selector drops, but the strategy has "
            "no 'select' section; add one that drops whole groups (e.g. select: "
            "{preset: difffilter}), or use the preset 'dapo'"
        )
    scorer, selector = resolve_mechanism(select, where.rsplit(".", 1)[0] + ".select")
    if not drops_whole_groups(scorer, selector):
        level = "none" if scorer is None else scorer.granularity
        raise ConfigError(
            f"{where}: needs a selector that keeps or drops each group as a whole from its "
            f"own outcomes (a group-level scorer with an elementwise actuator such as "
            f"'band'); select has actuator {select.actuator.name!r} with a {level}-level "
            "scorer, which keeps parts of groups or ranks groups against each other"
        )


def check_absolute_reweight(parts: dict[str, MechanismSpec], where: str) -> None:
    """ConfigError when a reweighter whose weights are absolute (``normalized = False``:
    weights that turn the host's advantages into its own, such as ``maxrl``) follows a
    ``select`` that recomputes the advantages on the responses it keeps: its target is
    computed over each whole group, the recomputed advantages over the kept subset."""
    rw, select = parts.get("reweight"), parts.get("select")
    if rw is None or select is None or not resolved_option(select, "recompute_advantages"):
        return
    rw_cls = MECHANISM_REGISTRIES["reweight"].get(rw.actuator.name)
    if getattr(rw_cls, "normalized", True):
        return
    raise ConfigError(
        f"{key_path(where, 'reweight')}.actuator: {rw.actuator.name!r} rescales each "
        "response's advantage to its own value over the whole group, but select "
        f"({select.actuator.name!r}) recomputes the advantages on the responses it keeps; "
        "set select.recompute_advantages: false, or use one of the two"
    )


def strategy_label(value: Any) -> str:
    """A short name for a strategy as given (`parse_strategy`'s ``value``): the preset name,
    a YAML file's stem, or a mapping's ``name`` (``"custom"`` without one)."""
    if isinstance(value, dict):
        return str(value.get("name", "custom"))
    s = str(value)
    return Path(s).stem if s.endswith((".yaml", ".yml")) else s


def get_path(tree: Any, dotted: str, default: Any = None) -> Any:
    """``tree["a"]["b"]`` for ``dotted`` "a.b" (mappings only); ``default`` where a part is missing."""
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


#: libyaml's safe loader when PyYAML was built with it (the same documents, ~10x faster to read)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with a clear error when it is missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return yaml.load(p.read_text(), Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML ({e})") from e
