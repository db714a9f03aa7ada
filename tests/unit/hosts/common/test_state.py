"""`dataflex_rl.hosts.common.state`: atomic state files that never unpickle code."""

from __future__ import annotations

import errno
import pickle

import pytest
import torch

from dataflex_rl.core import io as dio
from dataflex_rl.core.statefile import StateFileError
from dataflex_rl.hosts.common.state import load_state, save_state


def test_round_trip_keeps_tensors_and_python_objects(tmp_path):
    state = {
        "t": torch.arange(3),
        "keys": ["a", ("b", 1)],
        "rng": torch.Generator().get_state(),
        "by_id": {0: 1.5, 7: None},
        "nan": float("nan"),
    }
    path = save_state(tmp_path / "sub" / "s.safetensors", state)  # creates the folder
    assert path == tmp_path / "sub" / "s.safetensors"
    back = load_state(path)
    assert back["t"].tolist() == [0, 1, 2] and back["keys"] == ["a", ("b", 1)]
    assert torch.equal(back["rng"], state["rng"]) and back["by_id"] == {0: 1.5, 7: None}
    assert back["nan"] != back["nan"]
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["s.safetensors"]  # no temporary


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = save_state(tmp_path / "s.safetensors", {"v": 1})

    def replace(src, dst):
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr(dio.os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        save_state(path, {"v": 2})
    monkeypatch.undo()
    assert load_state(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]  # the temporary is gone


def test_a_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "EXECUTED"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "bad.safetensors").write_bytes(pickle.dumps({"t": Payload()}))
    with pytest.raises(StateFileError, match=r"bad\.safetensors: a pickle .*refused"):
        load_state(tmp_path / "bad.safetensors")
    torch.save({"t": torch.ones(2)}, tmp_path / "plain.pt")  # even of plain data
    with pytest.raises(StateFileError, match=r"plain\.pt: a pickle \(torch\.save\) file"):
        load_state(tmp_path / "plain.pt")
    assert not marker.exists()


def test_missing_and_corrupt_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="s.safetensors"):
        load_state(tmp_path / "s.safetensors")
    path = save_state(tmp_path / "s.safetensors", {"t": torch.zeros(100)})
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StateFileError, match=r"s\.safetensors: unreadable state file"):
        load_state(path)
