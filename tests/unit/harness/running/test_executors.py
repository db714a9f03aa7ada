"""harness/running/executors.py and launch.py without a Ray cluster: GPUs per local worker, a
run launched as a process (its record, its death, its process group), and ``--executor ray``
refused without the extra. The Ray executor itself runs in tests/integration/test_ray_executor.py.
"""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dataflex_rl.cli import main
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.executors import (
    LocalExecutor,
    device_sets,
    make_executor,
    thread_env,
    visible_gpus,
)
from dataflex_rl.harness.running.experiment import Resources
from dataflex_rl.harness.running.launch import PYTHON, RECORD_MARK, Launch, run_launch
from dataflex_rl.harness.running.supervisor import (
    Progress,
    default_workers,
    run_processes,
    supervise,
)

ROOT = Path(__file__).resolve().parents[4]
LAUNCH = "src/dataflex_rl/harness/running/launch.py"


# ------------------------------------------------------------------ GPUs of local workers
def test_device_sets_split_the_visible_gpus_in_order():
    assert device_sets(["0", "1", "2", "3"], 2) == ["0,1", "2,3"]
    # 5 GPUs at 2 per run: two sets, GPU 4 is left unused rather than shared
    assert device_sets(["0", "1", "2", "3", "4"], 2) == ["0,1", "2,3"]
    assert device_sets(["GPU-a", "GPU-b"], 1) == ["GPU-a", "GPU-b"]
    assert device_sets(["3", "1"], 1.0) == ["3", "1"]  # CUDA_VISIBLE_DEVICES order is kept
    with pytest.raises(ConfigError, match=r"gpus_per_run: 3 GPU\(s\) per run, but this machine "):
        device_sets(["0", "1"], 3)
    with pytest.raises(ConfigError, match=r"whole GPUs, got 0.5 \(fractions share a GPU on"):
        device_sets(["0"], 0.5)


def test_visible_gpus_reads_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 5,7"}) == ["2", "5", "7"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []


