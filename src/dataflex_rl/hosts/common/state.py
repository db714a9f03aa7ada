"""State files of a host (strategy and intake state beside a host's checkpoint), without pickle.

`save_state` writes a `dataflex_rl.core.statefile` file atomically: tensors as safetensors,
everything else (strategy histories, RNG states, sampler cursors) as JSON with a schema version,
and a checksum over both; `load_state` reads it back on CPU and never runs code. A ``torch.save``
file of earlier versions is still read, but only with ``torch.load(weights_only=True)``:
tensors and plain containers load; anything that would run code when unpickled is refused.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from dataflex_rl.core.statefile import (
    StateFileError,
    is_state_file,
    load_state_file,
    looks_like_pickle,
    save_state_file,
)

KIND = "host-state"


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (an interrupted save leaves the previous file).
    Creates the parent folder; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_state_file(path, state, KIND)


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a file written by `save_state` (or an old ``torch.save`` of plain data).

    Raises:
        FileNotFoundError: no file at ``path`` (naming it).
        StateFileError: corrupt, or a pickle holding anything but tensors and plain
            containers (refused; nothing in it is executed).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no state file at {path}")
    if is_state_file(path) or not looks_like_pickle(path):
        return load_state_file(path, KIND)  # corrupt: the error says what is wrong
    import torch

    try:
        # from a buffer: torch.load picks its loader by the file name's extension otherwise
        return torch.load(io.BytesIO(path.read_bytes()), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise StateFileError(
            f"{path}: refused: it holds objects other than tensors and plain containers, and "
            f"unpickling them could run arbitrary code ({first})"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise StateFileError(
            f"{path}: unreadable torch.save file ({type(e).__name__}: {e})"
        ) from None
