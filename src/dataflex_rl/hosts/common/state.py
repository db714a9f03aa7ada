"""State files of a host: written atomically, read back on CPU.

A state file holds tensors and plain Python (strategy histories, RNG states, sampler cursors),
so it is read with ``weights_only=False``: only read files this package wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (temporary file, then rename): an interrupted
    save never leaves a half-written file behind. Creates the parent folder; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a file written by `save_state`, tensors on CPU.

    Raises:
        FileNotFoundError: no file at ``path`` (naming it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no state file at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)
