"""Fault injection (issue 12, items 1-3, 7, 19): kills, corrupt and torn files, a full disk,
concurrent writers and pickled payloads. Each fault must end in either the uninterrupted result
or a clear error naming the file, never in a silently different run.

Processes that must be killed run tests/integration/fault_engine.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from dataflex_rl.core import io as dio
from dataflex_rl.core.io import DirectoryLock, LockedError, atomic_write_json
from dataflex_rl.core.statefile import StateFileError, load_state_file, save_state_file
from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.statistics.results import Row, write_results_csv
from dataflex_rl.hosts.common.state import load_state, save_state
from dataflex_rl.hosts.engine import checkpoint as ckpt
from dataflex_rl.hosts.engine.checkpoint import CheckpointError, checkpoint_dirs, load_checkpoint
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.hosts.engine.runlog import read_metrics
from tests.integration import fault_engine as fe

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def strip_times(records: list[dict]) -> list[dict]:
    return [
        {k: v for k, v in r.items() if not k.startswith("time") and k != "dataflex/time_ms"}
        for r in records
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted tiny run: 4 steps, a checkpoint after every step (3 and 4 kept)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    summary = run_training(load_config(fe.TINY), fe.TINY_STRATEGY, seed=5, out_dir=out)
    return out, summary, strip_times(read_metrics(out))


def resume(out: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_training(
            load_config(fe.TINY), fe.TINY_STRATEGY, seed=5, out_dir=out, resume=True
        )


# ------------------------------------------------------------------ kill -9, then --resume
@pytest.mark.parametrize("kill_at", sorted(random.Random(12).sample(range(3, 40), 2)))
def test_kill9_at_a_random_point_then_resume_is_identical(reference, tmp_path, kill_at):
    _, ref, ref_metrics = reference
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.fault_engine", "train", str(out), str(kill_at)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]  # it was killed mid-run
    resumed = resume(out)
    assert resumed["parameter_sha256"] == ref["parameter_sha256"]
    assert strip_times(read_metrics(out)) == ref_metrics
    assert [p.name for p in checkpoint_dirs(out)] == ["step-00000004", "step-00000003"]
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------ corrupt checkpoint files
def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1 :])
    else:
        path.unlink()


CHECKPOINT_FILES = [f"{p}.safetensors" for p in ckpt.PARTS] + [ckpt.META, ckpt.MANIFEST]


@pytest.mark.parametrize("how", ["truncate", "flip", "delete"])
def test_each_corrupt_file_falls_back_to_the_previous_checkpoint_naming_it(
    reference, tmp_path, how
):
    ref_out, _, _ = reference
    for name in CHECKPOINT_FILES:
        copy = tmp_path / name / "checkpoints"
        shutil.copytree(ref_out / "checkpoints", copy)
        corrupt(copy / "step-00000004" / name, how)
        with pytest.warns(
            UserWarning,
            match=rf"step-00000004/{re.escape(name)}.*Resuming from "
            r"the previous intact one, .*step-00000003",
        ):
            state = load_checkpoint(copy.parent)
        assert state["step"] == 3, name


def test_no_intact_checkpoint_is_an_error_naming_each_bad_file(reference, tmp_path):
    ref_out, _, _ = reference
    shutil.copytree(ref_out / "checkpoints", tmp_path / "checkpoints")
    corrupt(tmp_path / "checkpoints" / "step-00000004" / "rng.safetensors", "flip")
    corrupt(tmp_path / "checkpoints" / "step-00000003" / "optimizer.safetensors", "delete")
    with pytest.raises(
        CheckpointError,
        match=r"no intact checkpoint: .*step-00000004/rng"
        r"\.safetensors: does not match its SHA-256.*"
        r"step-00000003/optimizer\.safetensors: missing",
    ):
        load_checkpoint(tmp_path)


def test_resume_after_a_corrupt_checkpoint_is_identical(reference, tmp_path):
    ref_out, ref, ref_metrics = reference
    out = tmp_path / "run"
    shutil.copytree(ref_out, out)
    corrupt(out / "checkpoints" / "step-00000004" / "dataflex.safetensors", "flip")
    with pytest.warns(UserWarning, match=r"dataflex\.safetensors: does not match"):
        resumed = run_training(
            load_config(fe.TINY), fe.TINY_STRATEGY, seed=5, out_dir=out, resume=True
        )
    assert resumed["parameter_sha256"] == ref["parameter_sha256"]  # step 3 trained again
    assert strip_times(read_metrics(out)) == ref_metrics
    assert load_checkpoint(out)["step"] == 4  # rewritten, intact


def test_a_state_file_checks_its_own_content(tmp_path):
    """Changed tensor bytes with a consistent header are caught by the file's own checksum."""
    path = tmp_path / "s.safetensors"
    save_state_file(path, {"w": torch.arange(64, dtype=torch.float32)}, "test")
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # inside the tensor data: still a valid safetensors file
    path.write_bytes(bytes(data))
    with pytest.raises(
        StateFileError,
        match=r"s\.safetensors: content does not match its "
        r"checksum",
    ):
        load_state_file(path, "test")


