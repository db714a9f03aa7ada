"""The metrics log of an engine run: ``metrics.jsonl`` (one JSON record per line), copied to
the configured experiment trackers (`dataflex_rl.tracking`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import atomic_write_text
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tracking import Tracker

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"


class MetricsWriter:
    """Appends JSON lines to ``metrics.jsonl``, and each record to ``tracker`` when set."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / METRICS_FILE
        self.tracker: Tracker | None = None

    def truncate(self, step: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Drop records after a checkpoint at ``step`` (train steps >= step, evals > step,
        and a last line cut by a kill); returns ``(kept, dropped)`` records."""
        if not self.path.is_file():
            return [], []
        records = parse_metrics(self.path, torn_tail_ok=True)
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        for r in records:
            before = r["step"] < step or (r["kind"] == "eval" and r["step"] <= step)
            (kept if before else dropped).append(r)
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return kept, dropped

    def write(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        record = {"kind": kind, **metrics, "step": step}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tracker is not None:
            self.tracker.log(kind, step, metrics)


def parse_metrics(path: Path, *, torn_tail_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file; `ConfigError` for a line that is not valid
    JSON, except a last one with ``torn_tail_ok`` (dropped with a warning: a kill left it)."""
    lines = [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    records = []
    for k, (i, line) in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if torn_tail_ok and k == len(lines) - 1:
                warnings.warn(
                    f"{path}: line {i} was cut off (the run was killed while writing it); dropped",
                    UserWarning,
                    stacklevel=3,
                )
                break
            raise ConfigError(
                f"{path}: line {i} is not valid JSON ({e.msg}); the metrics file is corrupt"
            ) from e
    return records


def read_metrics(out_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl``."""
    return parse_metrics(Path(out_dir) / METRICS_FILE)
