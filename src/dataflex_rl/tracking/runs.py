"""`TrackedRun`: one run read back from a tracker store, the same shape whichever wrote it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: a reader's filter of metric keys: only the keys it accepts are loaded
KeepMetric = Callable[[str], bool]

#: a tracker run's state, as far as the store records it
FINISHED, FAILED, RUNNING, UNKNOWN = "finished", "failed", "running", "unknown"


@dataclass(frozen=True)
class TrackedRun:
    """One tracker run: who it is, what describes it, and its metric series.

    ``fields``: parameters / config / hyperparameters (dotted keys) and tags, as text;
    ``metrics``: key -> step -> value (step None: a W&B summary key never logged to history).
    """

    backend: str
    id: str
    name: str
    experiment: str | None = None
    group: str | None = None
    status: str = UNKNOWN
    labels: tuple[str, ...] = ()
    fields: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, dict[int | None, float]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """How messages name the run: ``wandb run 'grpo-seed0' (id 1a2b3c4d)``."""
        same = self.id == self.name
        return f"{self.backend} run {self.name!r}" + ("" if same else f" (id {self.id})")


def field_text(value: Any) -> str | None:
    """A parameter's value as the text runs are matched and labelled by: numbers with an
    integral value as integers (``3.0`` -> ``"3"``), booleans ``true``/``false``, lists and
    mappings as JSON; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, sort_keys=True)


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, text, NaN and infinities are not
    scores)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
