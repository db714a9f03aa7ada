"""Checkpoints of an engine run: model, optimizer, strategy, domain sampler and every RNG.

One file, ``checkpoint.pt``, written atomically (temporary file, then rename), so an interrupted
save never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
    path = Path(directory) / CHECKPOINT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """Read ``directory/checkpoint.pt``.

    Raises:
        FileNotFoundError: no checkpoint there (with the path).
    """
    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    # our own file: it holds RNG states and strategy histories, not only tensors
    return torch.load(path, map_location="cpu", weights_only=False)
