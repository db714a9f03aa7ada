"""What the experiment trackers cost an engine run.

Trains the tiny embedded engine (default engine settings: 16 prompts x 8 samples) twice from
the same seed, without trackers and with ``--backends`` (default all three, W&B offline, MLflow
in a SQLite file), and reports

- per backend, the wall time inside its calls: per step (``log``, one record per step plus the
  evaluations), and once per run (``open``: imports, database creation, W&B's service start;
  ``log_files`` and ``close``), against the mean engine step;
- the two runs' wall times (noisy on a shared machine: W&B's service process and TensorBoard's
  writer thread also use CPU outside the step).

Usage::

    .venv/bin/python benchmarks/tracking_overhead.py                 # 20 steps, all three
    .venv/bin/python benchmarks/tracking_overhead.py --steps 50 --backends mlflow
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.tracking import backends as B


class Timed:
    """Replaces ``cls.name`` by a wrapper that sums the wall time spent in it."""

    def __init__(self, cls: type, name: str) -> None:
        self.fn, self.calls, self.seconds = getattr(cls, name), 0, 0.0
        timed = self

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return timed.fn(*args, **kwargs)
            finally:
                timed.seconds += time.perf_counter() - t0
                timed.calls += 1

        setattr(cls, name, wrapper)


def run(backends: list[str], steps: int, out: Path) -> dict:
    cfg = load_config(
        {
            "steps": steps,
            "eval": {"every": 0, "per_domain": 50, "samples": 0},
            "log": {"progress": False, "plots": True, "checkpoint_every": 0},
            "tracking": {"backends": backends, "project": "overhead"},
        }
    )
    t0 = time.perf_counter()
    summary = run_training(cfg, "maxvar", seed=0, out_dir=out)
    return {"wall": time.perf_counter() - t0, "step": summary["mean_step_seconds"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--backends", nargs="+", default=["tensorboard", "wandb", "mlflow"])
    args = p.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    timers = {
        (name, method): Timed(B.BACKEND_CLASSES[name], method)
        for name in args.backends
        for method in ("open", "log", "log_files", "close")
    }
    with tempfile.TemporaryDirectory() as tmp:
        plain = run([], args.steps, Path(tmp) / "plain")
        tracked = run(args.backends, args.steps, Path(tmp) / "tracked")
    step_ms = 1000 * tracked["step"]
    print(f"engine: {args.steps} steps, mean step {step_ms:.0f} ms (tracked run)")
    print(
        f"{'backend':<12} {'log ms/record':>14} {'% of a step':>12} {'open s':>8} "
        f"{'files+close s':>14}"
    )
    for name in args.backends:
        log = timers[(name, "log")]
        per = 1000 * log.seconds / max(log.calls, 1)
        once = timers[(name, "log_files")].seconds + timers[(name, "close")].seconds
        print(
            f"{name:<12} {per:>14.2f} {100 * per / step_ms:>11.2f}% "
            f"{timers[(name, 'open')].seconds:>8.2f} {once:>14.2f}"
        )
    print(
        f"run wall: {plain['wall']:.1f} s without trackers, {tracked['wall']:.1f} s with "
        f"{', '.join(args.backends)} (+{tracked['wall'] - plain['wall']:.1f} s)"
    )


if __name__ == "__main__":
    main()
