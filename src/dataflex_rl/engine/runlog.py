"""The metrics log of an engine run: ``metrics.jsonl`` (one JSON record per line) and
TensorBoard scalars when asked. Training writes it; plots, resume and the harness read it.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import atomic_write_text
from dataflex_rl.core.registry import ConfigError

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"


class MetricsWriter:
    """Appends JSON lines to ``metrics.jsonl`` and, when asked, TensorBoard scalars."""

    def __init__(self, out_dir: Path, tensorboard: bool) -> None:
        self.path = out_dir / METRICS_FILE
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError(
                    "log.tensorboard: true needs the 'tensorboard' package "
                    f"(pip install tensorboard): {e}"
                ) from e
            self.tb = SummaryWriter(str(out_dir / "tb"))

    def truncate(self, step: int) -> None:
        """Drop records after a checkpoint at ``step`` (train steps >= step, evals > step).

        A last line cut by a kill (not valid JSON) is dropped with a warning; afterwards the
        file is valid JSONL with one train record per step before ``step``.
        """
        if not self.path.is_file():
            return
        records = parse_metrics(self.path, torn_tail_ok=True)
        keep = [
            r for r in records if r["step"] < step or (r["kind"] == "eval" and r["step"] <= step)
        ]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))

    def write(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        record = {"kind": kind, **metrics, "step": step}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def parse_metrics(path: Path, *, torn_tail_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file.

    Args:
        torn_tail_ok: drop (with a warning) a last line that is not valid JSON, as a kill in
            the middle of a write leaves it.

    Raises:
        ConfigError: a line that is not valid JSON (naming the file and line).
    """
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
