"""Checkpoints of an engine run: model, optimizer, strategy, domain sampler and every RNG.

One file, ``checkpoint.pt``, written atomically by `dataflex_rl.hosts.common.state`, so an
interrupted save never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dataflex_rl.hosts.common.state import load_state, save_state

CHECKPOINT_FILE = "checkpoint.pt"


def global_rng_state() -> dict[str, Any]:
    """The global RNG states (torch CPU, Python, NumPy)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": np.random.get_state()}


def set_global_rng_state(state: dict[str, Any]) -> None:
    """Restore what `global_rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/checkpoint.pt`` atomically; returns the path."""
    return save_state(Path(directory) / CHECKPOINT_FILE, state)


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """Read ``directory/checkpoint.pt``.

    Raises:
        FileNotFoundError: no checkpoint there (with the path).
    """
    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    return load_state(path)
