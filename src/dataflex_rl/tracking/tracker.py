"""`Tracker`: sends a run's records to the configured trackers, and never breaks the run.

A backend that raises is warned about once and dropped; the run goes on. ``tracking.json``
keeps each backend's run and last step per record kind, so a resumed run continues the same
tracker run without logging a step twice (docs/tracking.md).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import atomic_write_json
from dataflex_rl.deps import require
from dataflex_rl.tracking.backends import BACKEND_CLASSES, Backend, experiment_of
from dataflex_rl.tracking.config import BACKENDS, TrackingConfig

STATE_FILE = "tracking.json"


def require_backends(config: TrackingConfig, purpose: str) -> None:
    """Raise `dataflex_rl.deps.MissingDependencyError` (naming the extra) unless every
    configured backend's library is installed; call it before any work starts."""
    for name in config.backends:
        require(BACKENDS[name], f"{purpose}: tracking.backends '{name}'")
        if name == "mlflow" and (config.mlflow.tracking_uri or "sqlite:").startswith("sqlite:"):
            for module in ("sqlalchemy", "alembic"):
                require(module, f"{purpose}: tracking.backends 'mlflow' (a SQLite store)")


def prepare_store(config: TrackingConfig) -> None:
    """Create the MLflow database and experiment of a shared ``mlflow.tracking_uri`` once,
    before worker processes open runs in it (concurrent first opens of one SQLite file race
    on its table creation). A failure is left to each run to report."""
    if "mlflow" not in config.backends or not config.mlflow.tracking_uri:
        return
    try:
        from mlflow.tracking import MlflowClient

        uri = config.mlflow.tracking_uri
        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        experiment_of(MlflowClient(tracking_uri=uri), config, uri)
    except Exception:  # noqa: BLE001  (each run warns when it cannot open)
        pass


def finite_numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The entries of a record a tracker can plot: finite numbers (bools excluded)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class Tracker:
    """The open backends of one run.

    Build it with `Tracker.start`; then `log` every record (kind, step, metrics),
    `log_files` at the end and `close` (or use it as a context manager, which closes it as
    failed when the block raises). With no backends configured every call does nothing.
    """

    def __init__(self, run_dir: Path, backends: Sequence[Backend] = ()) -> None:
        self.run_dir = run_dir
        self.backends = list(backends)
        self.states: dict[str, dict] = {}
        #: backend name -> record kind -> last step it already holds (skipped when logged again)
        self.skip: dict[str, dict[str, int]] = {}
        #: record kind -> last step offered
        self.logged: dict[str, int] = {}
        self.last_step = 0

    @classmethod
    def start(
        cls,
        config: TrackingConfig,
        run_dir: str | Path,
        *,
        params: dict[str, Any],
        tags: dict[str, str],
        first_step: int = 0,
        history: Iterable[dict] = (),
        logged: dict[str, int] | None = None,
    ) -> Tracker:
        """Open every configured backend. ``history`` (records in ``metrics.jsonl``) goes to
        a backend new to this run, and from ``first_step`` on to TensorBoard; ``logged``:
        kind -> last step a previous session logged."""
        run_dir = Path(run_dir)
        tracker = cls(run_dir)
        if not config.backends:
            return tracker
        saved = read_state(run_dir)
        before = dict(saved.get("logged", {}))
        for kind, step in (logged or {}).items():
            before[kind] = max(step, before.get(kind, step))
        name = config.run_name or run_dir.resolve().name
        tags = {**config.tags, **tags}
        history = list(history)
        for backend_name in config.backends:
            backend = BACKEND_CLASSES[backend_name](config, run_dir, name)
            state = saved.get(backend_name)
            opened = tracker._call(
                backend, "opening", lambda b=backend, s=state: b.open(params, tags, s, first_step)
            )
            if opened is None:
                continue
            tracker.backends.append(backend)
            tracker.states[backend_name] = opened
            if state is None:
                replay = history
            else:
                replay = [r for r in history if r["step"] >= first_step] if backend.purges else []
                if not backend.purges:
                    tracker.skip[backend_name] = before
            for r in replay:
                values = {k: v for k, v in r.items() if k not in ("kind", "step")}
                tracker._send(backend, r["kind"], r["step"], finite_numbers(values))
        tracker.logged = before
        tracker._save()
        return tracker

    def log(self, kind: str, step: int, metrics: dict[str, Any]) -> None:
        """Send one record to every backend that does not hold it yet."""
        values = finite_numbers(metrics)
        for backend in list(self.backends):
            self._send(backend, kind, step, values)
        self.logged[kind] = max(step, self.logged.get(kind, step))
        self.last_step = max(self.last_step, step)

    def log_files(self, images: Sequence[Path] = (), files: Sequence[Path] = ()) -> None:
        """Log ``images`` (plots) and ``files`` (summaries, reports) at the last step logged."""
        if not images and not files:
            return
        images, files = [Path(p) for p in images], [Path(p) for p in files]
        for backend in list(self.backends):
            self._call(
                backend,
                "logging files",
                lambda b=backend: b.log_files(self.last_step, images, files),
            )

    def close(self, failed: bool = False) -> None:
        """Close every backend (``failed``: mark the tracker run failed where the tracker
        records it) and save ``tracking.json``."""
        for backend in list(self.backends):
            self._call(backend, "closing", lambda b=backend: b.close(failed))
        self.backends = []
        if self.states:
            self._save()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)

    def _send(self, backend: Backend, kind: str, step: int, values: dict[str, float]) -> None:
        if step <= self.skip.get(backend.name, {}).get(kind, -1) or not values:
            return
        self._call(backend, f"logging step {step}", lambda: backend.log(step, values))

    def _call(self, backend: Backend, what: str, fn) -> Any:
        """``fn()``; on an exception warn once and drop ``backend`` (None is returned)."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001  (a tracker never breaks the run)
            warnings.warn(
                f"tracking: {backend.name} failed while {what} ({type(e).__name__}: {e}); "
                f"it is off for the rest of this run (metrics.jsonl in {self.run_dir} has "
                "every record)",
                UserWarning,
                stacklevel=3,
            )
            if backend in self.backends:
                self.backends.remove(backend)
                if what != "closing":
                    try:
                        backend.close(True)
                    except Exception:  # noqa: BLE001  (already reported)
                        pass
            return None

    def _save(self) -> None:
        atomic_write_json(
            self.run_dir / STATE_FILE,
            {**read_state(self.run_dir), **self.states, "logged": self.logged},
        )


def read_state(run_dir: Path) -> dict:
    """The run folder's ``tracking.json`` (empty when missing or unreadable)."""
    try:
        state = json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}
