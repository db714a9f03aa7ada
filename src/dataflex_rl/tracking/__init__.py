"""Experiment trackers (TensorBoard, Weights & Biases, MLflow) for engine runs and harness
reports, configured by a ``tracking:`` section (docs/tracking.md).

Sits between the hosts' shared code and the engine/harness: it uses only ``core`` and
``deps``, and imports each tracker's library only when a run opens it. `stores` reads runs
back from the trackers' stores (``report --from-tracker``), with the same libraries.
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
