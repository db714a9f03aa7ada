"""Experiment trackers (TensorBoard, Weights & Biases, MLflow) for engine runs and harness
reports, configured by a ``tracking:`` section (docs/tracking.md); `stores` reads runs back.

Uses only ``core`` and ``deps``; each tracker's library is imported when a run opens it.
"""

from dataflex_rl.tracking.config import BACKENDS, TrackingConfig, flatten
from dataflex_rl.tracking.tracker import STATE_FILE, Tracker, prepare_store, require_backends

__all__ = [
    "BACKENDS",
    "STATE_FILE",
    "Tracker",
    "TrackingConfig",
    "flatten",
    "prepare_store",
    "require_backends",
]
