"""Settings every host takes the same way (declared once, validated like every config)."""

from __future__ import annotations

from dataclasses import dataclass

from dataflex_rl.core.config import Checked, param


@dataclass
class DecisionLogConfig(Checked):
    """Decision log: per step, the signals strategies read and the decision applied
    (Parquet, for ``dataflex-rl replay``; see docs/replay.md)."""

    enabled: bool = param(False, "write the decision log")
    dir: str = param(
        "decisions",
        "log folder (relative: under the run's output folder; on verl trainer.default_local_dir)",
    )
    steps_per_file: int = param(
        100, "steps per Parquet file (a crash loses at most the open file's steps)", ge=1
    )
    full_tokens: bool = param(
        False,
        "also log per-token advantages and old log-probs (list "
        "columns; replays token-level strategies exactly)",
    )
    token_prob_mean: bool = param(
        False,
        "also log each response's mean token probability (one "
        "pass over the tokens; replays the per-response weights "
        "of 'ar' without full_tokens)",
    )
