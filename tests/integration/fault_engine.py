"""Helpers that test_faults.py runs in other processes (so that they can be killed).

* `slow_training`: a stand-in engine for ``compare`` whose runs labelled ``slow`` leave a
  checkpoint folder and then wait for ``<out>/release`` before finishing like
  tests/unit/harness/fake_engine.py (every call appends its pid to ``<out>/pids.log``).
* `unusable_checkpoint_training`: raises the engine's `CheckpointError` when asked to resume
  (as when every checkpoint of a run is corrupt).
* ``python -m tests.integration.fault_engine compare OUT``: ``run_compare`` on `EXPERIMENT`
  with `slow_training`, one worker (the baseline, then the slow run).
* ``python -m tests.integration.fault_engine train OUT KILL_AT``: a tiny engine run (`TINY`)
  that SIGKILLs itself at its KILL_AT-th file operation (a durable write, a rename or a
  metrics append), so a kill lands at a chosen point, including inside a checkpoint save.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from tests.unit.harness import fake_engine

SLOW = "tests.integration.fault_engine:slow_training"
UNUSABLE = "tests.integration.fault_engine:unusable_checkpoint_training"
TINY = {
    "policy": "tiny",
    "steps": 4,
    "threads": 1,
    "grpo": {"prompts_per_step": 4, "group_size": 2},
    "tasks": {"train_size": 30},
    "eval": {"per_domain": 4, "samples": 0, "every": 2},
    "log": {"progress": False, "plots": False, "checkpoint_every": 1},
}
#: every mechanism, so every part of the state is exercised (scorer windows, mixing
#: proportions, prompt history, pre-rollout sampler and RNG)
TINY_STRATEGY = str(
    Path(__file__).resolve().parents[2] / "configs" / "strategies" / "everything.yaml"
)


EXPERIMENT = {
    "name": "faults",
    "seeds": 1,
    "strategies": ["baseline", {"label": "slow", "strategy": "baseline"}],
    "engine": {"tasks": {"domains": ["math", "logic", "science"]}},
    "budget": {"steps": 2, "prompts_per_step": 4, "samples_per_prompt": 2},
    "evaluation": {"every": 1, "per_domain": 5},
    "statistics": {"n_boot": 200},
}


def experiment():
    from dataflex_rl.harness.running.experiment import parse_experiment

    return parse_experiment(EXPERIMENT)


def slow_training(config, strategy, *, seed, out_dir, resume):
    out = Path(out_dir)
    root = out.parents[2]
    with (root / "pids.log").open("a") as f:
        f.write(f"{os.getpid()}\n")
    if strategy["name"] == "slow":
        (out / "checkpoints" / "step-00000001").mkdir(parents=True, exist_ok=True)
        while not (root / "release").exists():
            time.sleep(0.05)
    return fake_engine.run_training(config, strategy, seed=seed, out_dir=out_dir, resume=resume)


def unusable_checkpoint_training(config, strategy, *, seed, out_dir, resume):
    """As the engine does when every checkpoint of a run is corrupt (on resume)."""
    from dataflex_rl.hosts.engine.checkpoint import CheckpointError

    if resume:
        raise CheckpointError(
            f"no intact checkpoint: {out_dir}/checkpoints/step-00000001/model.safetensors: missing"
        )
    return fake_engine.run_training(config, strategy, seed=seed, out_dir=out_dir, resume=resume)


def _compare(out: str) -> None:
    from dataflex_rl.harness.running.compare import run_compare

    run_compare(experiment(), out, workers=1, progress=False, plots=False, train_fn=SLOW)


def _train(out: str, kill_at: int) -> None:
    """Run `TINY` and SIGKILL this process at the ``kill_at``-th file operation."""
    from dataflex_rl.core import io as dio
    from dataflex_rl.hosts.engine import checkpoint, runlog
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.run import run_training

    count = [0]

    def tick() -> None:
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def hooked(fn):
        def call(*args, **kwargs):
            tick()
            return fn(*args, **kwargs)

        return call

    dio.write_durable = hooked(dio.write_durable)
    checkpoint.os.replace = hooked(os.replace)  # the module's `os` is the global one
    runlog.MetricsWriter.write = hooked(runlog.MetricsWriter.write)
    run_training(load_config(TINY), TINY_STRATEGY, seed=5, out_dir=out)
    print(f"file operations: {count[0]}")


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        _compare(sys.argv[2])
    else:
        _train(sys.argv[2], int(sys.argv[3]))
