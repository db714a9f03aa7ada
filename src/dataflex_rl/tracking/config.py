"""The ``tracking:`` section of an engine config or experiment file: which experiment trackers
receive the run's metrics, parameters and plots, and where they keep them.

``metrics.jsonl`` is always written and stays the source of truth; the trackers are copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataflex_rl.core.config import Checked, param
from dataflex_rl.core.registry import ConfigError

#: backend name -> the import name it needs (checked before any work by `require_backends`)
BACKENDS: dict[str, str] = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
}


@dataclass
class TensorBoardTracking(Checked):
    """TensorBoard event files."""

    dir: str | None = param(
        None,
        "event folder; null: <run>/tensorboard. A folder given here gets one subfolder per "
        "run name, so several runs can share it",
    )


@dataclass
class WandbTracking(Checked):
    """Weights & Biases."""

    mode: str = param(
        "offline",
        "offline: a local run folder to upload later with 'wandb sync'; online: log in and stream",
        choices=("offline", "online"),
    )
    dir: str | None = param(None, "folder W&B writes its run folders in; null: the run's folder")
    entity: str | None = param(None, "W&B entity (user or team); null: your default")


@dataclass
class MlflowTracking(Checked):
    """MLflow."""

    tracking_uri: str | None = param(
        None,
        "tracking store URI; null: sqlite:///<run>/mlflow.db (MLflow 3 refuses new file stores "
        "unless MLFLOW_ALLOW_FILE_STORE=true; a file:// URI works with that set)",
    )
    experiment: str | None = param(None, "MLflow experiment name; null: the project")


@dataclass
class TrackingConfig(Checked):
    """Experiment trackers that receive a copy of what the run logs (metrics.jsonl stays the
    source of truth)."""

    backends: list[str] = param(
        [],
        "trackers to log to, any of tensorboard, wandb, mlflow (empty: metrics.jsonl only)",
        choices=tuple(BACKENDS),
    )
    project: str = param("dataflex-rl", "W&B project; MLflow experiment unless mlflow.experiment")
    run_name: str | None = param(None, "name of the tracker run; null: the run's folder name")
    group: str | None = param(
        None, "W&B group and MLflow tag of related runs ('compare' sets the experiment name)"
    )
    tags: dict[str, str] = param(
        {},
        "labels added to every tracker run, e.g. {team: rl} ('compare' adds metric: the "
        "accuracy its experiment compares, which 'report --from-tracker' reads back)",
    )
    tensorboard: TensorBoardTracking = param(TensorBoardTracking(), "TensorBoard")
    wandb: WandbTracking = param(WandbTracking(), "Weights & Biases")
    mlflow: MlflowTracking = param(MlflowTracking(), "MLflow")

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.backends)) != len(self.backends):
            raise ConfigError(f"TrackingConfig.backends: a backend repeats: {self.backends}")
        if not self.project:
            raise ConfigError("TrackingConfig.project: must be a non-empty name")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one level of dotted keys (``{"optim": {"lr": 1}}`` ->
    ``{"optim.lr": 1}``); lists and scalars are leaves, an empty mapping leaves no key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
