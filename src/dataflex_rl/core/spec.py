"""Strict strategy specs: YAML/dict -> validated, fully expanded `StrategySpec`.

A strategy file::

    name: difffilter_plus_ucb
    # drop groups that are all-correct or all-wrong
    select:  {preset: difffilter}
    # sample lagging domains more often, re-decided every 5 steps after 5 warm-up steps
    mix:     {preset: dump_ucb, warmup_steps: 5, every: 5}

Each mechanism section is a preset name, or a mapping with an optional ``preset`` (expanded
first, then overridden key by key), a ``scorer`` and an ``actuator`` (a name, or a mapping with
``name`` plus hyperparameters), the schedule (``warmup_steps``, ``every``) and the mechanism's
options. Unknown keys, names, wrong types and out-of-range values raise `ConfigError` naming
the key.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from dataflex_rl.core.base import MECHANISM_REGISTRIES, SCORERS, Scorer
from dataflex_rl.core.component import Component, check_value
from dataflex_rl.core.preset import PRESETS
from dataflex_rl.core.registry import ConfigError, suggest

MECHANISMS = tuple(MECHANISM_REGISTRIES)   # select, reweight, mix, prerollout

#: options of each mechanism: name -> (annotation, default, range metadata, doc)
COMMON_OPTIONS: dict[str, tuple[Any, Any, dict, str]] = {
    "warmup_steps": (int, 0, {"ge": 0}, "steps before the mechanism first acts"),
    "every": (int, 1, {"ge": 1}, "act on every N-th step after warm-up"),
}
MECHANISM_OPTIONS: dict[str, dict[str, tuple[Any, Any, dict, str]]] = {
    "select": {
        "recompute_advantages": (bool | None, None, {},
                                 "re-centre GRPO advantages on the kept subset of each group "
                                 "(null: the selector's paper default)"),
        "renormalize": (bool | None, None, {},
                        "average the loss over kept tokens only (null: paper default)"),
    },
    "reweight": {
        "normalize": (str, "informative", {"choices": ("informative", "active")},
                      "set over which weights have mean 1: informative (non-zero advantage) "
                      "or every active response"),
    },
    "mix": {
        "prior": (list[float] | dict[str, float] | None, None, {"ge": 0.0},
                  "proportions before warm-up (default uniform)"),
    },
    "prerollout": {
        "history_size": (int, 4, {"ge": 1}, "group outcomes remembered per prompt"),
    },
}
ALIASES = {"mix": {"update_every": "every"}}


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
class StrategySpec:
    """A whole strategy: any subset of the four mechanisms."""

    name: str = "baseline"
    description: str = ""
    select: MechanismSpec | None = None
    reweight: MechanismSpec | None = None
    mix: MechanismSpec | None = None
    prerollout: MechanismSpec | None = None

    def mechanisms(self) -> dict[str, MechanismSpec]:
        """The enabled mechanisms, in step order."""
        order = ("prerollout", "mix", "select", "reweight")
        return {m: getattr(self, m) for m in order if getattr(self, m) is not None}

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        for m in MECHANISMS:
            if getattr(self, m) is not None:
                out[m] = getattr(self, m).to_dict()
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
    if base is not None and isinstance(value, dict) and (
            "name" not in value or value["name"] == base.name):
        params = {**base.params, **{k: v for k, v in value.items() if k != "name"}}
        return ComponentRef(base.name, params)
    return _component_ref(value, where)


def parse_mechanism(mechanism: str, value: Any, where: str) -> MechanismSpec:
    """Validate and expand one mechanism section (presets resolved, components checked)."""
    if isinstance(value, str):
        value = {"preset": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a preset name or a mapping, "
                          f"got {type(value).__name__}")
    value = dict(value)
    for alias, canonical in ALIASES.get(mechanism, {}).items():
        if alias in value:
            if canonical in value:
                raise ConfigError(f"{where}: give either {alias!r} or {canonical!r}, not both")
            value[canonical] = value.pop(alias)
    options_schema = {**COMMON_OPTIONS, **MECHANISM_OPTIONS[mechanism]}
    valid_keys = ["preset", "scorer", "actuator", *options_schema]
    for key in value:
        if key not in valid_keys:
            raise ConfigError(f"{where}.{key}: unknown key."
                              f"{suggest(str(key), [*valid_keys, *ALIASES.get(mechanism, {})])} "
                              f"Valid keys of {mechanism}: {', '.join(valid_keys)}")
    preset_name = value.get("preset")
    base: MechanismSpec | None = None
    if preset_name is not None:
        if not isinstance(preset_name, str):
            raise ConfigError(f"{where}.preset: expected str, got {type(preset_name).__name__}")
        base = parse_mechanism(mechanism, PRESETS.section(preset_name, mechanism,
                                                          f"{where}.preset"), where)
    scorer = base.scorer if base else None
    if "scorer" in value:
        scorer = None if value["scorer"] is None else _merge_ref(scorer, value["scorer"],
                                                                  f"{where}.scorer")
    if "actuator" in value:
        actuator = _merge_ref(base.actuator if base else None, value["actuator"],
                              f"{where}.actuator")
    elif base is not None:
        actuator = base.actuator
    else:
        raise ConfigError(f"{where}: needs an 'actuator' (or a 'preset'). "
                          f"Presets for {mechanism}: "
                          f"{', '.join(PRESETS.with_section(mechanism))}")
    options = dict(base.options) if base else {k: v[1] for k, v in options_schema.items()}
    for key, (tp, _default, meta, _doc) in options_schema.items():
        if key in value:
            check_value(value[key], tp, meta, f"{where}.{key}")
            options[key] = copy.deepcopy(value[key])
    spec = MechanismSpec(mechanism, actuator, scorer, options, preset_name or (
        base.preset if base else None))
    resolve_mechanism(spec, where)   # validates names, params and the scorer's fit
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
                f"{', '.join(sorted(accepts))}-level scores")
    elif needs_signal:
        raise ConfigError(f"{where}: actuator {spec.actuator.name!r} needs a 'scorer'")
    return scorer, actuator


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
            raise ConfigError(f"{where}: unknown strategy preset {value!r}."
                              f"{suggest(value, list(PRESETS))} Presets: {', '.join(PRESETS)}; "
                              f"or a path to a .yaml strategy file")
        preset = PRESETS[value]
        return parse_strategy({"name": value, "description": preset.description,
                               **copy.deepcopy(preset.spec)}, where=f"{where}({value})")
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a preset name, a YAML path or a mapping, "
                          f"got {type(value).__name__}")
    valid = ["name", "description", *MECHANISMS]
    for key in value:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: unknown key.{suggest(str(key), valid)} "
                              f"Valid keys: {', '.join(valid)}")
    name = value.get("name", "custom")
    description = value.get("description", "")
    for key, v in (("name", name), ("description", description)):
        if not isinstance(v, str):
            raise ConfigError(f"{where}.{key}: expected str, got {type(v).__name__}")
    parts = {m: parse_mechanism(m, value[m], f"{where}.{m}")
             for m in MECHANISMS if value.get(m) is not None}
    return StrategySpec(name=name, description=description, **parts)


def get_path(tree: Any, dotted: str, default: Any = None) -> Any:
    """``tree["a"]["b"]`` for ``dotted`` "a.b" (mappings only); ``default`` where a part is missing."""
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with a clear error when it is missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML ({e})") from e
