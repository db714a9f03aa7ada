"""Checkpoints of an engine run (docs/engine.md, checkpoints and resume).

``<out>/checkpoints/step-00000010/``: a state file per part of `PARTS` (`core.statefile`),
``meta.json`` and ``MANIFEST.json`` (SHA-256 and size of every file, and its own), written last.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dataflex_rl.core import io as dio
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.statefile import (
    StateFileError,
    decode_tree,
    dump_state,
    encode_tree,
    parse_state,
)

CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "MANIFEST.json"
META = "meta.json"
SCHEMA = 3
KEEP = 2
# parts of `EmbeddedTrainer.state_dict` stored as state files; the rest goes to meta.json
PARTS = ("model", "optimizer", "dataflex", "rng", "pipeline")


class CheckpointError(ConfigError):
    """No usable checkpoint (the message names the bad file), or one could not be written."""


def global_rng_state() -> dict[str, Any]:
    """The global RNG states (torch CPU, Python, NumPy)."""
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def seed_global_rngs(seed: int) -> None:
    """Seed the global RNGs (torch, Python, NumPy) with ``seed`` (31 bits)."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def set_global_rng_state(state: dict[str, Any]) -> None:
    """Restore what `global_rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def checkpoint_dirs(directory: str | Path) -> list[Path]:
    """The run's checkpoint folders, newest (highest step) first."""
    root = Path(directory) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[5:]), reverse=True)


def latest_step(directory: str | Path) -> int | None:
    """Step of the newest checkpoint folder (None: none), intact or not."""
    found = checkpoint_dirs(directory)
    return int(found[0].name[5:]) if found else None


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (`EmbeddedTrainer.state_dict` output) as a new checkpoint (a temporary
    folder renamed into place; the last `KEEP` are kept); returns its folder. `CheckpointError`
    when it cannot be written (e.g. a full disk): the previous one is untouched."""
    root = Path(directory) / CHECKPOINTS_DIR
    step = int(state["step"])
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for p in root.iterdir():  # temporary folders of saves that a crash interrupted
            if p.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(p, ignore_errors=True)
        tmp.mkdir()
        files = {f"{part}.safetensors": dump_state(state[part], part) for part in PARTS}
        skeleton, tensors = encode_tree({k: v for k, v in state.items() if k not in PARTS})
        if tensors:
            raise TypeError(f"checkpoint: tensors outside {PARTS} are not supported")
        files[META] = json.dumps({"schema": SCHEMA, "state": skeleton}, indent=1).encode()
        for name, data in files.items():
            dio.write_durable(tmp / name, data)
        manifest = {
            "schema": SCHEMA,
            "step": step,
            "files": {
                name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                for name, data in files.items()
            },
        }
        manifest["sha256"] = _manifest_sha256(manifest)
        dio.write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
        dio.fsync_dir(tmp)
        _move_into_place(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = [p for p in checkpoint_dirs(directory) if p != final]
        why = "the disk is full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        raise CheckpointError(
            f"could not write the checkpoint of step {step} under {root}: {why}"
            + (f"; the previous checkpoint {previous[0]} is intact" if previous else "")
        ) from e
    for old in checkpoint_dirs(directory)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def discard_after(directory: str | Path, step: int) -> None:
    """Remove checkpoints beyond ``step`` (after resuming from an older one because the newer
    were corrupt: the run recreates them, and they must not push the good one out)."""
    for folder in checkpoint_dirs(directory):
        if int(folder.name[5:]) > step:
            shutil.rmtree(folder, ignore_errors=True)


def _manifest_sha256(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its own ``sha256`` entry (canonical JSON)."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; a checkpoint of the same step already there is replaced
    (moved aside first: a crash in between leaves the previous checkpoint to recover from)."""
    aside = None
    if final.exists():
        aside = final.parent / f".old-{final.name}-{os.getpid()}"
        os.replace(final, aside)
    os.replace(tmp, final)
    dio.fsync_dir(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def read_checkpoint(folder: str | Path) -> dict[str, Any]:
    """One checkpoint folder's state, every file checked against the manifest (else
    `CheckpointError` naming the file)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_bytes())
        files = manifest["files"]
        schema = manifest.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"schema {schema!r}, expected {SCHEMA}")
        if manifest.get("sha256") != _manifest_sha256(manifest):
            raise ValueError("does not match its own SHA-256")
    except FileNotFoundError:
        raise CheckpointError(f"{folder / MANIFEST}: missing (the save did not finish)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{folder / MANIFEST}: corrupt ({e})") from None
    expected = {f"{p}.safetensors" for p in PARTS} | {META}
    if set(files) != expected:
        raise CheckpointError(
            f"{folder / MANIFEST}: lists {sorted(files)}, expected {sorted(expected)}"
        )
    data = {}
    for name, entry in files.items():
        path = folder / name
        try:
            data[name] = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointError(f"{path}: missing") from None
        if hashlib.sha256(data[name]).hexdigest() != entry.get("sha256"):
            raise CheckpointError(
                f"{path}: does not match its SHA-256 in {MANIFEST} (corrupt or changed)"
            )
    try:
        meta = json.loads(data[META])
        state = decode_tree(meta["state"], {})
        for part in PARTS:
            state[part] = parse_state(
                data[f"{part}.safetensors"], folder / f"{part}.safetensors", part
            )
    except StateFileError as e:
        raise CheckpointError(str(e)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{folder / META}: corrupt ({e})") from None
    if state.get("step") != manifest.get("step"):
        raise CheckpointError(
            f"{folder / META}: step {state.get('step')} but the manifest "
            f"says {manifest.get('step')}"
        )
    return state


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """The newest intact checkpoint under ``directory`` (a bad one is skipped with a warning);
    `FileNotFoundError` when there is none, `CheckpointError` when none is intact."""
    folders = checkpoint_dirs(directory)
    if not folders:
        raise FileNotFoundError(f"--resume: no checkpoint under {Path(directory)}")
    problems = []
    for folder in folders:
        try:
            state = read_checkpoint(folder)
        except CheckpointError as e:
            problems.append(str(e))
            continue
        if problems:
            warnings.warn(
                f"checkpoint not usable: {'; '.join(problems)}. Resuming from the "
                f"previous intact one, {folder} (step {state['step']})",
                UserWarning,
                stacklevel=2,
            )
        return state
    raise CheckpointError("no intact checkpoint: " + "; ".join(problems))
