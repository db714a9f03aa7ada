"""examples/trl/train_grpo.py runs for 2 steps on CPU (tiny model built in code) with the
strategy YAML the verl examples use, and TRL's log history carries the dataflex metrics."""

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
SHARED_YAML = ROOT / "examples" / "verl" / "strategies" / "combined.yaml"


def test_the_example_trains_two_steps_with_the_shared_strategy(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    out = tmp_path / "run"
    cmd = [sys.executable, str(EXAMPLE), "--steps", "2", "--output-dir", str(out)]
    cmd += ["--prompts-per-domain", "16", "--strategy", str(SHARED_YAML)]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "dataflex/time_ms" in h]
    assert len(steps) == 2
    for h in steps:
        for key in (
            "dataflex/kept_response_fraction",
            "dataflex/mix/domain/math/target",
            "dataflex/prerollout/candidates",
            "dataflex/trl/loss_rows_fraction",
        ):
            assert key in h, key
    assert "dataflex/kept_response_fraction" in run.stdout


def test_the_example_defaults_to_the_verl_examples_strategy():
    text = EXAMPLE.read_text()
    assert 'HERE.parent / "verl" / "strategies" / "combined.yaml"' in text
    assert SHARED_YAML.is_file()
