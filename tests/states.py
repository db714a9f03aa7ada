"""Comparing component states: a round-trip test first shows the state moved from a fresh one
(a state that never moved round-trips whatever load_state_dict does)."""

from __future__ import annotations

import torch


def state_equal(x, y) -> bool:
    """Structural equality of states: tensors by value, mappings and sequences element-wise."""
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and torch.equal(x, y)
    if isinstance(x, dict):
        return (
            isinstance(y, dict) and x.keys() == y.keys() and all(state_equal(x[k], y[k]) for k in x)
        )
    if isinstance(x, (list, tuple)):
        return (
            isinstance(y, (list, tuple))
            and len(x) == len(y)
            and all(state_equal(a, b) for a, b in zip(x, y))
        )
    return x == y


def assert_moved(state: dict, fresh: dict, what: str = "state") -> None:
    """Fail unless ``state`` differs from ``fresh`` (the state of a new, unused object)."""
    assert not state_equal(state, fresh), (
        f"{what} equals a fresh one: the round trip would pass without restoring anything"
    )
