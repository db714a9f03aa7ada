"""Domain proportions: parse them from a config, and mix a floor into them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dataflex_rl.core.registry import ConfigError, suggest

if TYPE_CHECKING:
    from torch import Tensor


def apply_floor(raw: Tensor, floor: float) -> Tensor:
    """Mix a floor into proportions: p = floor + (1 - D floor) raw; every p >= floor, sum 1."""
    import torch  # here, not above: configs are checked (``report`` runs) without torch

    raw = raw.to(torch.float64).clamp(min=0)
    total = raw.sum()
    D = raw.shape[0]
    raw = raw / total if float(total) > 0 else torch.full_like(raw, 1.0 / D)
    return floor + (1.0 - D * floor) * raw


def normalize_proportions(value: list | dict, domains: Sequence[str], where: str) -> Tensor:
    """A list (domain order) or mapping of non-negative numbers -> [D] proportions summing to 1."""
    import torch

    D = len(domains)
    if isinstance(value, dict):
        unknown = [k for k in value if k not in domains]
        if unknown:
            names = ", ".join(map(repr, unknown))
            raise ConfigError(
                f"{where}: unknown domain{'s' if len(unknown) > 1 else ''} {names}."
                f"{suggest(str(unknown[0]), list(domains))} Domains: {', '.join(domains)}"
            )
        value = [float(value.get(d, 0.0)) for d in domains]
    if len(value) != D:
        raise ConfigError(f"{where}: needs {D} values (domains {list(domains)}), got {len(value)}")
    t = torch.tensor(value, dtype=torch.float64)
    if float(t.sum()) <= 0 or bool((t < 0).any()):
        raise ConfigError(f"{where}: proportions must be >= 0 with a positive sum, got {value}")
    return t / t.sum()
