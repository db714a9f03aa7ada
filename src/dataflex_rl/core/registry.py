"""Named registries of components, with lazy ``"module:attr"`` entries and helpful errors."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration is invalid. The message names the offending key."""


class UnknownNameError(ConfigError, KeyError):
    """A name is not registered. The message lists the valid names and close matches."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def suggest(name: str, valid: list[str]) -> str:
    """``" Did you mean 'x'?"`` for the closest valid names, or ``""``."""
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


def import_object(path: str, where: str = "") -> object:
    """Import ``"package.module:attr"`` (``attr`` may be dotted)."""
    module_name, _, attr = path.partition(":")
    prefix = f"{where}: " if where else ""
    if not module_name or not attr:
        raise ConfigError(f"{prefix}{path!r} is not of the form 'module:attr'")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{prefix}cannot import module {module_name!r} ({e})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{prefix}module {module_name!r} has no attribute {attr!r}") from None
    return obj


class Registry(Generic[T]):
    """A named collection of components of one kind.

    ``kind`` names the entries in messages; ``base``: the class every entry must subclass;
    ``builtins``: modules imported on first use to register the built-in entries. Entries are
    objects or lazy ``"module:attr"`` strings; ``get`` also takes any unregistered
    ``"module:attr"`` (a user's own component).
    """

    def __init__(self, kind: str, base: type | None = None, builtins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.base = base
        self._builtins = builtins
        self._loaded = not builtins
        self._all: dict[str, object] = {}

    @property
    def _entries(self) -> dict[str, object]:
        """The entries, the built-in ones imported first (once)."""
        if not self._loaded:
            self._loaded = True  # before importing: their registrations land here
            for module in self._builtins:
                importlib.import_module(module)
        return self._all

    def _check_base(self, name: str, obj: object) -> None:
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise TypeError(
                f"{self.kind} {name!r} must be a subclass of {self.base.__name__}, got {obj!r}"
            )

    def register(self, name: str, obj: T | str | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; use as ``@reg.register("name")`` or directly.

        Raises:
            ValueError: ``name`` is already registered.
        """
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")

        def add(o: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            if not isinstance(o, str):
                self._check_base(name, o)
            self._entries[name] = o
            return o

        if obj is None:
            return add
        return add(obj)  # type: ignore[arg-type]

    def get(self, name: str) -> T:
        """The entry called ``name``, or the object at ``"module:attr"``.

        Raises:
            UnknownNameError: lists the valid names and close matches.
        """
        if not isinstance(name, str):
            raise ConfigError(f"{self.kind} name must be a string, got {type(name).__name__}")
        if name in self._entries:
            obj = self._entries[name]
            if isinstance(obj, str):
                obj = import_object(obj, f"{self.kind} {name!r}")
                self._check_base(name, obj)
                self._entries[name] = obj
            return obj  # type: ignore[return-value]
        if ":" in name:
            obj = import_object(name, self.kind)
            self._check_base(name, obj)
            return obj  # type: ignore[return-value]
        valid = self.names()
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}.{suggest(name, valid)} "
            f"Valid {self.kind}s: {', '.join(valid) or '(none)'}; "
            f"or 'module:attr' for your own."
        )

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
