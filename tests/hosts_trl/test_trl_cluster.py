"""A TRL run (a host with its own Python) through ``compare --executor ray`` on a Ray cluster
of several nodes on one machine, through the loss of the node it runs on: Ray retries its task
on the other node, where the run resumes from TRL's ``checkpoint-2`` (its done.json and where
each of its processes ran say so), and the study's results equal those of the local study of
the same experiment, byte for byte.

The harness runs in the main venv (.venv, with Ray), as a user runs it, and so does the cluster
(tests/integration/ray_cluster.py, a process of its own: a head node holding no run and nodes
``a`` and ``b`` of 1 CPU); each run is a process of this TRL venv's Python, held after its
checkpoint by tests/integration/cluster_engine.py (the experiment's ``train_fn``) until the test lets it go.

Slow tier (a cluster and three TRL processes): runs with DATAFLEX_RUN_SLOW=1, which
scripts/test.sh sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.skipif(
    os.environ.get("DATAFLEX_RUN_SLOW") != "1", reason="slow: set DATAFLEX_RUN_SLOW=1"
)

from tests.integration.cluster_engine import (  # noqa: E402
    DEADLINE,
    HELD_TRL,
    calls,
    dead,
    held,
    hold,
)

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / ".venv" / "bin" / "python"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
}
RUN = "baseline-seed0"


def write_experiment(folder: Path) -> Path:
    import yaml

    exp = {
        "name": "trl_cluster",
        "host": "trl",
        "train_fn": HELD_TRL,
        "strategies": ["baseline"],
        "seeds": [0],
        "budget": {"steps": 4, "prompts_per_step": 2, "samples_per_prompt": 4},
        "evaluation": {"metric": "sampled", "every": 2, "per_domain": 6, "samples": 2},
        "statistics": {"n_boot": 200, "n_perm": 200},
        "trl": {
            "python": sys.executable,
            "exports": str(folder / "exported"),
            "lr": 0.05,
            "grpo": {
                "use_cpu": True,
                "bf16": False,
                "optim": "sgd",
                "max_completion_length": 8,
            },
        },
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def compare(exp: Path, out: Path, *extra: str) -> subprocess.Popen:
    argv = [str(HARNESS), "-m", "dataflex_rl.cli", "compare", str(exp), "--out", str(out)]
    return subprocess.Popen(
        [*argv, "--no-progress", "--no-plots", *extra],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    output = proc.communicate(timeout=DEADLINE)[0]
    assert proc.returncode == 0, output[-3000:]
    return output


@pytest.fixture
def cluster():
    """The cluster process: its address and its nodes' raylets; ``remove(name)``."""
    if not HARNESS.exists():
        pytest.skip(f"{HARNESS} missing (bash scripts/setup.sh creates the main venv)")
    if subprocess.run([str(HARNESS), "-c", "import ray"], capture_output=True).returncode:
        pytest.skip(f"{HARNESS} has no ray (the dataflex-rl[ray] extra)")
    proc = subprocess.Popen(
        [str(HARNESS), "-m", "tests.integration.ray_cluster"],
        env=ENV,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def answer(start: str) -> str:  # its next line starting so (Ray may print others)
        for line in proc.stdout:
            if line.startswith(start):
                return line.strip()
        raise AssertionError(f"the cluster process ended (exit code {proc.wait()})")

    info = json.loads(answer("{"))

    def remove(name: str) -> None:
        proc.stdin.write(f"remove {name}\n")
        proc.stdin.flush()
        answer(f"removed {name}")

    info["remove"] = remove
    try:
        yield info
    finally:
        proc.stdin.close()  # the cluster shuts down
        proc.wait(timeout=120)


def test_a_trl_run_whose_node_is_lost_resumes_from_trls_checkpoint_on_another_node(
    cluster, tmp_path
):
    exp = write_experiment(tmp_path)
    local = tmp_path / "local"
    finish(compare(exp, local, "--executor", "local"))

    out = tmp_path / "out"
    release = hold(out)
    proc = compare(exp, out, "--executor", "ray", "--address", cluster["address"])
    first = held(out, RUN, 1, proc)  # after TRL saved checkpoint-2 of 4
    assert (first["step"], first["resumed"]) == (2, False)
    node = {pid: name for name, pid in cluster["raylets"].items()}
    lost = node[first["raylet"]]
    cluster["remove"](lost)
    assert dead(first["pid"]) and dead(first["worker"])  # the run died with its node
    release.unlink()
    finish(proc)

    done = json.loads((out / "runs" / "baseline" / "seed0" / "done.json").read_text())
    assert done["resumed"] is True
    assert Path(done["summary"]["resumed_from"]).name == "checkpoint-2"
    other = ({"a", "b"} - {lost}).pop()
    assert [(r, node[p]) for r, p in calls(out, RUN)] == [(False, lost), (True, other)]
    for name in ("results.csv", "proportions.csv"):
        assert (out / name).read_bytes() == (local / name).read_bytes(), name
