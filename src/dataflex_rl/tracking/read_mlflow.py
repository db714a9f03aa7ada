"""Runs of an MLflow tracking store, read with MLflow's own client (``MlflowClient``).

The location is a tracking URI (``sqlite:///runs/compare/quick/mlflow.db``,
``http://host:5000``, ``file:///.../mlruns``) or a path: an existing file is a SQLite store,
a folder a file store. A SQLite store that does not exist is refused (MLflow would create an
empty one).
"""

from __future__ import annotations

import re
from pathlib import Path

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tracking.runs import (
    FAILED,
    FINISHED,
    RUNNING,
    UNKNOWN,
    KeepMetric,
    TrackedRun,
    number,
)

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_STATUS = {
    "FINISHED": FINISHED,
    "FAILED": FAILED,
    "KILLED": FAILED,
    "RUNNING": RUNNING,
    "SCHEDULED": RUNNING,
}


def tracking_uri(location: str) -> str:
    """The tracking URI of ``location`` (a URI, or an existing SQLite file or file store)."""
    if _SCHEME.match(location) and not Path(location).exists():  # a URI, not C:\...
        if location.startswith("sqlite:///"):
            db = Path(location.removeprefix("sqlite:///"))
            if not db.is_file():
                raise ConfigError(f"mlflow:{location}: no such SQLite database {db}")
        return location
    path = Path(location)
    if path.is_file():
        return f"sqlite:///{path.resolve()}"
    if path.is_dir():
        return str(path.resolve())
    raise ConfigError(
        f"mlflow:{location}: no such file or folder (give a tracking URI such as "
        "sqlite:///path/mlflow.db or http://host:5000, or the path of the store)"
    )


def needs_sqlite(location: str) -> bool:
    """Whether reading ``location`` goes through SQLAlchemy (a SQLite store)."""
    return location.startswith("sqlite:") or Path(location).is_file()


def read(location: str, *, experiment: str | None, keep: KeepMetric) -> list[TrackedRun]:
    """The active runs of the store (of ``experiment`` only, when given), oldest first, with
    the history of every metric ``keep`` accepts."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(location)
    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments(view_type=ViewType.ACTIVE_ONLY)
    names = {e.experiment_id: e.name for e in experiments}
    if experiment is not None:
        ids = [i for i, n in names.items() if n == experiment]
        if not ids:
            raise ConfigError(
                f"mlflow:{location}: no experiment {experiment!r}; experiments: "
                + (", ".join(sorted(names.values())) or "none")
            )
    else:
        ids = list(names)
    runs, token = [], None
    while ids:
        page = client.search_runs(
            ids,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(_run(client, r, names, keep) for r in page)
        token = page.token
        if not token:
            break
    return runs


def _run(client, run, experiments: dict[str, str], keep: KeepMetric) -> TrackedRun:
    info, data = run.info, run.data
    metrics = {}
    for key in data.metrics:
        if keep(key):
            # the last value logged at each step (a step logged twice keeps the newer one)
            points = sorted(client.get_metric_history(info.run_id, key), key=lambda m: m.timestamp)
            series = {m.step: number(m.value) for m in points}
            metrics[key] = {s: v for s, v in series.items() if v is not None}
    return TrackedRun(
        backend="mlflow",
        id=info.run_id,
        name=info.run_name or info.run_id,
        experiment=experiments.get(info.experiment_id),
        group=data.tags.get("group"),
        status=_STATUS.get(info.status, UNKNOWN),
        labels=tuple(data.tags),
        fields={**data.params, **data.tags},
        metrics=metrics,
    )
