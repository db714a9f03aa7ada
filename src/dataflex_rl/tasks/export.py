"""Generated tasks as a verl-schema dataset (``dataflex-rl export tasks``): per domain a
training and a held-out parquet file, and ``tasks.json`` (what was written, from which
settings, how to score it: `dataflex_rl.tasks.rewards`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import require_empty_dir
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.base import TaskSet
from dataflex_rl.tasks.datasets import content_sha256, to_verl_rows, write_rows
from dataflex_rl.tasks.verifiers import DomainVerifier

MANIFEST_FILE = "tasks.json"
TRAIN_FILE = "train.parquet"
EVAL_DIR = "eval"
#: where the rewards are, as verl and TRL name them
REWARDS = {
    "verl": {"path": "pkg://dataflex_rl.tasks.rewards", "name": "compute_score"},
    "trl": "dataflex_rl.tasks.rewards:correct",
}


def export_tasks(
    taskset: TaskSet,
    out: str | Path,
    *,
    eval_per_domain: int | None = None,
    settings: Mapping[str, Any] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Write ``taskset`` as ``out/train.parquet``, ``out/eval/<domain>.parquet`` and
    ``out/tasks.json``.

    ``train.parquet`` holds the training pools domain by domain, in pool order. Returns the
    manifest written to ``tasks.json``.

    Args:
        taskset: the tasks (registered domains only: the rewards verify by them).
        eval_per_domain: write only the first N held-out problems of each domain (None: all).
        settings: how the tasks were made, recorded in ``tasks.json``.
        force: write into a directory that already holds files.
    """
    target = require_empty_dir(out, "export tasks", force)
    for d in taskset.domains:
        DomainVerifier(domain=d)  # an unregistered domain fails here, before any file
        if not taskset.train[d] or not taskset.eval[d][:eval_per_domain]:
            split = "training" if not taskset.train[d] else "held-out"
            raise ConfigError(f"export tasks: domain {d!r} has no {split} problems")
    train_rows = [r for d in taskset.domains for r in to_verl_rows(taskset.train[d], "train")]
    files = {TRAIN_FILE: write_rows(train_rows, target / TRAIN_FILE)}
    evals, counts = {}, {"train": {}, "eval": {}}
    for d in taskset.domains:
        held = taskset.eval[d][:eval_per_domain]
        name = f"{EVAL_DIR}/{d}.parquet"
        files[name] = write_rows(to_verl_rows(held, "eval"), target / name)
        evals[d] = name
        counts["train"][d], counts["eval"][d] = len(taskset.train[d]), len(held)
    manifest = {
        "domains": list(taskset.domains),
        "train": TRAIN_FILE,
        "eval": evals,
        "rows": counts,
        "settings": dict(settings or {}),
        "domain_settings": {d: s["settings"] for d, s in taskset.summary().items()},
        "rewards": REWARDS,
        "verifiers": {d: "domain" for d in taskset.domains},
        "sha256": {name: content_sha256(path) for name, path in files.items()},
    }
    (target / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, default=list) + "\n")
    return manifest
