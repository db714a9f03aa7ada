"""The base class of every component: a dataclass whose fields are its hyperparameters,
declared with `param` (``describe`` and the docs come from the same declarations);
constructors only store and check them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dataflex_rl.core.config import Checked, field_rows, param, validate

__all__ = ["Component", "param"]


@dataclass
class Component(Checked):
    """Base of scorers, actuators and skip policies: declared, checked hyperparameters.

    Subclasses are dataclasses. Class attributes describe the component for ``describe``:
    ``paper`` (where the method comes from) and, on scorers/actuators, granularity and the
    batch fields needed.
    """

    kind: ClassVar[str] = "component"
    paper: ClassVar[str] = ""

    @classmethod
    def from_config(cls, cfg: dict | None, where: str) -> Component:
        """Build from a mapping of hyperparameters; unknown keys and bad values name the key."""
        return validate(cls, cfg or {}, where, noun=f"parameter of {cls.kind} {cls.__name__}")

    @classmethod
    def parameters(cls) -> list[dict]:
        """One dict per hyperparameter: name, type, default, range, doc."""
        return field_rows(cls)

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