# ------------------------------------------------------------------ torn writes, full disk
def crash_on_replace(monkeypatch):
    def replace(src, dst):
        raise OSError(errno.EIO, "simulated crash between the temporary write and the rename")

    monkeypatch.setattr(dio.os, "replace", replace)


def test_a_torn_results_write_leaves_the_previous_file(tmp_path, monkeypatch):
    csv_path, js = tmp_path / "results.csv", tmp_path / "done.json"
    write_results_csv([Row("baseline", "0", "math", 0.5)], csv_path)
    atomic_write_json(js, {"status": "done"})
    before = csv_path.read_bytes(), js.read_bytes()
    crash_on_replace(monkeypatch)
    with pytest.raises(OSError, match="simulated crash"):
        write_results_csv([Row("baseline", "0", "math", 0.9)] * 3, csv_path)
    with pytest.raises(OSError, match="simulated crash"):
        atomic_write_json(js, {"status": "fa"})
    assert (csv_path.read_bytes(), js.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.json", "results.csv"]


def step5_state(ref_out: Path) -> dict:
    state = load_checkpoint(ref_out)
    return {**state, "step": 5}


def test_disk_full_while_checkpointing_is_clear_and_keeps_the_previous(
    reference, tmp_path, monkeypatch
):
    ref_out, _, _ = reference
    shutil.copytree(ref_out / "checkpoints", tmp_path / "checkpoints")
    real, calls = dio.write_durable, []

    def full_disk(path, data):
        calls.append(path)
        if len(calls) == 3:  # the third file: half of it fits
            real(path, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(dio, "write_durable", full_disk)
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint of step 5 .*the disk is full; the "
        r"previous checkpoint .*step-00000004 is intact",
    ):
        ckpt.save_checkpoint(tmp_path, step5_state(ref_out))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] != []
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-00000003",
        "step-00000004",
    ]  # no half-written folder left
    assert ckpt.read_checkpoint(tmp_path / "checkpoints" / "step-00000004")["step"] == 4


def test_a_crash_before_the_checkpoint_rename_keeps_the_previous(reference, tmp_path, monkeypatch):
    ref_out, _, _ = reference
    shutil.copytree(ref_out / "checkpoints", tmp_path / "checkpoints")
    crash_on_replace(monkeypatch)
    with pytest.raises(CheckpointError, match="simulated crash"):
        ckpt.save_checkpoint(tmp_path, step5_state(ref_out))
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step-00000004", "step-00000003"]
    assert load_checkpoint(tmp_path)["step"] == 4


# ------------------------------------------------------------------ pickled payloads
class Payload:
    """Unpickling this creates ``marker`` (what an attacker's code would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def payload_bytes(marker: Path) -> bytes:
    data = pickle.dumps({"model": Payload(marker)})
    probe = marker.with_name("probe")  # the payload is live: plain pickle runs it
    pickle.loads(pickle.dumps(Payload(probe)))
    assert probe.exists()
    return data


def test_a_pickle_where_a_checkpoint_belongs_is_refused_and_never_runs(reference, tmp_path):
    ref_out, _, _ = reference
    marker = tmp_path / "EXECUTED"
    bad = payload_bytes(marker)
    # in place of a state file, with a manifest rewritten to match (an attacker can do that)
    folder = tmp_path / "new" / "checkpoints" / "step-00000004"
    shutil.copytree(ref_out / "checkpoints" / "step-00000004", folder)
    (folder / "model.safetensors").write_bytes(bad)
    manifest = json.loads((folder / ckpt.MANIFEST).read_text())
    manifest["files"]["model.safetensors"] = {
        "sha256": hashlib.sha256(bad).hexdigest(),
        "bytes": len(bad),
    }
    manifest["sha256"] = ckpt._manifest_sha256(manifest)
    (folder / ckpt.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: a pickle .* refused"):
        load_checkpoint(tmp_path / "new")
    assert not marker.exists()


def test_host_strategy_state_refuses_pickles_and_reads_plain_data(tmp_path):
    """The verl host's ``dataflex_state`` files (`dataflex_rl.hosts.common.state`)."""
    marker = tmp_path / "EXECUTED"
    bad = payload_bytes(marker)
    state = {
        "format": 1,
        "strategy": {"drawn": torch.tensor([3.0, 1.0]), "steps_observed": 2, "history": None},
        "intake": None,
    }
    back = load_state(save_state(tmp_path / "dataflex_state.safetensors", state))
    assert torch.equal(back["strategy"]["drawn"], state["strategy"]["drawn"])
    assert back["strategy"]["steps_observed"] == 2 and back["intake"] is None
    # a payload in its place is refused, never run
    (tmp_path / "dataflex_state.safetensors").write_bytes(bad)
    with pytest.raises(StateFileError, match=r"dataflex_state\.safetensors: a pickle .*refused"):
        load_state(tmp_path / "dataflex_state.safetensors")
    assert not marker.exists()


