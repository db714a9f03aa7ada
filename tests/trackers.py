"""Read back what the experiment trackers stored, with the trackers' own readers, so tests
compare it with ``metrics.jsonl``: TensorBoard's EventAccumulator, W&B's transaction log
(``run-<id>.wandb``, the records ``wandb sync`` uploads) and MLflow's client."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

#: W&B's transaction log: a 7-byte header, then LevelDB-style 32 KiB blocks of chunks, each
#: with a 7-byte header (crc32c, length, type: 1 whole, 2 first, 3 middle, 4 last)
_WANDB_BLOCK, _FULL, _FIRST, _MIDDLE, _LAST = 32768, 1, 2, 3, 4


def offline_env(monkeypatch, tmp_path: Path) -> None:
    """W&B offline, silent, with no error reporting or settings outside ``tmp_path``; MLflow's
    usage telemetry off."""
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DIR": str(tmp_path / "wandb-home"),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "WANDB_DISABLE_GIT": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> step -> value, as TensorBoard shows them (purged events removed)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def tensorboard_accumulator(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return acc


def wandb_records(wandb_file: Path) -> list:
    """The protobuf records of a ``run-<id>.wandb`` transaction log."""
    from wandb.proto import wandb_internal_pb2

    data = wandb_file.read_bytes()
    assert data[:4] == b":W&B", f"{wandb_file}: not a W&B transaction log"
    pos, pending, out = 7, b"", []
    while pos + 7 <= len(data):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def wandb_runs(folder: Path, run_id: str) -> list[Path]:
    """The transaction logs of W&B run ``run_id`` under ``folder``, one per session in order.

    A session's folder is ``offline-run-<start second>-<id>``, with ``-1``, ``-2``, ... added
    when several sessions start within one second."""
    pattern = re.compile(rf"(?:offline-)?run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = []
    for path in folder.glob(f"wandb/*/run-{run_id}.wandb"):
        m = pattern.fullmatch(path.parent.name)
        if m:  # not the latest-run link
            found.append(((m.group(1), int(m.group(2) or 0)), path))
    return [p for _, p in sorted(found)]


def wandb_history(folder: Path, run_id: str) -> list[tuple[int, dict[str, float]]]:
    """(step, metrics) of every history row of the run, all sessions in order."""
    rows = []
    for path in wandb_runs(folder, run_id):
        for r in wandb_records(path):
            if r.WhichOneof("record_type") == "history":
                items = {
                    (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                    for i in r.history.item
                }
                rows.append(
                    (r.history.step.num, {k: v for k, v in items.items() if not k.startswith("_")})
                )
    return rows


def wandb_config(folder: Path, run_id: str) -> dict:
    """The run's config (first session)."""
    for r in wandb_records(wandb_runs(folder, run_id)[0]):
        if r.WhichOneof("record_type") == "run":
            return {u.key: json.loads(u.value_json) for u in r.run.config.update}
    return {}


def wandb_tags(folder: Path, run_id: str) -> list[str]:
    for r in wandb_records(wandb_runs(folder, run_id)[0]):
        if r.WhichOneof("record_type") == "run":
            return list(r.run.tags)
    return []


def mlflow_client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)