def test_local_workers_follow_cpus_and_device_sets(monkeypatch):
    monkeypatch.setattr("dataflex_rl.harness.running.executors.default_workers", lambda: 16)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5")
    assert LocalExecutor().slots(100) == 16  # one worker per core
    assert LocalExecutor(cpus_per_run=4).slots(100) == 4
    assert LocalExecutor(cpus_per_run=4).slots(3) == 3  # never more workers than runs
    # 6 GPUs at 2 per run: 3 workers however many cores, each with its own pair
    local = LocalExecutor(gpus_per_run=2)
    assert local.slots(100) == 3 and LocalExecutor(workers=8, gpus_per_run=2).slots(100) == 3
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    # each worker: its own device set, and 16 cores // 3 workers = 5 threads
    threads = {"OMP_NUM_THREADS": "5", "MKL_NUM_THREADS": "5"}
    assert local.worker_envs(3) == [
        {"CUDA_VISIBLE_DEVICES": d, **threads} for d in ("0,1", "2,3", "4,5")
    ]
    assert LocalExecutor().device_envs() is None  # no GPUs asked for
    # no GPUs: threads only, 16 cores // 2 workers
    assert LocalExecutor().worker_envs(2) == [{"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}] * 2
    assert thread_env(32) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # at least 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's setting wins: nothing added
    assert thread_env(2) == {} and LocalExecutor().worker_envs(2) == [{}, {}]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match=r"1 GPU\(s\) per run, but this machine shows 0"):
        LocalExecutor(gpus_per_run=1).start(Path("."))


@dataclass(frozen=True)
class Job:
    method: str
    seed: int
    steps: int = 1


def report_worker(job: Job) -> dict:
    """What a worker process sees: its devices, its threads (torch imported in the worker
    after its environment is set) and its pid."""
    import torch

    time.sleep(0.3)  # both workers take a job
    return {
        "status": "done",
        "method": job.method,
        "seed": job.seed,
        "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }


def test_each_worker_process_keeps_its_own_devices():
    jobs = [Job("j", s) for s in range(6)]
    bar = Progress(len(jobs), 0, 1, lambda job: 0, workers=2, show=False)
    envs = [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}]
    records = supervise(jobs, report_worker, 2, bar, worker_envs=envs)
    by_pid: dict[int, set] = {}
    for r in records:
        by_pid.setdefault(r["pid"], set()).add(r["devices"])
    # two processes, each with one device set for its whole life, never the same one
    assert sorted(d for s in by_pid.values() for d in s) == ["0,1", "2,3"]
    assert all(len(s) == 1 for s in by_pid.values())


def test_local_workers_do_not_oversubscribe_the_cores(monkeypatch):
    """Two workers on this machine: each run's torch gets cores // 2 threads (at least 1),
    not one per core each."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    jobs = [Job("j", s) for s in range(2)]
    bar = Progress(len(jobs), 0, 1, lambda job: 0, workers=2, show=False)
    records = LocalExecutor(workers=2).run(jobs, report_worker, None, bar)
    expected = max(1, default_workers() // 2)
    assert sorted(r["seed"] for r in records) == [0, 1]
    assert {(r["omp"], r["torch_threads"]) for r in records} == {(str(expected), expected)}


@dataclass(frozen=True)
class OwnPythonJob:
    """A run of a host with its own Python (``python`` set): the executor starts it."""

    method: str
    seed: int
    steps: int = 1
    python: str = sys.executable


#: what a launched run reports: its parent, its slot's devices and threads
REPORT = (
    "import os, json; print('@@dataflex-record@@ ' + json.dumps({'status': 'done', "
    "'method': 'm', 'seed': int(os.environ['SEED']), 'ppid': os.getppid(), "
    "'devices': os.environ.get('CUDA_VISIBLE_DEVICES'), 'omp': os.environ.get('OMP_NUM_THREADS')}))"
)


def report_launch(job) -> Launch:
    return Launch(
        (PYTHON, "-c", REPORT),
        run_dir=str(ROOT / "runs" / "x"),
        method="m",
        seed=job.seed,
        env={"SEED": str(job.seed)},
    )


def test_a_host_with_its_own_python_runs_each_run_as_a_process_of_the_harness():
    """No worker process between the harness and a run: the run's parent is the process that
    started it (`die_with_starter` execs in place); each slot keeps its own devices."""
    jobs = [OwnPythonJob("m", s) for s in range(4)]
    bar = Progress(len(jobs), 0, 1, lambda job: 0, workers=2, show=False)
    envs = [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    records = run_processes(jobs, report_launch, 2, bar, envs)
    assert sorted(r["seed"] for r in records) == [0, 1, 2, 3]
    assert {r["ppid"] for r in records} == {os.getpid()}
    assert {r["devices"] for r in records} <= {"0", "1"}


def test_the_local_executor_starts_own_python_runs_directly(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    jobs = [OwnPythonJob("m", s) for s in range(2)]
    bar = Progress(len(jobs), 0, 1, lambda job: 0, workers=2, show=False)
    never = "tests.unit.harness.running.test_executors:report_worker"  # not called
    records = LocalExecutor(workers=2).run(jobs, never, report_launch, bar)
    assert sorted(r["seed"] for r in records) == [0, 1]
    assert {(r["ppid"], r["omp"]) for r in records} == {(os.getpid(), "1")}


def test_a_run_whose_process_dies_fails_alone():
    code = (
        "import os, json, sys; os._exit(3) if os.environ['SEED'] == '0' else None; "
        + REPORT[len("import os, json; ") :]
    )
    jobs = [OwnPythonJob("m", s) for s in range(2)]
    bar = Progress(len(jobs), 0, 1, lambda job: 0, workers=1, show=False)

    def launch_of(job):
        return Launch(
            (PYTHON, "-c", code),
            run_dir=str(ROOT / "runs" / "x"),
            method="m",
            seed=job.seed,
            env={"SEED": str(job.seed)},
        )

    records = {r["seed"]: r for r in run_processes(jobs, launch_of, 1, bar)}
    assert records[0]["status"] == "failed" and "exit code 3" in records[0]["error"]
    assert records[1]["status"] == "done"


# ------------------------------------------------------------------ a run as a process
def launch(code: str, **kw) -> Launch:
    return Launch((PYTHON, "-c", code), run_dir=str(ROOT / "runs" / "x"), method="m", seed=3, **kw)


def test_run_launch_returns_the_record_the_process_printed(tmp_path):
    code = (
        "import os, sys, json; data = sys.stdin.read(); print('noise'); "
        f"print({RECORD_MARK!r} + json.dumps({{'status': 'done', 'got': data, "
        "'env': os.environ['X_TEST'], 'cwd': os.getcwd()}))"
    )
    record = run_launch(launch(code, stdin="hello", env={"X_TEST": "7"}, cwd=str(tmp_path)))
    assert record == {"status": "done", "got": "hello", "env": "7", "cwd": str(tmp_path)}


def test_a_process_dying_without_a_record_is_a_failure_with_its_stderr(tmp_path):
    code = "import os, sys; sys.stderr.write('out of memory, say'); sys.stderr.flush(); os._exit(3)"
    record = run_launch(launch(code, cwd=str(tmp_path)))
    assert record["status"] == "failed" and (record["method"], record["seed"]) == ("m", 3)
    assert record["error"] == "RunDied: the run's process ended (exit code 3) without a record"
    assert record["traceback"] == "out of memory, say"


def test_an_interrupted_launch_kills_the_runs_whole_process_group(tmp_path):
    # the run starts a grandchild; an interruption of the wait (a cancelled Ray task raises
    # KeyboardInterrupt there) kills both
    pids = tmp_path / "pids.json"
    code = (
        "import json, os, subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pids)!r}, 'w').write(json.dumps([os.getpid(), g.pid])); time.sleep(60)"
    )

    def interrupt_once_running(pid):
        deadline = time.time() + 30
        while not pids.exists() and time.time() < deadline:
            time.sleep(0.05)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_launch(launch(code, cwd=str(tmp_path)), on_start=interrupt_once_running)
    for pid in json.loads(pids.read_text()):
        assert not _alive(pid), pid


def test_a_launched_run_dies_with_the_process_that_started_it(tmp_path):
    # a starter (as a Ray worker) launches a run, then is SIGKILLed, with no chance to clean up
    # (a forced cancel): the kernel kills the run (parent-death signal set before its exec)
    marker = tmp_path / "running"
    starter = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("launch", {str(ROOT / LAUNCH)!r})
launch = sys.modules["launch"] = importlib.util.module_from_spec(spec)  # no package import
spec.loader.exec_module(launch)
code = "import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
launch.run_launch(launch.Launch(("python", "-c", code), {str(tmp_path)!r}, "m", 0))
"""
    proc = subprocess.Popen([sys.executable, "-c", starter])
    deadline = time.time() + 30
    while not (marker.exists() and marker.read_text()) and time.time() < deadline:
        assert proc.poll() is None, "the starter failed"
        time.sleep(0.05)
    run_pid = int(marker.read_text())
    proc.kill()
    proc.wait()
    assert not _alive(run_pid)


def _alive(pid: int) -> bool:
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie (killed, not yet reaped by its parent) is not running
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return False
        except OSError:
            return False
        time.sleep(0.1)
    return True


# ------------------------------------------------------------------ ray without the extra
def test_ray_without_the_extra_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r'--executor ray needs \'ray\'.*"dataflex-rl\[ray\]"'):
        make_executor("ray", Resources())
    with pytest.raises(ConfigError, match=r"--address names a Ray cluster"):
        make_executor("local", Resources(), address="auto")


def test_compare_executor_ray_without_ray_refuses_before_any_work(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)
    out = tmp_path / "out"
    exp = ROOT / "configs" / "experiments" / "quick.yaml"
    assert main(["compare", str(exp), "--executor", "ray", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "dataflex-rl compare --executor ray needs 'ray'" in err
    assert 'pip install "dataflex-rl[ray]"' in err and "Traceback" not in err
    assert not out.exists()  # nothing written, nothing started
    # the experiment file's key is refused the same way
    assert main(["compare", str(exp), "executor=ray", "--out", str(out)]) == 2
    assert "dataflex-rl[ray]" in capsys.readouterr().err and not out.exists()
