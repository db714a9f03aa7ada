"""Embedded GRPO engine (``run_training(load_config(path), "difffilter")``); names are imported
on first use, so ``import dataflex_rl.hosts.engine`` stays cheap."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EngineConfig": "config",
    "load_config": "config",
    "EmbeddedTrainer": "trainer",
    "run_training": "run",
    "read_metrics": "runlog",
    "format_table": "run",
    "Policy": "policy",
    "load_policy": "policy",
    "build_tiny_policy": "policy",
    "save_policy": "policy",
    "parameter_hash": "policy",
    "CharTokenizer": "tokenizer",
    "sample_groups": "sampler",
    "Rollout": "sampler",
    "bootstrap": "warmstart",
    "BootstrapArgs": "warmstart",
    "warm_start": "warmstart",
    "evaluate": "evaluation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dataflex_rl.hosts.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dataflex_rl.hosts.engine.{_EXPORTS[name]}"), name)
