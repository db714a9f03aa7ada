"""State files that hold tensors and plain data, and that can never run code when read.

A state is a tree of dicts, lists, tuples, numbers, strings, None, NumPy arrays and tensors:
the tensors go to a safetensors file, the rest to its header as JSON (tensors, tuples,
non-string keys, NumPy values and non-finite floats as ``{"__marker__": ...}`` objects), with
a schema version and a SHA-256 over everything. Reading never unpickles; a pickle found
where a state file is expected is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dataflex_rl.core.io import atomic_write_bytes
from dataflex_rl.core.registry import ConfigError

SCHEMA = 1
FORMAT = "dataflex-state"
_MARKERS = ("__tensor__", "__tuple__", "__items__", "__ndarray__", "__npscalar__", "__float__")
# how pickles and torch.save files start (protocol 2+ opcode, zip archive, protocol 0/1
# openers); checked only for a file that is not a valid state file, to name what it is
_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04", b"(", b"}", b"]", b"c")


class StateFileError(ConfigError):
    """A state file is missing, corrupt, of another format or unsafe; the message names it."""


def encode_tree(tree: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(skeleton, tensors)``: the tree as JSON-able data with tensors replaced by keys.

    Raises:
        TypeError: a value of another type (naming its place in the tree).
    """
    tensors: dict[str, torch.Tensor] = {}

    def enc(x: Any, where: str) -> Any:
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(x, torch.Tensor):
            key = str(len(tensors))
            tensors[key] = x.detach().cpu().clone(memory_format=torch.contiguous_format)
            return {"__tensor__": key}
        if isinstance(x, np.ndarray):
            return {
                "__ndarray__": x.dtype.str,
                "shape": list(x.shape),
                "data": enc(x.reshape(-1).tolist(), where),
            }
        if isinstance(x, np.generic):
            return {"__npscalar__": x.dtype.str, "value": enc(x.item(), where)}
        if isinstance(x, tuple):
            return {"__tuple__": [enc(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if isinstance(x, dict):
            if all(type(k) is str and not k.startswith("__") for k in x):
                return {k: enc(v, f"{where}.{k}") for k, v in x.items()}
            return {"__items__": [[enc(k, where), enc(v, f"{where}[{k!r}]")] for k, v in x.items()]}
        raise TypeError(
            f"state{where}: cannot store a {type(x).__name__} in a state file "
            "(tensors, arrays, numbers, strings, None, lists, tuples, dicts only)"
        )

    return enc(tree, ""), tensors


def decode_tree(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of `encode_tree`.

    Raises:
        ValueError: a tensor key that is missing, or an unknown marker.
    """

    def dec(x: Any) -> Any:
        if isinstance(x, list):
            return [dec(v) for v in x]
        if not isinstance(x, dict):
            return x
        marker = next((m for m in _MARKERS if m in x), None)
        if marker is None:
            return {k: dec(v) for k, v in x.items()}
        if marker == "__tensor__":
            if x["__tensor__"] not in tensors:
                raise ValueError(f"tensor {x['__tensor__']!r} is missing")
            return tensors[x["__tensor__"]]
        if marker == "__tuple__":
            return tuple(dec(v) for v in x["__tuple__"])
        if marker == "__items__":
            return {_hashable(dec(k)): dec(v) for k, v in x["__items__"]}
        if marker == "__ndarray__":
            return np.array(dec(x["data"]), dtype=np.dtype(x["__ndarray__"])).reshape(x["shape"])
        if marker == "__npscalar__":
            return np.dtype(x["__npscalar__"]).type(dec(x["value"]))
        return float(x["__float__"])

    return dec(skeleton)


def _hashable(k: Any) -> Any:
    return tuple(_hashable(v) for v in k) if isinstance(k, (list, tuple)) else k


def content_sha256(tree_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the tree's JSON and every tensor (key, dtype, shape, bytes), by key."""
    h = hashlib.sha256(tree_json.encode())
    for key in sorted(tensors):
        t = tensors[key].contiguous()
        h.update(f"\0{key}\0{t.dtype}\0{list(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def dump_state(tree: Any, kind: str) -> bytes:
    """The bytes of a state file holding ``tree`` (see `save_state_file`)."""
    from safetensors.torch import save

    skeleton, tensors = encode_tree(tree)
    tree_json = json.dumps(skeleton, allow_nan=False)
    meta = {
        "format": FORMAT,
        "schema": str(SCHEMA),
        "kind": kind,
        "tree": tree_json,
        "sha256": content_sha256(tree_json, tensors),
    }
    return save(tensors, metadata=meta)


def save_state_file(path: str | Path, tree: Any, kind: str) -> Path:
    """Write ``tree`` to ``path`` atomically as a self-checking safetensors state file.

    Args:
        path: the file (``.safetensors`` by convention).
        tree: the state (see the module docstring for the types it may hold).
        kind: what the state is (``"strategy"``, ``"optimizer"``, ...), checked on load.
    """
    return atomic_write_bytes(path, dump_state(tree, kind))


def parse_state(data: bytes, where: str | Path, kind: str | None = None) -> Any:
    """The tree stored in ``data`` (the bytes of a state file named ``where``).

    Raises:
        StateFileError: a pickle, not a safetensors file, another format, kind or schema, or
            content that does not match its checksum (each naming ``where``).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    n = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    try:
        if not 0 < n <= len(data) - 8:
            raise ValueError("truncated or not a safetensors file")
        header = json.loads(data[8 : 8 + n])
        meta = header.get("__metadata__") or {}
        if meta.get("format") != FORMAT:
            raise ValueError("not a dataflex-rl state file")
        tensors = load(data)
    except (ValueError, SafetensorError, UnicodeDecodeError) as e:
        if data.startswith(_PICKLE_MAGIC):
            raise StateFileError(
                f"{where}: a pickle (torch.save) file, which can run arbitrary code when "
                "loaded; refused (dataflex-rl state files are safetensors with a JSON "
                "header)"
            ) from None
        raise StateFileError(f"{where}: unreadable state file ({e})") from None
    if meta.get("schema") != str(SCHEMA):
        raise StateFileError(
            f"{where}: state schema {meta.get('schema')!r}; this version of "
            f"dataflex-rl reads schema {SCHEMA}"
        )
    if kind is not None and meta.get("kind") != kind:
        raise StateFileError(f"{where}: holds a {meta.get('kind')!r} state, not {kind!r}")
    if content_sha256(meta["tree"], tensors) != meta.get("sha256"):
        raise StateFileError(f"{where}: content does not match its checksum (corrupt)")
    try:
        return decode_tree(json.loads(meta["tree"]), tensors)
    except (ValueError, KeyError, TypeError) as e:
        raise StateFileError(f"{where}: malformed state tree ({e})") from None


def load_state_file(path: str | Path, kind: str | None = None) -> Any:
    """Read a file written by `save_state_file`; never unpickles.

    Raises:
        StateFileError: missing, corrupt, a pickle, or another kind/schema (naming the file).
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise StateFileError(f"{path}: missing") from None
    return parse_state(data, path, kind)
