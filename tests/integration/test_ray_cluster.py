"""``compare --executor ray`` on a Ray cluster of several nodes on one machine, on the real
engine, through what clusters do (issue 33):

- a node lost while its run is mid-way: the run finishes on another node, resumed from its
  checkpoint (its done.json says so);
- a run's Ray worker killed twice: the run is reported failed with Ray's cause, the others
  finish, and a rerun completes it;
- the driver SIGKILLed mid-study: no task or run process survives on any node, and a rerun
  continues;
- a node that does not see ``--out`` (its own filesystem mounted over it): the study is refused
  before any run starts, naming that node.

Every study that finishes gives results.csv, statistics.csv and proportions.csv byte-identical
to the local study of the same experiment. The cluster is ``ray.cluster_utils.Cluster``: a head
node that holds no run (0 CPUs: the drivers connect there) and two worker nodes of 1 CPU each
(a test that loses one gets a new one for the next test). The runs (2 strategies x 1 seed, 2
steps, a checkpoint after each) are held at a checkpoint by tests/integration/cluster_engine.py
while a hold file exists, so that a node, a worker or the driver is lost exactly mid-run; the
drivers are processes of their own (``python -m tests.integration.cluster_engine``).

Slow tier (a cluster and 13 engine run processes): runs with DATAFLEX_RUN_SLOW=1, which
scripts/test.sh sets.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(
    os.environ.get("DATAFLEX_RUN_SLOW") != "1", reason="slow: set DATAFLEX_RUN_SLOW=1"
)

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.harness.running.compare import run_compare  # noqa: E402
from dataflex_rl.harness.running.experiment import load_experiment  # noqa: E402
from tests.integration.cluster_engine import (  # noqa: E402
    DEADLINE,
    HELD,
    calls,
    dead,
    held,
    hold,
    until,
)
from tests.integration.ray_cluster import STORE, add_node, raylet, start  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
EXPERIMENT = """\
name: cluster
executor: ray
strategies: [baseline, dump_ucb]
seeds: 1
engine: {policy: tiny, threads: 1, log: {checkpoint_every: 1}}
budget: {steps: 2, prompts_per_step: 3, samples_per_prompt: 2}
evaluation: {metric: sampled, samples: 1, every: 1, per_domain: 4}
statistics: {n_boot: 200}
"""
RUNS = ["baseline-seed0", "dump_ucb-seed0"]
COMPARED = ("results.csv", "statistics.csv", "proportions.csv")


class Nodes:
    """The cluster's worker nodes (1 CPU each): `ensure` tops them up to two."""

    def __init__(self, cluster):
        self.cluster = cluster

    def ensure(self, n: int = 2) -> list:
        while len(self.cluster.worker_nodes) < n:
            add_node(self.cluster)
        self.cluster.wait_for_nodes()
        assert until(lambda: ray.cluster_resources().get("CPU") == n, 60.0)
        return list(self.cluster.worker_nodes)

    def remove(self, node) -> None:
        self.cluster.remove_node(node, allow_graceful=False)  # as a machine that goes away


@pytest.fixture(scope="module")
def cluster():
    c = start()
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture
def nodes(cluster):
    n = Nodes(cluster)
    n.ensure()
    yield n


def write_experiment(folder: Path) -> Path:
    path = folder / "cluster.yaml"
    path.write_text(EXPERIMENT)
    return path


@pytest.fixture(scope="module")
def local_study(tmp_path_factory) -> Path:
    """The experiment through the local executor (2 workers)."""
    folder = tmp_path_factory.mktemp("local")
    exp = dataclasses.replace(load_experiment(write_experiment(folder)), executor="local")
    res = run_compare(exp, folder / "out", workers=2, progress=False, plots=False)
    assert len(res.execution.done) == 2
    return folder / "out"


def assert_same_results(out: Path, local: Path) -> None:
    for name in COMPARED:
        assert (out / name).read_bytes() == (local / name).read_bytes(), name


