"""Declared, strictly checked parameters and the base class of every component.

A component is a dataclass whose fields are its hyperparameters, declared with `param`, which
records a doc line and the allowed range. Constructors only store and check hyperparameters
(no I/O, no logic); ``describe`` and the docs are generated from the same declarations.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Union

from dataflex_rl.core.registry import ConfigError, suggest


def param(default: Any, doc: str, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None,
          choices: tuple | None = None) -> Any:
    """Declare a hyperparameter field with its doc and allowed range."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        return f"{origin.__name__}[{args}]"
    return getattr(tp, "__name__", str(tp))


def type_matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` fits annotation ``tp`` (ints fit floats; bools fit only bool)."""
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(type_matches(value, a) for a in typing.get_args(tp))
    if origin is list or origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        return isinstance(value, (list, tuple)) and all(type_matches(v, item) for v in value)
    if origin is dict:
        k, v = typing.get_args(tp)
        return isinstance(value, dict) and all(
            type_matches(a, k) and type_matches(b, v) for a, b in value.items())
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def check_value(value: Any, tp: Any, meta: dict, where: str) -> None:
    """Raise `ConfigError` naming ``where`` if ``value`` has the wrong type or range."""
    if not type_matches(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {type(value).__name__} "
                          f"({value!r})")
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ConfigError(f"{where}: must be one of {', '.join(map(repr, meta['choices']))}, "
                          f"got {value!r}.{suggest(str(value), [str(c) for c in meta['choices']])}")
    nums = [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else (
        list(value.values()) if isinstance(value, dict) else
        list(value) if isinstance(value, (list, tuple)) else [])
    for v in nums:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if isinstance(v, float) and math.isnan(v):
            raise ConfigError(f"{where}: must be a number, got NaN")
        for key, ok, sym in (("ge", lambda a, b: a >= b, ">="), ("gt", lambda a, b: a > b, ">"),
                             ("le", lambda a, b: a <= b, "<="), ("lt", lambda a, b: a < b, "<")):
            bound = meta.get(key)
            if bound is not None and not ok(v, bound):
                raise ConfigError(f"{where}: must be {sym} {bound}, got {v!r}")


def describe_range(meta: dict) -> str:
    """Human text for a field's range, e.g. ``"[0, 1]"`` or ``"one of 'a', 'b'"``."""
    if meta.get("choices") is not None:
        return "one of " + ", ".join(map(repr, meta["choices"]))
    lo = f"[{meta['ge']}" if meta.get("ge") is not None else (
        f"({meta['gt']}" if meta.get("gt") is not None else "(-inf")
    hi = f"{meta['le']}]" if meta.get("le") is not None else (
        f"{meta['lt']})" if meta.get("lt") is not None else "inf)")
    return "any" if lo == "(-inf" and hi == "inf)" else f"{lo}, {hi}"


@dataclass
class Component:
    """Base of scorers, actuators and skip policies: declared, checked hyperparameters.

    Subclasses are dataclasses. Class attributes describe the component for ``describe``:
    ``paper`` (where the method comes from) and, on scorers/actuators, granularity and the
    batch fields needed.
    """

    kind: ClassVar[str] = "component"
    paper: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            check_value(getattr(self, f.name), hints[f.name], dict(f.metadata),
                        f"{type(self).__name__}.{f.name}")

    @classmethod
    def from_config(cls, cfg: dict | None, where: str) -> "Component":
        """Build from a mapping of hyperparameters; unknown keys and bad values name the key."""
        cfg = dict(cfg or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in cfg:
            if key not in fields:
                raise ConfigError(f"{where}.{key}: unknown parameter of {cls.kind} "
                                  f"{cls.__name__}.{suggest(str(key), list(fields))} "
                                  f"Valid: {', '.join(fields) or '(none)'}")
        hints = typing.get_type_hints(cls)
        for key, value in cfg.items():
            check_value(value, hints[key], dict(fields[key].metadata), f"{where}.{key}")
        try:
            return cls(**cfg)
        except ConfigError as e:  # cross-field checks say "Cls.key: ..."; name the key path
            msg = str(e)
            prefix = f"{cls.__name__}."
            raise ConfigError(f"{where}.{msg[len(prefix):]}" if msg.startswith(prefix)
                              else f"{where}: {msg}") from None

    @classmethod
    def parameters(cls) -> list[dict]:
        """One dict per hyperparameter: name, type, default, range, doc."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not MISSING else (
                f.default_factory() if f.default_factory is not MISSING else None)
            out.append({"name": f.name, "type": _type_name(hints[f.name]), "default": default,
                        "range": describe_range(dict(f.metadata)), "doc": f.metadata.get("doc", "")})
        return out

    @classmethod
    def summary(cls) -> str:
        """First line of the docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    def state_dict(self) -> dict:
        """State beyond hyperparameters (empty for stateless components)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but got state {list(state)}")
