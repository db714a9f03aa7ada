"""Fixtures of the engine unit tests: a very small seeded policy (fast on one CPU thread)."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.policy import build_tiny_policy
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer

#: a small architecture: the tests exercise the code paths, not the model's quality
SMALL_ARCH = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer.from_charset(["0123456789+-=?abc"])


@pytest.fixture(scope="module")
def small_policy(char_tokenizer):
    return build_tiny_policy(char_tokenizer, seed=0, **SMALL_ARCH)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes CPU-minutes; runs with DATAFLEX_RUN_SLOW=1")
