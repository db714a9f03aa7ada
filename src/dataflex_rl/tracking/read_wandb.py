"""Runs of W&B run folders (offline runs, or online runs' local copies), read from their
transaction logs ``run-<id>.wandb``: the records ``wandb sync`` uploads.

wandb ships no reader of this file, only the records' schema
(``wandb_internal_pb2.Record``); the framing is LevelDB's log format: a 7-byte file header, then
32 KiB blocks of chunks, each with a 7-byte header (CRC-32C, length, type: 1 whole, 2 first,
3 middle, 4 last piece); a block's tail shorter than a header is padding. A record cut short at
the end is left out; checksums are not verified. A run's sessions are read in order into one
run: later values win.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tracking.config import flatten
from dataflex_rl.tracking.runs import (
    FAILED,
    FINISHED,
    RUNNING,
    KeepMetric,
    TrackedRun,
    field_text,
    number,
)

_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_LOG = re.compile(r"run-(?P<id>[^/]+)\.wandb")
_SESSION = re.compile(r"(?:offline-)?run-(?P<time>\d{8}_\d{6})-(?P<id>.+?)(?:-(?P<n>\d+))?")


def chunks(data: bytes, where: str = "") -> Iterator[bytes]:
    """The records' bytes of a transaction log's contents ``data``, in order."""
    if data[:4] != b":W&B":
        raise ConfigError(f"{where}: not a W&B transaction log (no ':W&B' header)")
    pos, pending = _HEADER, None
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # padding to the end of the block
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0:  # zeros to the end of the block (preallocated or padding)
            pos += left
            continue
        end = pos + _HEADER + length
        if end > len(data):  # cut short: the writer had not finished this record
            return
        piece = data[pos + _HEADER : end]
        pos = end
        if kind == _FULL:
            yield piece
        elif kind == _FIRST:
            pending = piece
        elif pending is not None:
            pending += piece
            if kind == _LAST:
                yield pending
                pending = None


def records(path: str | Path) -> list:
    """The protobuf records (``wandb_internal_pb2.Record``) of a ``run-<id>.wandb`` file."""
    from wandb.proto import wandb_internal_pb2

    out = []
    for raw in chunks(Path(path).read_bytes(), str(path)):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        out.append(record)
    return out


def sessions(root: str | Path) -> dict[str, list[Path]]:
    """Run id -> its transaction logs under ``root`` (or a run folder, or a ``.wandb`` file),
    in session start order (folders ``[offline-]run-<second>-<id>[-k]``); links not followed."""
    root = Path(root)
    if root.is_file():
        m = _LOG.fullmatch(root.name)
        return {m.group("id") if m else root.stem: [root]}
    found: dict[str, list[tuple[tuple, Path]]] = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            m = _LOG.fullmatch(name)
            if m is None:
                continue
            path = Path(folder) / name
            found.setdefault(m.group("id"), []).append((_started(path), path))
    ordered = sorted(found.items(), key=lambda item: min(item[1]))
    return {run_id: [p for _, p in sorted(logs)] for run_id, logs in ordered}


def _started(log: Path) -> tuple[str, int]:
    """When a session started, from its folder's name (``("", 0)`` for another name)."""
    s = _SESSION.fullmatch(log.parent.name)
    return (s.group("time"), int(s.group("n") or 0)) if s else ("", 0)


def read(location: str, *, experiment: str | None, keep: KeepMetric) -> list[TrackedRun]:
    """One run per W&B run id under ``location`` (of project ``experiment`` only, when given),
    in start order, with the history of every metric ``keep`` accepts."""
    if not Path(location).exists():
        raise ConfigError(f"wandb:{location}: no such folder")
    found = sessions(location)
    if not found:
        raise ConfigError(
            f"wandb:{location}: no W&B run logs (run-<id>.wandb) in it; W&B writes them in "
            "<dir>/wandb/offline-run-*/"
        )
    runs = [_fold(run_id, logs, keep) for run_id, logs in found.items()]
    return [r for r in runs if experiment is None or r.experiment == experiment]


def _key(item) -> str:
    """A history, summary or config item's name (nested keys joined with dots, as W&B's UI
    writes them)."""
    return item.key or ".".join(item.nested_key)


def _fold(run_id: str, logs: list[Path], keep: KeepMetric) -> TrackedRun:
    run: dict = {"name": run_id, "project": None, "group": None, "tags": ()}
    config: dict = {}
    series: dict[str, dict[int | None, float]] = {}
    summary: dict[str, float] = {}
    exit_code = None
    for path in logs:
        exit_code = None  # a later session reopened the run
        for r in records(path):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                _run_record(r.run, run, config)
            elif kind == "config":
                _config_update(r.config, config)
            elif kind == "history":
                _history(r.history, series, keep)
            elif kind == "summary":
                for item in r.summary.update:
                    value = number(_json(item.value_json))
                    key = _key(item)
                    if value is not None and not key.startswith("_") and keep(key):
                        summary[key] = value
            elif kind == "exit":
                exit_code = r.exit.exit_code
    for key, value in summary.items():  # a summary key never logged as history
        series.setdefault(key, {None: value})
    tags = tuple(run["tags"])
    fields = {k: v for k, v in ((k, field_text(v)) for k, v in flatten(config).items()) if v}
    for tag in tags:
        key, sep, value = tag.partition(":")
        if sep and key and value:
            fields[key] = value
    return TrackedRun(
        backend="wandb",
        id=run_id,
        name=run["name"],
        experiment=run["project"],
        group=run["group"],
        status=RUNNING if exit_code is None else FINISHED if exit_code == 0 else FAILED,
        labels=tags,
        fields=fields,
        metrics=series,
    )


def _run_record(record, run: dict, config: dict) -> None:
    run["name"] = record.display_name or run["name"]
    run["project"] = record.project or run["project"]
    run["group"] = record.run_group or run["group"]
    run["tags"] = tuple(record.tags) or run["tags"]
    _config_update(record.config, config)


def _config_update(record, config: dict) -> None:
    for item in record.update:
        if _key(item) != "_wandb":
            config[_key(item)] = _json(item.value_json)
    for item in record.remove:
        config.pop(_key(item), None)


def _history(record, series: dict, keep: KeepMetric) -> None:
    # a row's keys in name order (the Go core writes them in no fixed order)
    items = {_key(i): _json(i.value_json) for i in sorted(record.item, key=_key)}
    step = record.step.num if record.HasField("step") else items.get("_step")
    if not isinstance(step, int):
        return
    for key, raw in items.items():
        value = number(raw)
        if value is not None and not key.startswith("_") and keep(key):
            series.setdefault(key, {})[step] = value


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None
