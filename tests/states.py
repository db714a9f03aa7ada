"""Comparing component states: a round-trip test first shows the state moved from a fresh one
(a state that never moved round-trips whatever load_state_dict does)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dataflex_rl.core.statefile import _PICKLE_MAGIC, FORMAT


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


def is_state_file(path: str | Path) -> bool:
    """Whether ``path`` starts like a state file (a safetensors header naming this format);
    reads only the header."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else 0
            header = f.read(n) if 0 < n <= 100_000_000 else b""
        meta = json.loads(header).get("__metadata__") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return meta.get("format") == FORMAT


def looks_like_pickle(path: str | Path) -> bool:
    """Whether ``path`` starts like a pickle or a ``torch.save`` archive."""
    try:
        with open(path, "rb") as f:
            return f.read(4).startswith(_PICKLE_MAGIC)
    except OSError:
        return False
