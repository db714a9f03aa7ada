"""State files of a host (strategy and intake state beside its checkpoint), without pickle
(`dataflex_rl.core.statefile`: written atomically, checksummed, never unpickled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataflex_rl.core.statefile import load_state_file, save_state_file

KIND = "host-state"


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (an interrupted save leaves the previous file).
    Creates the parent folder; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_state_file(path, state, KIND)


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a file written by `save_state` (FileNotFoundError naming ``path``;
    `StateFileError` for a corrupt file, another kind, or a pickle, never executed)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no state file at {path}")
    return load_state_file(path, KIND)
