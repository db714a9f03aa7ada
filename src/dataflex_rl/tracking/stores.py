"""Reading tracker stores back: ``BACKEND:LOCATION`` -> `TrackedRun` s.

``mlflow:URI_OR_PATH``, ``tensorboard:DIR`` or ``wandb:DIR`` (docs/tracking.md); each needs its
backend's library, which `require_reader` checks before any work.
"""

from __future__ import annotations

from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.deps import require
from dataflex_rl.tracking import read_mlflow, read_tensorboard, read_wandb
from dataflex_rl.tracking.runs import KeepMetric, TrackedRun

#: backend -> its reader (``read(location, *, experiment, keep)``)
READERS = {
    "mlflow": read_mlflow.read,
    "tensorboard": read_tensorboard.read,
    "wandb": read_wandb.read,
}


def parse_source(text: str) -> tuple[str, str]:
    """``"BACKEND:LOCATION"`` -> ``(backend, location)``."""
    backend, sep, location = text.partition(":")
    valid = ", ".join(READERS)
    if not sep or backend not in READERS:
        raise ConfigError(
            f"--from-tracker {text!r}: expected BACKEND:LOCATION with BACKEND one of {valid}"
            + ("" if not sep else f"; unknown backend {backend!r}." + suggest(backend, [*READERS]))
        )
    if not location:
        raise ConfigError(f"--from-tracker {text!r}: no location after '{backend}:'")
    return backend, location


def require_reader(backend: str, location: str, purpose: str) -> None:
    """Raise `dataflex_rl.deps.MissingDependencyError` (naming the extra) unless the library
    that reads ``backend`` stores is installed (MLflow's SQLite stores also need SQLAlchemy
    and Alembic)."""
    require(backend, f"{purpose} ({backend} stores)")
    if backend == "mlflow" and read_mlflow.needs_sqlite(location):
        for module in ("sqlalchemy", "alembic"):
            require(module, f"{purpose} (a SQLite MLflow store)")


def read_runs(
    backend: str, location: str, *, experiment: str | None = None, keep: KeepMetric = bool
) -> list[TrackedRun]:
    """The runs of one store, in start order where recorded; ``experiment``: only runs of
    this MLflow experiment / W&B project; ``keep``: which metric keys to load (default all)."""
    return READERS[backend](location, experiment=experiment, keep=keep)
