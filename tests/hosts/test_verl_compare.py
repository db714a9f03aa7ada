"""``dataflex-rl compare`` on a verl experiment (``host: verl``), end to end on CPU.

Each run is ``python -m verl.trainer.main_ppo`` (the real v1 sync pipeline, trainer mode
``dataflex``) started by the verl host's training function in this venv's Python; only
generation is scripted and the platform shimmed, through the experiment's own ``verl.modules``
and ``verl.env`` (what a user with an agent loop or platform of their own sets too).

2 arms x 2 seeds x 4 steps, validation and a checkpoint at every step. The scripted held-out
answers change with the step (``solved_from``), so every results.csv cell is known by hand;
``evaluation.per_domain: 3`` keeps the first 3 prompts of each data source (the run's
``held_out.parquet``, verl's data.val_files):

    math  rows (solved_by, solved_from): (1,0) (1,0) (1,1) [(1,2) left out]  -> 2/3, then 3/3
    logic rows: (1,0) (0,0)                                                  -> 1/2 at every step

The first ``compare`` (local worker processes) is stopped (SIGTERM) once a run has saved its
step-1 checkpoint; the rerun, through the Ray executor (a local cluster; each verl run starts
its own Ray instance inside its task, ``verl.ray: own``), resumes the stopped runs from verl's
checkpoints and runs the rest. Then one run with ``verl.ray: join`` on a running cluster.
The module took 10.8 minutes on 2 shared cores at load 11-19 (a verl start costs 75-125 s
there, a step about 2 s).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from tests.hosts.verl_e2e_run import (  # noqa: E402
    CPU_ENV,
    ROOT,
    SHIMS,
    base_overrides,
    build_dataset,
    build_model,
)

pytestmark = pytest.mark.e2e

STEPS = 4
CUSTOM = ROOT / "examples" / "custom_strategy"
EXPECTED = {("math", 0): 2 / 3} | {("math", s): 1.0 for s in range(1, STEPS + 1)}
EXPECTED |= {("logic", s): 0.5 for s in range(STEPS + 1)}


def experiment(work: Path) -> Path:
    build_model(work / "model")
    build_dataset(
        work / "train.parquet", [("math", 1), ("logic", 4), ("math", 2), ("logic", 0)] * 2
    )
    build_dataset(
        work / "val_math.parquet", [("math", 1, 0), ("math", 1, 0), ("math", 1, 1), ("math", 1, 2)]
    )
    build_dataset(work / "val_logic.parquet", [("logic", 1, 0), ("logic", 0, 0)])
    exp = {
        "name": "verl_cpu",
        "host": "verl",
        # a strategy file built from the user's own components (module:attr): importable in
        # compare (PYTHONPATH) and, through the run's environment, in verl's trainer actor
        "strategies": ["baseline", {"label": "custom", "strategy": str(CUSTOM / "strategy.yaml")}],
        "seeds": 2,
        "budget": {"steps": STEPS, "prompts_per_step": 4, "samples_per_prompt": 4},
        "evaluation": {"metric": "greedy", "every": 1, "per_domain": 3},
        "verl": {
            "python": sys.executable,
            "model": "model",  # relative: to this file's folder
            "train_files": "train.parquet",
            "val_files": ["val_math.parquet", "val_logic.parquet"],
            "modules": [SHIMS],
            "env": {**CPU_ENV, "PYTHONPATH": str(ROOT)},
            "dataflex": {"poll_interval": 0.1},
            "overrides": base_overrides(work),
        },
    }
    path = work / "verl_cpu.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    return path


def compare(path: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{ROOT}:{CUSTOM}:{os.environ.get('PYTHONPATH', '')}",
        **(env or {}),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dataflex_rl.cli",
            "compare",
            str(path),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
            *extra,
        ],
        cwd=path.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def verl_processes(root: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(root) in line and "ps -eo" not in line]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    work = tmp_path_factory.mktemp("verl_compare")
    path, out = experiment(work), work / "out"
    first = compare(path, out)
    ckpt = out / "runs" / "baseline" / "seed0" / "ckpt" / "latest_checkpointed_iteration.txt"
    # generous: the wait ends when the checkpoint appears (a starved machine took over 400 s)
    deadline = time.monotonic() + 1200
    while not ckpt.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ckpt.exists(), first.communicate()[0][-4000:]
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    time.sleep(2)
    left = verl_processes(out)
    second = compare(path, out, "--executor", "ray")  # each run's own Ray inside a Ray task
    log = second.communicate(timeout=900)[0]
    assert second.returncode == 0, log[-6000:]
    return out, left, log


def test_results_are_read_from_verls_validation_at_every_step(study):
    out, _, _ = study
    rows = pd.read_csv(out / "results.csv")
    got = {(r.method, r.seed, r.benchmark, r.step): r.score for r in rows.itertuples()}
    want = {
        (m, s, d, step): score
        for m in ("baseline", "custom")
        for s in (0, 1)
        for (d, step), score in EXPECTED.items()
    }
    assert got == pytest.approx(want)
    assert (out / "statistics.csv").is_file()
    report = (out / "report.md").read_text()
    assert "pairing check passed" in report
    assert "data order (data.seed)" in report and "not paired by verl" in report


def test_the_stopped_run_resumed_from_verls_checkpoint(study):
    out, left, _ = study
    assert left == [], "a verl process outlived the stopped compare"
    run = out / "runs" / "baseline" / "seed0"
    done = json.loads((run / "done.json").read_text())
    assert done["resumed"] is True
    attempts = sorted((run / "verl_metrics").glob("attempt-*.jsonl"))
    assert len(attempts) == 2
    resumed = [json.loads(x)["step"] for x in attempts[1].read_text().splitlines()]
    assert 1 <= resumed[0] < STEPS and resumed[-1] == STEPS  # from a checkpoint mid-way
    log = (run / "verl_log" / "attempt-2.txt").read_text()
    assert "Resuming from" in log and "restored strategy state" in log


def test_every_seed_is_set_and_the_strategy_reaches_verl(study):
    out, _, _ = study
    for method in ("baseline", "custom"):
        for seed in (0, 1):
            run = out / "runs" / method / f"seed{seed}"
            argv = json.loads((run / "verl_log" / "attempt-1.json").read_text())["argv"]
            assert f"data.seed={seed}" in argv
            assert f"actor_rollout_ref.rollout.seed={seed}" in argv
            assert f"++dataflex.seed={seed}" in argv
            # evaluation.per_domain: the first 3 prompts of each data source, in file order
            assert f"data.val_files={run.resolve() / 'held_out.parquet'}" in argv
            held = pd.read_parquet(run / "held_out.parquet")
            assert list(held["data_source"]) == ["math"] * 3 + ["logic"] * 2
            assert [e["solved_from"] for e in held["extra_info"]] == [0, 0, 1, 0, 0]
            assert yaml.safe_load((run / "dataflex_strategy.yaml").read_text())["name"] == method
    run = out / "runs" / "custom" / "seed1"
    assert "my_strategies:ShortAdvantage" in (run / "dataflex_strategy.yaml").read_text()
    steps = [json.loads(x)["data"] for x in (run / "verl_metrics" / "attempt-1.jsonl").open()]
    # the user's selector ran inside verl's trainer actor: its metrics in verl's log
    assert "dataflex/kept_response_fraction" in steps[1]


#: a process holding a Ray cluster with one (fake) GPU until its stdin closes
HEAD = (
    "import ray, sys; ray.init(num_cpus=16, num_gpus=1, include_dashboard=False); "
    "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read()"
)


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    """One run with ``verl.ray: join`` through ``--executor ray`` on a running cluster."""
    work = tmp_path_factory.mktemp("verl_join")
    path, out = experiment(work), work / "out"
    data = yaml.safe_load(path.read_text())
    data.update(strategies=["baseline"], seeds=1, executor="ray")
    data["budget"]["steps"] = 2
    data["resources"] = {"cpus_per_run": 1, "gpus_per_run": 0}  # verl's placement groups take it
    data["verl"]["ray"] = "join"
    data["verl"]["overrides"] = [o for o in data["verl"]["overrides"] if "ray_init.num_" not in o]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        address = head.stdout.readline().strip()
        run = compare(path, out, "--address", address, env={"RAY_AUTH_MODE": "disabled"})
        log = run.communicate(timeout=600)[0]
        assert run.returncode == 0, log[-6000:]
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
    return out, address


def test_a_join_run_places_verls_workers_on_the_cluster_its_task_runs_on(joined):
    out, address = joined
    rows = pd.read_csv(out / "results.csv")
    got = {(r.benchmark, r.step): r.score for r in rows.itertuples()}
    assert got == pytest.approx({k: v for k, v in EXPECTED.items() if k[1] <= 2})
    log = (out / "runs" / "baseline" / "seed0" / "verl_log" / "attempt-1.txt").read_text()
    assert f"Connecting to existing Ray cluster at address: {address}" in log
