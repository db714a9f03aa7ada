"""Control arms of ``compare``: an A/A control and planted harms of known direction.

A control is an extra arm built from the experiment's baseline, with a fixed label and the
outcome it must have against the baseline ("same": not called better or worse; "worse": called
worse); `KINDS` holds them (aa, no_update, half_lr, drop_half), docs/controls.md describes each.
In the experiment file ``controls: [aa, {drop_half: {fraction: 0.5}}]`` (names, with
parameters, or a mapping name -> parameters), or ``compare EXP --control aa``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from dataflex_rl.core.config import param, validate
from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.core.spec import StrategySpec, get_path, parse_strategy
from dataflex_rl.hosts.host import HostControls

SAME, WORSE = "same", "worse"


@dataclass
class AAParams:
    """Parameters of the A/A control."""

    sampling_stream: int | None = param(
        None,
        "the arm's sampling-noise stream (default: the "
        "experiment's stream + 1); must differ from it",
        ge=0,
    )


@dataclass
class NoParams:
    """This control takes no parameters."""


@dataclass
class DropParams:
    """Parameters of the drop_half control (the selector ``random_groups``)."""

    fraction: float = param(
        0.5, "probability that an informative group is dropped each step", gt=0.0, le=1.0
    )
    salt: int = param(0, "salt of the hash that draws the dropped groups", ge=0)


@dataclass(frozen=True)
class ControlKind:
    """A built-in control: its arm's label, required outcome and how the arm's strategy is
    built (``build(baseline_spec, params, where)`` -> the arm's strategy mapping). What the arm
    changes in the host's settings is `control_overrides` of the host's `HostControls`."""

    name: str
    label: str
    outcome: str
    summary: str
    params: type
    build: Callable[[dict, Any, str], dict]


def _same(spec: dict, p: Any, where: str) -> dict:
    return spec


def _drop_half(spec: dict, p: DropParams, where: str) -> dict:
    if "select" in spec:
        raise ConfigError(
            f"{where}: the baseline already has a 'select' mechanism; the "
            "control adds one (random_groups), and a strategy has one select"
        )
    select = {
        "scorer": "reward",
        "actuator": {"name": "random_groups", "fraction": p.fraction, "salt": p.salt},
        "recompute_advantages": False,
        "renormalize": False,
    }
    return {**spec, "select": select}


KINDS: dict[str, ControlKind] = {
    k.name: k
    for k in (
        ControlKind(
            "aa",
            "aa_control",
            SAME,
            "the baseline under an independent sampling-noise stream (A/A)",
            AAParams,
            _same,
        ),
        ControlKind(
            "no_update",
            "no_update_control",
            WORSE,
            "the baseline with learning rate 0: the policy never moves",
            NoParams,
            _same,
        ),
        ControlKind(
            "half_lr",
            "half_lr_control",
            WORSE,
            "the baseline at half the experiment's learning rate",
            NoParams,
            _same,
        ),
        ControlKind(
            "drop_half",
            "drop_half_control",
            WORSE,
            "the baseline with a hashed random half of the informative groups dropped "
            "every step (selector random_groups)",
            DropParams,
            _drop_half,
        ),
    )
}


@dataclass(frozen=True)
class Control:
    """One requested control: its kind's name and validated parameters (a mapping)."""

    name: str
    params: dict

    @property
    def kind(self) -> ControlKind:
        return KINDS[self.name]

    @property
    def label(self) -> str:
        return self.kind.label

    @property
    def outcome(self) -> str:
        return self.kind.outcome

    def arm(
        self, baseline: StrategySpec, host: HostControls, settings: dict, where: str
    ) -> tuple[StrategySpec, dict]:
        """The arm's strategy spec (named by the label) and its host-settings overrides
        (`control_overrides` of the host's keys and the experiment's run settings)."""
        kind = self.kind
        params = validate(kind.params, self.params, where)
        spec = {k: v for k, v in baseline.to_dict().items() if k != "name"}
        spec = kind.build(copy.deepcopy(spec), params, where)
        spec = {
            **spec,
            "name": self.label,
            "description": f"control '{self.name}' (must be {self.outcome}): {kind.summary}",
        }
        overrides = control_overrides(self.name, asdict(params), host, settings, where)
        return parse_strategy(spec, where), overrides


def _get(settings: dict, path: str, default: Any) -> Any:
    value = get_path(settings, path)
    return default if value is None else value


def _nested(path: str, value: Any) -> dict:
    """``"a.b", v`` -> ``{"a": {"b": v}}``."""
    head, _, tail = path.partition(".")
    return {head: _nested(tail, value) if tail else value}


def control_overrides(
    name: str, params: dict, host: HostControls, settings: dict, where: str
) -> dict:
    """The host settings a control arm changes (aa: the sampling stream, no_update and
    half_lr: the learning rate; drop_half: none), given the experiment's ``settings``;
    ConfigError where the arm would repeat the baseline exactly."""
    if name == "aa":
        base = _get(settings, host.stream, host.stream_default)
        stream = params.get("sampling_stream")
        stream = base + 1 if stream is None else stream
        if stream == base:
            raise ConfigError(
                f"{where}.sampling_stream: must differ from the experiment's stream ({base}) in "
                f"{host.section}{host.stream}, or the arm repeats the baseline exactly"
            )
        return _nested(host.stream, stream)
    if name == "no_update":
        return _nested(host.lr, 0.0)
    if name == "half_lr":
        lr = _get(settings, host.lr, host.lr_default)
        if lr is None or lr == 0:
            raise ConfigError(
                f"{where}: the experiment's learning rate is 0 ({host.section}{host.lr}); "
                "half of it is no harm"
            )
        return _nested(host.lr, lr / 2)
    return {}


def _one(name: Any, params: Any, where: str) -> Control:
    if not isinstance(name, str) or name not in KINDS:
        raise ConfigError(
            f"{where}: unknown control {name!r}.{suggest(str(name), list(KINDS))} "
            f"Controls: {', '.join(KINDS)}"
        )
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise ConfigError(
            f"{where}.{name}: expected a mapping of parameters, got {type(params).__name__}"
        )
    kind = KINDS[name]
    checked = validate(kind.params, params, f"{where}.{name}")  # names the key
    valid = {f.name for f in fields(kind.params)}
    return Control(name, {k: v for k, v in asdict(checked).items() if k in valid and k in params})


def parse_controls(value: Any, where: str = "controls") -> tuple[Control, ...]:
    """Validate a ``controls`` section: a list of names / ``{name: params}``, or a mapping."""
    if value is None:
        return ()
    items: list[tuple[Any, Any, str]] = []
    if isinstance(value, dict):
        items = [(k, v, where) for k, v in value.items()]
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict):
                if len(v) != 1:
                    raise ConfigError(
                        f"{where}[{i}]: a control with parameters is a mapping "
                        f"with one key, {{name: {{param: value}}}}, got {v!r}"
                    )
                ((k, p),) = v.items()
                items.append((k, p, f"{where}[{i}]"))
            else:
                items.append((v, None, f"{where}[{i}]"))
    else:
        raise ConfigError(
            f"{where}: expected a list of control names or a mapping name -> parameters, got "
            f"{type(value).__name__}. Controls: {', '.join(KINDS)}"
        )
    out: list[Control] = []
    for name, params, at in items:
        control = _one(name, params, at)
        if any(c.name == control.name for c in out):
            raise ConfigError(f"{at}: control {control.name!r} is listed twice")
        out.append(control)
    return tuple(out)
