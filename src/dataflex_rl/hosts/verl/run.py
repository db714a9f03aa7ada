"""One verl run of ``compare``: ``python -m verl.trainer.main_ppo`` with the run's overrides.

`run_training` runs in ``verl.python`` and leaves in the run's folder the strategy file,
the held-out subset, ``verl_metrics/attempt-N.jsonl`` (one per start), ``verl_log/`` and
``ckpt/`` (settings.py names them). verl is a child process that dies with this one
(`die_with_starter`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from dataflex_rl.core.io import atomic_write_json, atomic_write_text
from dataflex_rl.core.process import die_with_starter
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.verl.settings import (
    CKPT_DIR,
    HELD_OUT_FILE,
    LATEST_FILE,
    LOG_DIR,
    METRICS_DIR,
    STRATEGY_FILE,
    command,
    parse_settings,
    run_env,
    run_overrides,
)

#: characters of verl's output kept in the error of a failed run
LOG_TAIL = 6000


def checkpoint_step(out_dir: str | Path) -> int:
    """The step of the newest checkpoint verl finished in the run's folder (0: none)."""
    try:
        return int((Path(out_dir) / CKPT_DIR / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return 0


def attempts(out_dir: str | Path) -> list[Path]:
    """The run's metrics files, oldest start first."""
    d = Path(out_dir) / METRICS_DIR
    files = d.glob("attempt-*.jsonl") if d.is_dir() else []
    return sorted(files, key=lambda p: int(p.stem.split("-")[1]))


def held_out_subset(val_files: str | list[str], per_domain: int, out: Path) -> Path:
    """Write the first ``per_domain`` rows of each ``data_source`` of ``val_files`` (in
    order, as verl concatenates them) to ``out``: every run validates on the same prompts.
    Raises `ConfigError` for a file without a ``data_source`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [val_files] if isinstance(val_files, str) else list(val_files)
    tables = [pq.read_table(f) for f in files]
    for f, t in zip(files, tables):
        if "data_source" not in t.column_names:
            raise ConfigError(f"verl.val_files: {f} has no data_source column")
    table = pa.concat_tables(tables, promote_options="default")
    seen: dict[str, int] = {}
    keep = []
    for i, source in enumerate(table.column("data_source").to_pylist()):
        seen[source] = seen.get(source, 0) + 1
        if seen[source] <= per_domain:
            keep.append(i)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.take(pa.array(keep, type=pa.int64())), out)
    return out


def run_training(settings: dict, strategy: dict, *, seed: int, out_dir: str, resume: bool) -> dict:
    """Train one run with verl (the host's training function; `VerlSettings` ``settings``,
    the seed sets every verl seed, `settings.seed_overrides`); ``resume`` False starts over.
    Returns a summary; raises `ConfigError` (bad settings, no verl) or RuntimeError (verl
    failed, with the end of its output)."""
    s = parse_settings(settings)
    if importlib.util.find_spec("verl") is None:
        raise ConfigError(
            f"verl.python: {sys.executable} has no verl; set verl.python to the Python of a "
            "venv with verl 0.9.x and dataflex-rl (bash scripts/setup_verl.sh makes .venv-verl)"
        )
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for sub in (CKPT_DIR, METRICS_DIR, LOG_DIR):
            shutil.rmtree(out / sub, ignore_errors=True)
    step = checkpoint_step(out) if resume else 0
    attempt = len(attempts(out)) + 1
    strategy_file = out / STRATEGY_FILE
    atomic_write_text(strategy_file, yaml.safe_dump(strategy, sort_keys=False))
    if s.eval_per_domain is not None:  # evaluation.per_domain: every run the same subset
        held_out = held_out_subset(s.val_files, s.eval_per_domain, out / HELD_OUT_FILE)
        s = dataclasses.replace(s, val_files=str(held_out))
    cwd = os.getcwd()
    metrics = out / METRICS_DIR / f"attempt-{attempt}.jsonl"
    log = out / LOG_DIR / f"attempt-{attempt}.txt"
    env = run_env(s, cwd, os.environ.get("PYTHONPATH", ""))
    # verl's file logger runs in its TaskRunner actor: with ray: join that actor has only the
    # variables passed in the runtime env, so the path goes there too
    env["VERL_FILE_LOGGER_PATH"] = str(metrics)
    overrides = run_overrides(
        s,
        seed=seed,
        out_dir=out,
        strategy_file=strategy_file,
        name=f"{out.parent.name}-{out.name}",
        resume=resume,
        resume_step=step,
        env=env,
    )
    argv = command(s, sys.executable, overrides)
    metrics.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(log.with_suffix(".json"), {"argv": argv, "env": env, "cwd": cwd})
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        code = subprocess.run(
            die_with_starter(argv),
            cwd=cwd,
            env={**os.environ, **env},
            stdout=f,
            stderr=subprocess.STDOUT,
        ).returncode
    if code != 0:
        tail = log.read_bytes()[-LOG_TAIL:].decode(errors="replace")
        raise RuntimeError(f"verl exited with code {code} ({log}); its output ends:\n{tail}")
    return {
        "attempt": attempt,
        "resumed_from_step": step,
        "checkpoint_step": checkpoint_step(out),
        "wall_seconds": time.perf_counter() - t0,
        "command": " ".join(argv),
        "log": str(log),
        "metrics": str(metrics),
        "settings": json.loads(json.dumps(settings, default=str)),
    }
