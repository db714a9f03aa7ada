"""``compare --executor ray`` on a local Ray cluster on CPU (one per module: 2 CPUs, no
dashboard): a failing run reports its traceback while the others finish; SIGTERM of ``compare``
cancels every task it submitted and kills their runs, and a rerun reuses every finished run; the
checks made before anything is submitted.

The real engine's results through Ray, byte for byte those of the local executor, and a
``compare`` killed outright (SIGKILL) are tests/integration/test_ray_cluster.py's, on a cluster
of several nodes (the slow tier).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.compare import run_compare
from tests.unit.harness.running.test_runner import FAKE, experiment

ray = pytest.importorskip("ray")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    """A local cluster for the module; its address, for drivers in other processes."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


#: seconds a wait on a condition may take before the test fails: generous, since every wait
#: ends as soon as its condition holds (a Ray worker's start took over 120 s under load)
DEADLINE = 600.0


def until(condition, timeout: float = DEADLINE) -> bool:
    """Poll ``condition()`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def free_cpus_become(n: float, timeout: float = DEADLINE) -> bool:
    return until(lambda: ray.available_resources().get("CPU", 0.0) == n, timeout)


def test_a_run_failing_on_a_node_reports_its_traceback_and_the_others_finish(cluster, tmp_path):
    exp = dataclasses.replace(
        experiment(strategies=["baseline", {"label": "broken", "strategy": "baseline"}]),
        executor="ray",
    )
    res = run_compare(exp, tmp_path, progress=False, plots=False, train_fn=FAKE)
    assert [(r["method"], r["status"]) for r in res.execution.results] == [
        ("baseline", "done"),
        ("broken", "failed"),
    ] * 2
    error = json.loads((tmp_path / "runs" / "broken" / "seed1" / "error.json").read_text())
    assert error["error"] == "ValueError: broken on purpose"
    assert "fake_engine.py" in error["traceback"] and "raise ValueError" in error["traceback"]
    assert (tmp_path / "runs" / "baseline" / "seed1" / "done.json").is_file()


def driver(out: Path, address: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.ray_driver", str(out), address],
        cwd=ROOT,
        # read now: ray.init set RAY_AUTH_MODE (the cluster's token authentication) here
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(paths: list[Path], proc: subprocess.Popen, timeout: float = DEADLINE) -> None:
    """Until every path exists (the runs it marks have started or finished); fails at once if
    the driver exits first."""
    until(lambda: all(p.exists() for p in paths) or proc.poll() is not None, timeout)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        proc.kill()
        raise AssertionError(f"waiting for {missing}: {proc.communicate()[0][-3000:]}")


def pids_of(out: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted((out / "pids").iterdir())]


def gone(pid: int) -> bool:
    """The process has exited (a zombie is not running)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (ProcessLookupError, OSError):
        return True


def dead(pid: int, timeout: float = DEADLINE) -> bool:
    return until(lambda: gone(pid), timeout)


def test_a_cancelled_compare_leaves_no_task_and_a_rerun_reuses_finished_runs(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "hold").touch()  # the slow runs wait while it exists
    slow = [out / "pids" / f"slow-{s}" for s in (0, 1)]
    done = [out / "runs" / "baseline" / f"seed{s}" / "done.json" for s in (0, 1)]

    # 1. SIGTERM while both slow runs hold the cluster's 2 CPUs: every task is cancelled
    proc = driver(out, cluster)
    wait_for(slow + done, proc)
    running = pids_of(out)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) != 0
    assert all(dead(pid) for pid in running), running
    assert free_cpus_become(2.0), ray.available_resources()

    # 2. the rerun reuses both finished baseline runs and finishes the slow ones
    (out / "hold").unlink()
    stamps = [p.stat().st_mtime_ns for p in done]
    proc = driver(out, cluster)
    output = proc.communicate(timeout=DEADLINE)[0]
    assert proc.returncode == 0, output[-3000:]
    assert "done 4 skipped 2 failed 0" in output
    assert [p.stat().st_mtime_ns for p in done] == stamps
    calls = (out / "calls.log").read_text().splitlines()
    # each baseline run trained once (in the first compare); each slow run was started by
    # both
    assert sorted(c for c in calls if c.startswith("baseline")) == [
        "baseline 0 False",
        "baseline 1 False",
    ]
    assert [sum(c.startswith(f"slow {s} ") for c in calls) for s in (0, 1)] == [2, 2]


def test_checks_before_anything_is_submitted(cluster, tmp_path):
    from dataflex_rl.harness.running.ray_executor import RayExecutor, fits, probe_storage

    with RayExecutor() as ex:  # the module's connection: used, left open
        ex.start(tmp_path)  # the one node sees tmp_path
        assert not ex.owns and not list(tmp_path.glob(".storage-check-*"))
        with pytest.raises(ConfigError, match=r"no node of the Ray cluster can hold one run "):
            RayExecutor(gpus_per_run=1).start(tmp_path)
        with pytest.raises(ConfigError, match=r"\(CPU 3\); the nodes offer: CPU 2"):
            RayExecutor(cpus_per_run=3).start(tmp_path)
    assert ray.is_initialized()
    assert fits({"CPU": 4, "GPU": 1}, {"CPU": 2, "GPU": 1, "a100": 0})
    assert not fits({"CPU": 4}, {"CPU": 1, "GPU": 0.5})
    check = tmp_path / "check"
    check.write_text("abc")
    assert probe_storage(str(check), "abc") == ""
    assert probe_storage(str(check), "xyz").endswith("holds something else")
    assert probe_storage(str(tmp_path / "missing"), "abc").startswith("FileNotFoundError")
