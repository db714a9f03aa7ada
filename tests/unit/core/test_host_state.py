"""`dataflex_rl.hosts.common.state`: atomic state files."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.common.state import load_state, save_state


def test_round_trip_keeps_tensors_and_python_objects(tmp_path):
    state = {"t": torch.arange(3), "keys": ["a", ("b", 1)], "rng": torch.Generator().get_state()}
    path = save_state(tmp_path / "sub" / "s.pt", state)   # creates the folder
    assert path == tmp_path / "sub" / "s.pt"
    back = load_state(path)
    assert back["t"].tolist() == [0, 1, 2] and back["keys"] == ["a", ("b", 1)]
    assert torch.equal(back["rng"], state["rng"])
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["s.pt"]   # no temporary left


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = save_state(tmp_path / "s.pt", {"v": 1})

    def broken(obj, f, *a, **k):
        open(f, "wb").write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        save_state(path, {"v": 2})
    assert load_state(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]   # the half-written one is gone


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="s.pt"):
        load_state(tmp_path / "s.pt")