# ------------------------------------------------------------------ compare: lock and kills
def alive(pid: int) -> bool:
    """Running (a zombie or a missing /proc entry counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killing_compare_kills_its_workers_and_a_rerun_reuses_finished_runs(tmp_path, sig, capsys):
    from dataflex_rl.cli import main

    out = tmp_path / "cmp"
    parent = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fault_engine", "compare", str(out)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # the worker finished the baseline and is stuck in the 'slow' run
        wait_for(
            lambda: (
                (out / "runs" / "baseline" / "seed0" / "done.json").is_file()
                and len((out / "pids.log").read_text().split()) == 2
            ),
            240,
            "the baseline to finish and the slow run to start",
        )
        workers = {int(p) for p in (out / "pids.log").read_text().split()}
        assert parent.pid not in workers and all(alive(p) for p in workers)
        # a second writer into the same folder is refused, naming the holder
        exp_yaml = tmp_path / "exp.yaml"
        exp_yaml.write_text(yaml.safe_dump(fe.EXPERIMENT))
        assert main(["compare", str(exp_yaml), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert re.search(
            rf"{re.escape(str(out))} is in use by process {parent.pid} \(started "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
            err,
        ), err
        with pytest.raises(LockedError, match=rf"in use by process {parent.pid}"):
            run_compare(
                fe.experiment(), out, workers=1, progress=False, plots=False, train_fn=fe.SLOW
            )
        os.kill(parent.pid, sig)
        parent.wait(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == (143 if sig == signal.SIGTERM else -signal.SIGKILL), (
        parent.stderr.read().decode()[-2000:]
    )
    wait_for(lambda: not any(alive(p) for p in workers), 15, "the workers to die")
    # rerun: the lock of the dead parent is taken over, the finished run is reused and the
    # interrupted one continues from its checkpoint
    (out / "release").touch()
    before = (out / "calls.log").read_text().splitlines()
    res = run_compare(
        fe.experiment(), out, workers=1, progress=False, plots=False, train_fn=fe.SLOW
    )
    assert res.execution.skipped == 1 and len(res.execution.done) == 2
    assert before == ["baseline 0 False"]
    assert (out / "calls.log").read_text().splitlines()[1:] == ["slow 0 True"]


def test_a_dead_holders_lock_is_taken_over_and_the_holder_may_reenter(tmp_path):
    # what a killed holder leaves: the file with its pid, but no flock (the kernel dropped it)
    (tmp_path / ".lock").write_text(
        json.dumps({"pid": 2**22 + 1, "started": "earlier", "command": "killed"})
    )
    with DirectoryLock(tmp_path, "second") as lock:
        assert lock.holder() == {**lock.holder(), "pid": os.getpid(), "command": "second"}
        with DirectoryLock(tmp_path):  # a locked command calling another
            pass
        assert lock.holder()["command"] == "second"  # still held by the outer one
    assert lock.holder() == {}  # released


def test_a_partial_run_without_a_usable_checkpoint_starts_over(tmp_path):
    from dataflex_rl.harness.running.runner import execute_run, plan

    run = plan(fe.experiment(), tmp_path, fe.UNUSABLE)[1]
    d = Path(run.out_dir)
    (d / "checkpoints" / "step-00000001").mkdir(parents=True)
    (d / "stale.txt").write_text("x")
    (d / "run.json").write_text(json.dumps({"fingerprint": run.fingerprint}))
    done = execute_run(run)
    assert done["status"] == "done" and done["resumed"] is False
    assert any("no usable checkpoint" in w and "starts over" in w for w in done["warnings"])
    assert (tmp_path / "calls.log").read_text().splitlines() == ["slow 0 False"]
    assert not (d / "stale.txt").exists() and (d / "run.json").is_file()
