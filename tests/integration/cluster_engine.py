"""Runs held at a checkpoint on request, for the tests of ``compare --executor ray`` on a Ray
cluster of several nodes (test_ray_cluster.py, tests/hosts_trl/test_trl_cluster.py), and their
``compare`` driver.

* `held_training` (`HELD`): the engine's ``hosts.engine.run.run_training`` itself, and
  `held_trl_training` (`HELD_TRL`, in TRL's Python) the TRL host's ``run_training`` itself,
  except that after each checkpoint the run saves, while ``<study>/hold/all`` or
  ``<study>/hold/<label>-seed<s>`` exists, it writes ``<study>/held/<label>-seed<s>.<n>`` (n:
  1 for the first process of the run to be held, 2 for the next, ...) and waits for the hold
  to go. The file is JSON: the run's process id, its parent's (the Ray worker running the
  task), the raylet of its node (``RAY_RAYLET_PID``, which Ray sets for its workers), the step
  and whether the process resumed. A test so knows where a run is, stops it mid-way on a
  chosen node, and lets it go. The result is the run's own: holding only waits. Every process
  of a run appends ``{"run", "resumed", "raylet"}`` to ``<study>/calls.jsonl`` when it starts:
  where each attempt ran.
* the test's side: `hold` a run (or all), wait until it is `held` (the n-th time), read where
  its processes ran (`calls`), wait until a process is `dead`.
* ``python -m tests.integration.cluster_engine EXPERIMENT OUT ADDRESS``: ``run_compare`` of
  the experiment file on the Ray cluster at ADDRESS with `held_training`, as ``compare
  --executor ray --address ADDRESS`` would; prints ``done D skipped S failed F`` (done counts
  the skipped) and one ``failed LABEL SEED: ERROR`` line per failed run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: seconds a wait on a condition may take before a test fails: generous, since every wait
#: ends as soon as its condition holds
DEADLINE = 600.0
HELD = "tests.integration.cluster_engine:held_training"
HELD_TRL = "tests.integration.cluster_engine:held_trl_training"


class Hold:
    """The holds of the run in ``out_dir`` (see the module docstring)."""

    def __init__(self, out_dir: str, resume: bool):
        out = Path(out_dir)
        self.study, self.name, self.resume = out.parents[2], f"{out.parent.name}-{out.name}", resume
        self.files = [self.study / "hold" / "all", self.study / "hold" / self.name]
        self.marked = False
        with (self.study / "calls.jsonl").open("a") as f:
            f.write(json.dumps({"run": self.name, "resumed": resume, "raylet": _raylet()}) + "\n")

    def after_checkpoint(self, step: int) -> None:
        if not any(h.exists() for h in self.files):
            return
        if not self.marked:
            self.marked = True
            self._mark(step)
        while any(h.exists() for h in self.files):
            time.sleep(0.05)

    def _mark(self, step: int) -> None:
        folder = self.study / "held"
        folder.mkdir(parents=True, exist_ok=True)
        n = 1 + sum(1 for _ in folder.glob(f"{self.name}.*"))
        info = {
            "pid": os.getpid(),
            "worker": os.getppid(),
            "raylet": _raylet(),
            "step": step,
            "resumed": self.resume,
        }
        tmp = folder / f".{self.name}.{n}.tmp"
        tmp.write_text(json.dumps(info))
        tmp.replace(folder / f"{self.name}.{n}")


def _raylet() -> int:
    return int(os.environ.get("RAY_RAYLET_PID", "0"))


def held_training(config, strategy, *, seed, out_dir, resume):
    from dataflex_rl.hosts.engine import run

    hold, save = Hold(out_dir, resume), run.save_checkpoint

    def save_then_hold(directory, state):
        path = save(directory, state)
        hold.after_checkpoint(state["step"])
        return path

    run.save_checkpoint = save_then_hold  # this process is the run's own
    try:
        return run.run_training(config, strategy, seed=seed, out_dir=out_dir, resume=resume)
    finally:
        run.save_checkpoint = save


def held_trl_training(settings, strategy, *, seed, out_dir, resume):
    """The TRL host's training function, held after each checkpoint TRL saves (transformers'
    callbacks' ``on_save`` runs once the ``checkpoint-N`` folder is complete)."""
    from transformers.trainer_callback import CallbackHandler

    from dataflex_rl.hosts.trl.run import run_training

    hold, on_save = Hold(out_dir, resume), CallbackHandler.on_save

    def on_save_then_hold(self, args, state, control):
        control = on_save(self, args, state, control)
        hold.after_checkpoint(state.global_step)
        return control

    CallbackHandler.on_save = on_save_then_hold  # this process is the run's own
    try:
        return run_training(settings, strategy, seed=seed, out_dir=out_dir, resume=resume)
    finally:
        CallbackHandler.on_save = on_save


# ------------------------------------------------------------------ the test's side
def until(condition, timeout: float = DEADLINE) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def gone(pid: int) -> bool:
    """The process has exited (a zombie is not running)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (ProcessLookupError, OSError):
        return True


def dead(pid: int) -> bool:
    return until(lambda: gone(pid), 60.0)


def hold(out: Path, name: str = "all") -> Path:
    (out / "hold").mkdir(parents=True, exist_ok=True)
    path = out / "hold" / name
    path.touch()
    return path


def held(out: Path, name: str, n: int, proc: subprocess.Popen) -> dict:
    """The ``n``-th hold of run ``name`` (cluster_engine.py), once it is held; fails at once if
    the driver exits first."""
    path = out / "held" / f"{name}.{n}"
    until(lambda: path.exists() or proc.poll() is not None)
    if not path.exists():
        proc.kill()
        raise AssertionError(f"waiting for {path}: {proc.communicate()[0][-3000:]}")
    return json.loads(path.read_text())


def calls(out: Path, name: str) -> list[tuple[bool, int]]:
    """(resumed, raylet) of each process of run ``name``, in order."""
    lines = (out / "calls.jsonl").read_text().splitlines()
    return [(c["resumed"], c["raylet"]) for c in map(json.loads, lines) if c["run"] == name]


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
