"""`dataflex_rl.core.statefile`: tensors + plain data, no pickle, self-checking."""

from __future__ import annotations

import json
import random
from collections import OrderedDict

import numpy as np
import pytest
import torch

from dataflex_rl.core.statefile import (
    StateFileError,
    decode_tree,
    dump_state,
    encode_tree,
    load_state_file,
    parse_state,
    save_state_file,
)
from tests.states import is_state_file, looks_like_pickle


def rng_and_optimizer_state() -> dict:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "optimizer": opt.state_dict(),
        "model": OrderedDict(model.state_dict()),
    }


def test_rng_streams_and_optimizer_state_round_trip_exactly():
    state = rng_and_optimizer_state()
    back = parse_state(dump_state(state, "t"), "mem", "t")
    random.setstate(back["python"])
    np.random.set_state(back["numpy"])
    torch.set_rng_state(back["torch"])
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    assert draws == (random.random(), np.random.rand(), torch.rand(1).item())
    opt = back["optimizer"]
    assert list(opt["state"]) == [0, 1]  # int keys stay ints
    assert opt["param_groups"][0]["betas"] == (0.9, 0.95)  # tuples stay tuples
    for k in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(opt["state"][0][k], state["optimizer"]["state"][0][k])
    assert all(torch.equal(back["model"][k], v) for k, v in state["model"].items())


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**70),
        1.5,
        float("inf"),
        "x",
        [1, (2, 3)],
        {"__tensor__": 1},
        {1: "a", (2, 3): "b"},
        np.arange(6, dtype=np.uint32).reshape(2, 3),
        np.float32(0.25),
        torch.zeros(0, 3),
        torch.tensor([True, False]),
        torch.arange(4).reshape(2, 2).t(),
    ],
    ids=repr,
)
def test_encode_decode_is_the_identity(value):
    skeleton, tensors = encode_tree({"v": value})
    json.dumps(skeleton, allow_nan=False)  # plain, strict JSON
    back = decode_tree(json.loads(json.dumps(skeleton)), tensors)["v"]
    if isinstance(value, torch.Tensor):
        assert torch.equal(back, value) and back.dtype == value.dtype
    elif isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert back == value and type(back) is type(value)


def test_unsupported_values_are_named_by_their_place():
    with pytest.raises(TypeError, match=r"state\.a\.b\[1\]: cannot store a object"):
        encode_tree({"a": {"b": [1, object()]}})


def test_errors_name_the_file(tmp_path):
    p = save_state_file(tmp_path / "s.safetensors", {"w": torch.ones(3)}, "strategy")
    assert is_state_file(p) and not looks_like_pickle(p)
    with pytest.raises(
        StateFileError,
        match=r"s\.safetensors: holds a 'strategy' state, not "
        r"'optimizer'",
    ):
        load_state_file(p, "optimizer")
    with pytest.raises(StateFileError, match=r"nope\.safetensors: missing"):
        load_state_file(tmp_path / "nope.safetensors")
    (tmp_path / "j.safetensors").write_text("{}")
    with pytest.raises(StateFileError, match=r"j\.safetensors: unreadable state file"):
        load_state_file(tmp_path / "j.safetensors")
    torch.save({"w": torch.ones(1)}, tmp_path / "t.pt")
    assert looks_like_pickle(tmp_path / "t.pt") and not is_state_file(tmp_path / "t.pt")
    with pytest.raises(StateFileError, match=r"t\.pt: a pickle \(torch\.save\) file.*refused"):
        load_state_file(tmp_path / "t.pt")
