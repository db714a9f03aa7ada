"""`dataflex_rl.core.io`: atomic whole-file writes and the output-folder lock."""

from __future__ import annotations

import json
import os
import stat

import pytest

from dataflex_rl.core import io as dio
from dataflex_rl.core.io import (
    DirectoryLock,
    LockedError,
    atomic_path,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from dataflex_rl.core.registry import ConfigError


def test_writes_replace_the_whole_file_and_leave_no_temporary(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "first, longer content\n")
    atomic_write_text(p, "second\n")
    assert p.read_text() == "second\n"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    atomic_write_json(tmp_path / "b.json", {"x": (1, 2), "p": tmp_path})
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": [1, 2], "p": str(tmp_path)}
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a.txt", "b.json"]


def test_new_files_get_the_usual_permissions_not_a_private_temporary_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.md", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "r.md").stat().st_mode) == 0o644


def test_an_exception_while_writing_keeps_the_previous_file(tmp_path):
    p = tmp_path / "results.csv"
    atomic_write_text(p, "old\n")

    def half_then_fail(f):
        f.write("new, but only ha")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        dio.atomic_write(p, half_then_fail)
    with pytest.raises(ValueError, match="boom"), atomic_path(p) as tmp:
        tmp.write_text("never seen")
        raise ValueError("boom")
    assert p.read_text() == "old\n"
    assert [q.name for q in tmp_path.iterdir()] == ["results.csv"]


def test_the_lock_records_its_holder_and_refuses_another_process(tmp_path):
    with DirectoryLock(tmp_path / "out", "dataflex-rl compare exp.yaml") as lock:
        held = lock.holder()
        assert held["pid"] == os.getpid() and held["command"] == "dataflex-rl compare exp.yaml"
        assert held["started"].endswith("UTC")
        # another process: its flock would fail; here the holder file names someone else
        other = DirectoryLock(tmp_path / "out")
        msg = other._message({**held, "pid": 4242})
        assert "process 4242 (started " in msg and "choose another output folder" in msg
    assert lock.holder() == {}
    assert issubclass(LockedError, ConfigError)  # the CLI prints it and exits 2


def test_the_lock_file_descriptor_is_not_inherited(tmp_path):
    lock = DirectoryLock(tmp_path).__enter__()
    try:
        assert not os.get_inheritable(lock._fd)  # a worker never keeps the lock alive
    finally:
        lock.__exit__(None, None, None)


def test_a_folder_the_lock_made_is_removed_when_nothing_was_written(tmp_path):
    # a command refused before writing anything (a bad dataset, a missing venv) leaves no folder
    with DirectoryLock(tmp_path / "refused"):
        assert (tmp_path / "refused" / ".lock").exists()
    assert not (tmp_path / "refused").exists()
    # a folder that got contents, or existed before, stays (with its emptied lock file)
    with DirectoryLock(tmp_path / "wrote"):
        (tmp_path / "wrote" / "results.csv").write_text("method\n")
    assert sorted(p.name for p in (tmp_path / "wrote").iterdir()) == [".lock", "results.csv"]
    (tmp_path / "existed").mkdir()
    with DirectoryLock(tmp_path / "existed"):
        pass
    assert [p.name for p in (tmp_path / "existed").iterdir()] == [".lock"]
