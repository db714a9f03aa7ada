"""Character tokenizer, the tiny policy preset, save/load and the parameter hash."""

from __future__ import annotations

import json

import pytest
import torch

from dataflex_rl.hosts.engine.policy import (
    ASSETS_DIR,
    build_tiny_policy,
    cache_argument,
    load_policy,
    parameter_hash,
    save_policy,
    tiny_config,
)
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer

from .conftest import SMALL_ARCH


def test_char_tokenizer_round_trip_and_specials(tmp_path):
    tok = CharTokenizer.from_charset(["b+a", "1=", "a"])
    assert tok.chars == ["+", "1", "=", "a", "b"]
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.vocab_size == 4 + 5
    ids = tok.encode("a+1=b")
    assert ids == [7, 4, 5, 6, 8]
    # decoding drops specials and stops at EOS; unknown characters become <unk> (dropped)
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, 7]) == "a+1=b"
    assert tok.encode("z") == [tok.unk_id] and tok.decode(tok.encode("z")) == ""
    tok.save(tmp_path)
    assert CharTokenizer.load(tmp_path) == tok
    assert json.loads((tmp_path / "char_tokenizer.json").read_text())["type"] == "char"


def test_char_tokenizer_rejects_bad_vocabularies(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        CharTokenizer(["a", "a"])
    with pytest.raises(ValueError, match="one character"):
        CharTokenizer(["ab"])
    with pytest.raises(FileNotFoundError):
        CharTokenizer.load(tmp_path)


def test_tiny_preset_size_and_config():
    cfg = tiny_config(50)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (128, 4, 50)
    with pytest.raises(ValueError, match="unknown architecture key"):
        tiny_config(50, hidden=3)
    tok = CharTokenizer.from_charset(["0123456789abcdefghijklmnopqrstuvwxyz+-*=?<>,. "])
    n = build_tiny_policy(tok, seed=0).num_parameters
    assert 0.7e6 < n < 1.3e6


def test_same_seed_same_hash_and_global_rng_untouched(char_tokenizer):
    state = torch.get_rng_state()
    a = build_tiny_policy(char_tokenizer, seed=3, **SMALL_ARCH)
    assert torch.equal(state, torch.get_rng_state())
    b = build_tiny_policy(char_tokenizer, seed=3, **SMALL_ARCH)
    c = build_tiny_policy(char_tokenizer, seed=4, **SMALL_ARCH)
    assert parameter_hash(a.model) == parameter_hash(b.model) != parameter_hash(c.model)


def test_save_and_load_keep_parameters_and_tokenizer(tmp_path, small_policy):
    save_policy(small_policy, tmp_path)
    loaded = load_policy(tmp_path)
    assert parameter_hash(loaded.model) == parameter_hash(small_policy.model)
    assert loaded.tokenizer == small_policy.tokenizer
    assert cache_argument(loaded.model) in ("past_key_values", "cache")


def test_load_policy_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_policy(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(tmp_path)


@pytest.mark.skipif(
    not (ASSETS_DIR / "tiny" / "MANIFEST.json").is_file(),
    reason="shipped tiny checkpoint not built yet",
)
def test_shipped_tiny_matches_its_manifest():
    from dataflex_rl.hosts.engine.warmstart import read_manifest

    manifest = read_manifest(ASSETS_DIR / "tiny")
    policy = load_policy("tiny")
    assert parameter_hash(policy.model) == manifest["parameter_sha256"]
    # every domain is learned but not solved: greedy accuracy leaves room, and the engine's
    # primary metric (mean accuracy over samples at temperature 1) leaves much more
    for acc in manifest["heldout_greedy_accuracy"].values():
        assert 0.15 <= acc <= 0.85
