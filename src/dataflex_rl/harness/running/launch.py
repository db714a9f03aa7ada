"""A run as a process: a command line, an environment and a run folder (`Launch`), what an
executor starts wherever it runs it; `run_launch` starts one and reads the record it prints
(`print_record`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dataflex_rl.core.process import die_with_starter

#: ``argv[0]`` meaning the Python interpreter of the process that starts the launch (on a
#: cluster node: the node's own, not the driver's path)
PYTHON = "python"
#: the line a launched run prints its record on (the last such line counts)
RECORD_MARK = "@@dataflex-record@@ "
#: bytes of a launched run's stderr kept in the failure record of a run that left no record
STDERR_TAIL = 4000
#: seconds between polls of a launched process (a cancelled Ray task is interrupted there)
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Launch:
    """One run as a process: what an executor starts, wherever it runs it. ``run_dir`` is
    absolute, on storage every node sees; ``cwd`` is used where it exists (else the run
    folder's parent); ``env`` is added to the environment."""

    argv: tuple[str, ...]
    run_dir: str
    method: str
    seed: int
    env: dict[str, str] = field(default_factory=dict)
    stdin: str = ""
    cwd: str | None = None


def failed_record(method: str, seed: int, error: str, traceback: str, wall_seconds: float) -> dict:
    """The record of a run that failed (done.json's counterpart, also written as error.json)."""
    record = {"status": "failed", "method": method, "seed": seed, "error": error}
    return {**record, "traceback": traceback, "wall_seconds": wall_seconds}


def print_record(record: dict) -> None:
    """How a launched run reports its record: one marked line on stdout (values JSON cannot
    hold written as text, as in done.json, so the record equals what a rerun reads back)."""
    sys.stdout.write("\n" + RECORD_MARK + json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def run_launch(launch: Launch, on_start: Callable[[int], None] | None = None) -> dict:
    """Run ``launch`` as a child in a session of its own; the record it printed, else a failure
    record. However this ends, its process group is killed; ``on_start(pid)`` once it runs."""
    argv = [sys.executable if launch.argv[0] == PYTHON else launch.argv[0], *launch.argv[1:]]
    argv = die_with_starter(argv)
    cwd = launch.cwd if launch.cwd and os.path.isdir(launch.cwd) else None
    if cwd is None:
        cwd = str(Path(launch.run_dir).parent)
        os.makedirs(cwd, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pipes = {"stdin": subprocess.PIPE, "stdout": out, "stderr": err}
        env = {**os.environ, **launch.env}
        proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, **pipes)
        try:
            if on_start is not None:
                on_start(proc.pid)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(launch.stdin.encode())
                proc.stdin.close()
            while proc.poll() is None:
                time.sleep(POLL_SECONDS)
        finally:
            kill_group(proc)
        out.seek(0)
        record = _last_record(out.read().decode(errors="replace"))
        if record is not None:
            return record
        err.seek(0)
        tail = err.read().decode(errors="replace")[-STDERR_TAIL:]
    code = proc.returncode
    status = f"signal {-code}" if code < 0 else f"exit code {code}"
    error = f"RunDied: the run's process ended ({status}) without a record"
    return failed_record(launch.method, launch.seed, error, tail, time.perf_counter() - t0)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (the run and any process it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def _last_record(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RECORD_MARK):
            try:
                return json.loads(line[len(RECORD_MARK) :])
            except ValueError:
                return None
    return None