def driver(exp: Path, out: Path, address: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.cluster_engine", str(exp), str(out), address],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    output = proc.communicate(timeout=DEADLINE)[0]
    assert proc.returncode == 0, output[-3000:]
    return output


def held_now(out: Path, count: int, proc: subprocess.Popen) -> dict[str, dict]:
    """Once ``count`` runs are held: run name -> its first hold."""
    folder = out / "held"
    until(lambda: len(list(folder.glob("*.1"))) >= count or proc.poll() is not None)
    found = {p.name[:-2]: json.loads(p.read_text()) for p in folder.glob("*.1")}
    if len(found) < count:
        proc.kill()
        raise AssertionError(f"{len(found)} runs held: {proc.communicate()[0][-3000:]}")
    return found


def done_of(out: Path, name: str) -> dict:
    label, seed = name.rsplit("-", 1)
    return json.loads((out / "runs" / label / seed / "done.json").read_text())


def test_a_node_lost_mid_run_resumes_its_run_on_another_node(cluster, nodes, local_study, tmp_path):
    a, b = nodes.ensure()
    on = {raylet(a): "a", raylet(b): "b"}
    exp, out = write_experiment(tmp_path), tmp_path / "out"
    release = hold(out)
    proc = driver(exp, out, cluster.address)
    first = held_now(out, 2, proc)  # one run per node, each held after its step-1 checkpoint
    assert sorted(on[h["raylet"]] for h in first.values()) == ["a", "b"]
    [(lost, on_a)] = [(k, h) for k, h in first.items() if on[h["raylet"]] == "a"]
    assert on_a["step"] == 1 and not on_a["resumed"]

    nodes.remove(a)
    assert dead(on_a["pid"]) and dead(on_a["worker"])  # the run died with its node
    release.unlink()
    output = finish(proc)
    assert "done 2 skipped 0 failed 0" in output, output[-3000:]

    assert_same_results(out, local_study)
    # the lost run resumed from its checkpoint on the other node; the others ran straight
    assert [done_of(out, r)["resumed"] for r in RUNS] == [r == lost for r in RUNS]
    assert [(resumed, on[r]) for resumed, r in calls(out, lost)] == [(False, "a"), (True, "b")]
    assert done_of(out, lost)["summary"]["steps"] == 2
    assert not (out / "held" / f"{lost}.2").exists()  # the retry was not held: hold released


def test_a_run_whose_worker_is_killed_twice_fails_with_the_cause_and_a_rerun_completes_it(
    cluster, nodes, local_study, tmp_path
):
    exp, out = write_experiment(tmp_path), tmp_path / "out"
    victim = "baseline-seed0"
    release = hold(out, victim)
    proc = driver(exp, out, cluster.address)
    for n, step in ((1, 1), (2, 2)):  # held after step 1, then (retried, resumed) after step 2
        h = held(out, victim, n, proc)
        assert (h["step"], h["resumed"]) == (step, n == 2)
        os.kill(h["worker"], signal.SIGKILL)  # the Ray worker running the run's task
        assert dead(h["pid"])  # the run dies with it
    output = finish(proc)
    assert "done 1 skipped 0 failed 1" in output, output[-3000:]
    [line] = [x for x in output.splitlines() if x.startswith("failed ")]
    assert line == (
        "failed baseline 0: WorkerCrashedError: The worker died unexpectedly while executing "
        "this task. Check python-core-worker-*.log files for more information. (lost twice, "
        "its worker or node died: Ray retried it once; rerun compare to continue it from its "
        "last checkpoint)"
    )
    assert "WorkerCrashedError" in (out / "report.md").read_text()
    assert not (out / "runs" / "baseline" / "seed0" / "done.json").exists()

    release.unlink()
    output = finish(driver(exp, out, cluster.address))
    assert "done 2 skipped 1 failed 0" in output, output[-3000:]
    assert done_of(out, victim)["resumed"]  # from its step-2 checkpoint
    assert [c[0] for c in calls(out, victim)] == [False, True, True]
    assert_same_results(out, local_study)


def test_a_killed_driver_leaves_no_process_on_any_node_and_a_rerun_continues(
    cluster, nodes, local_study, tmp_path
):
    exp, out = write_experiment(tmp_path), tmp_path / "out"
    release = hold(out)
    proc = driver(exp, out, cluster.address)
    first = held_now(out, 2, proc)  # one run on each node
    assert len({h["raylet"] for h in first.values()}) == 2
    proc.kill()
    proc.wait(timeout=DEADLINE)
    for h in first.values():
        assert dead(h["pid"]) and dead(h["worker"]), h
    assert until(lambda: ray.available_resources().get("CPU") == 2.0, 60.0)

    release.unlink()
    output = finish(driver(exp, out, cluster.address))
    assert "done 2 skipped 0 failed 0" in output, output[-3000:]
    assert [done_of(out, r)["resumed"] for r in RUNS] == [r in first for r in RUNS]
    assert_same_results(out, local_study)


def join_node_without(path: Path, address: str) -> subprocess.Popen:
    """A Ray node of 1 CPU in a mount namespace of its own where ``path`` is an empty tmpfs: a
    node whose disk at that path is its own (as a node-local disk where --out should be
    shared). Runs in its own session; end it with `os.killpg`."""
    ray_cli = Path(sys.executable).parent / "ray"
    script = (
        f"mount -t tmpfs tmpfs {path} && exec {ray_cli} start --address={address} --num-cpus=1 "
        f"--object-store-memory={STORE} --block"
    )
    return subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        env=ENV,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_node_that_does_not_see_out_is_refused_before_any_run_naming_it(cluster, nodes, tmp_path):
    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    if shutil.which("unshare") is None or subprocess.run(probe).returncode != 0:
        pytest.skip(
            "needs unshare (util-linux) and user namespaces for a node with a disk of its own"
        )
    out = tmp_path / "out"
    out.mkdir()
    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    proc = join_node_without(out, cluster.address)
    try:
        joined = until(lambda: ray.cluster_resources().get("CPU") == 3.0 or proc.poll() is not None)
        assert joined and proc.poll() is None, proc.communicate()[1][-3000:]
        [own] = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before]
        exp = load_experiment(write_experiment(tmp_path))
        with pytest.raises(ConfigError) as refused:
            run_compare(exp, out, progress=False, plots=False, train_fn=HELD)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    message = str(refused.value)
    assert message.startswith(f"--out {out}: not on storage every node sees: ")
    assert f"node {own['NodeID'][:12]}" in message and "FileNotFoundError" in message
    assert not any(n[:12] in message for n in before)  # the nodes that see it are not named
    assert [p.name for p in out.iterdir()] == [".lock"]  # no run, not even experiment.json
    assert until(lambda: ray.cluster_resources().get("CPU") == 2.0, 60.0)
    assert ray.available_resources().get("CPU") == 2.0
