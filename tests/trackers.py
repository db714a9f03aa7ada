"""Read back what the experiment trackers stored, with the trackers' own readers, so tests
compare it with ``metrics.jsonl``: TensorBoard's EventAccumulator, W&B's transaction log
(``run-<id>.wandb``, the records ``wandb sync`` uploads, through the product's framing reader
`dataflex_rl.tracking.read_wandb`, itself tested on logs written by wandb in
tests/unit/tracking/test_stores.py) and MLflow's client."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest


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
    from dataflex_rl.tracking.read_wandb import records

    return records(wandb_file)


def wandb_runs(folder: Path, run_id: str) -> list[Path]:
    """The transaction logs of W&B run ``run_id`` under ``folder``, one per session in order."""
    from dataflex_rl.tracking.read_wandb import sessions

    return sessions(folder).get(run_id, [])


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


def same_statistics(got: Path, want: Path) -> None:
    """Two ``statistics.csv`` files hold the same table: the same rows (summary × method, in
    any order: a tracker may not keep the order benchmarks were logged in), cell by cell,
    numbers to 1e-9."""

    def table(path: Path) -> tuple[list[str], dict[tuple, list[str]]]:
        with path.open(newline="") as f:
            header, *rows = list(csv.reader(f))
        return header, {(r[0], r[2]): r for r in rows}

    (head_a, a), (head_b, b) = table(got), table(want)
    assert head_a == head_b and a.keys() == b.keys()
    for key, x in a.items():
        y = b[key]
        assert len(x) == len(y), key
        for cx, cy in zip(x, y):
            try:
                assert float(cx) == pytest.approx(float(cy), rel=1e-9, abs=1e-12, nan_ok=True)
            except ValueError:
                assert cx == cy, key
