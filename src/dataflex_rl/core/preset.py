"""Named strategies (presets): the table that strategy parsing reads. Core owns it;
``dataflex_rl.presets`` fills it on its first use, so core imports nothing above it.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from dataflex_rl.core.registry import ConfigError, suggest


@dataclass(frozen=True)
class Preset:
    """A named strategy: description, the paper it follows and the spec it expands to."""

    name: str
    description: str
    paper: str
    spec: dict = field(default_factory=dict)

    @property
    def mechanism(self) -> str:
        return ", ".join(self.spec) or "none"


class PresetTable(Mapping[str, Preset]):
    """Presets by name, in registration order (the paper's order for the built-in ones)."""

    def __init__(self, builtins: str | None = None) -> None:
        self._builtins = builtins
        self._all: dict[str, Preset] = {}

    @property
    def _presets(self) -> dict[str, Preset]:
        """The presets, the built-in ones imported first (once)."""
        if self._builtins is not None:
            module, self._builtins = self._builtins, None  # before importing: they land here
            importlib.import_module(module)
        return self._all

    def register(self, preset: Preset) -> Preset:
        """Add ``preset``.

        Raises:
            ValueError: a preset of that name is already registered.
        """
        if not isinstance(preset, Preset):
            raise TypeError(f"expected a Preset, got {type(preset).__name__}")
        if preset.name in self._presets:
            raise ValueError(f"preset {preset.name!r} is already registered")
        self._presets[preset.name] = preset
        return preset

    def __getitem__(self, name: str) -> Preset:
        return self._presets[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._presets)

    def __len__(self) -> int:
        return len(self._presets)

    def with_section(self, mechanism: str) -> list[str]:
        """Names of the presets that set ``mechanism``."""
        return [n for n, p in self._presets.items() if mechanism in p.spec]

    def section(self, name: str, mechanism: str, where: str) -> dict:
        """The ``mechanism`` section of preset ``name`` (a deep copy).

        Raises:
            ConfigError: unknown preset, or one without that section (listing valid ones).
        """
        valid = self.with_section(mechanism)
        if name not in self._presets:
            raise ConfigError(
                f"{where}: unknown {mechanism} preset {name!r}."
                f"{suggest(name, valid)} {mechanism} presets: {', '.join(valid)}"
            )
        spec = self._presets[name].spec
        if mechanism not in spec:
            raise ConfigError(
                f"{where}: preset {name!r} has no {mechanism} section (it sets "
                f"{self._presets[name].mechanism}). {mechanism} presets: "
                f"{', '.join(valid)}"
            )
        return copy.deepcopy(spec[mechanism])


#: every preset, by name (the built-in ones from ``dataflex_rl.presets``, on first use)
PRESETS = PresetTable("dataflex_rl.presets")
