"""examples/trl/train_grpo.py runs for 2 steps on CPU (tiny model built in code) with its
defaults (the strategy YAML the verl examples use), TRL's log history carries the dataflex
metrics, and they show the strategy acting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl" / "train_grpo.py"


def run_example(tmp_path, *extra):
    """Run the example for 2 steps in a subprocess; TRL's log history of the training steps."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    out = tmp_path / "run"
    cmd = [sys.executable, str(EXAMPLE), "--steps", "2", "--output-dir", str(out), *extra]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    history = json.loads((out / "log_history.json").read_text())
    return [h for h in history if "dataflex/time_ms" in h], run.stdout


def test_the_example_defaults_train_with_the_shared_strategy_acting(tmp_path):
    """Out of the box (no --strategy: the verl examples' combined.yaml; the tiny model): the
    metrics of every mechanism are logged, rewards are mixed, and the strategy acts: select
    drops some responses and keeps others, softmax reweights the kept ones unevenly."""
    steps, stdout = run_example(tmp_path)
    assert len(steps) == 2
    for h in steps:
        for key in (
            "dataflex/kept_response_fraction",
            "dataflex/mix/domain/math/target",
            "dataflex/prerollout/candidates",
            "dataflex/trl/loss_rows_fraction",
        ):
            assert key in h, key
    assert "dataflex/kept_response_fraction" in stdout
    assert any(0.0 < h["reward"] < 1.0 for h in steps), "no mixed rewards"
    kept = [h["dataflex/kept_response_fraction"] for h in steps]
    assert any(0.0 < k < 1.0 for k in kept), f"select kept all or nothing: {kept}"
    assert all(h["dataflex/weight_ess_fraction"] < 1.0 for h in steps)  # softmax weights
