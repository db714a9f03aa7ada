"""The real engine, held at a checkpoint on request, for the tests of ``compare --executor ray``
on a Ray cluster of several nodes (test_ray_cluster.py), and their ``compare`` driver.

* `held_training` (`HELD`): ``engine.run.run_training`` itself, except that after each
  checkpoint it saves, while ``<study>/hold/all`` or ``<study>/hold/<label>-seed<s>`` exists,
  the run writes ``<study>/held/<label>-seed<s>.<n>`` (n: 1 for the first process of the run
  to be held, 2 for the next, ...) and waits for the hold to go. The file is JSON: the run's
  process id, its parent's (the Ray worker running the task), the raylet of the node
  (``RAY_RAYLET_PID``, which Ray sets for its workers), the step and whether the process
  resumed. A test so knows where a run is, stops it mid-way on a chosen node, and lets it go.
  The result is the engine's: holding only waits. Every process of a run appends
  ``{"run", "resumed", "raylet"}`` to ``<study>/calls.jsonl`` when it starts: where each
  attempt ran.
* ``python -m tests.integration.cluster_engine EXPERIMENT OUT ADDRESS``: ``run_compare`` of
  the experiment file on the Ray cluster at ADDRESS with `held_training`, as ``compare
  --executor ray --address ADDRESS`` would; prints ``done D skipped S failed F`` and one
  ``failed LABEL SEED: ERROR`` line per failed run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HELD = "tests.integration.cluster_engine:held_training"


def held_training(config, strategy, *, seed, steps, out_dir, resume, progress):
    from dataflex_rl.engine import run

    out = Path(out_dir)
    study, name = out.parents[2], f"{out.parent.name}-{out.name}"
    holds = [study / "hold" / "all", study / "hold" / name]
    save = run.save_checkpoint
    held = []
    with (study / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"run": name, "resumed": resume, "raylet": _raylet()}) + "\n")

    def save_then_hold(directory, state):
        path = save(directory, state)
        if any(h.exists() for h in holds):
            if not held:
                held.append(_mark(study / "held", name, state["step"], resume))
            while any(h.exists() for h in holds):
                time.sleep(0.05)
        return path

    run.save_checkpoint = save_then_hold  # this process is the run's own
    try:
        return run.run_training(
            config,
            strategy,
            seed=seed,
            steps=steps,
            out_dir=out_dir,
            resume=resume,
            progress=progress,
        )
    finally:
        run.save_checkpoint = save


def _mark(folder: Path, name: str, step: int, resumed: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    n = 1 + sum(1 for _ in folder.glob(f"{name}.*"))
    path = folder / f"{name}.{n}"
    info = {
        "pid": os.getpid(),
        "worker": os.getppid(),
        "raylet": _raylet(),
        "step": step,
        "resumed": resumed,
    }
    tmp = folder / f".{name}.{n}.tmp"
    tmp.write_text(json.dumps(info))
    tmp.replace(path)
    return path


def _raylet() -> int:
    return int(os.environ.get("RAY_RAYLET_PID", "0"))


def main(experiment: str, out: str, address: str) -> int:
    import dataclasses

    from dataflex_rl.harness.running.compare import run_compare
    from dataflex_rl.harness.running.experiment import load_experiment

    exp = dataclasses.replace(load_experiment(experiment), executor="ray")
    res = run_compare(exp, out, progress=False, plots=False, train_fn=HELD, address=address)
    ex = res.execution
    print(f"done {len(ex.done)} skipped {ex.skipped} failed {len(ex.failed)}")
    for r in ex.failed:
        print(f"failed {r['method']} {r['seed']}: {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
