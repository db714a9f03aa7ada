"""One TRL run of ``compare`` (``host: trl``): `run_training` builds `DataflexGRPOTrainer` from
the run's settings (`TrlHost.run_config`), trains, and leaves TRL's own files in the run
folder plus ``metrics.jsonl`` (every log line, for progress). Pairing:
docs/hosts/compare.md#what-is-paired-on-trl. `check_settings` is what the harness asks the
TRL Python before any run (``python -m dataflex_rl.hosts.trl.check``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig

from dataflex_rl.core.registry import ConfigError, import_object, suggest
from dataflex_rl.hosts.host import METRICS_FILE
from dataflex_rl.hosts.trl.config import check, parse_block
from dataflex_rl.hosts.trl.host import newest_checkpoint
from dataflex_rl.hosts.trl.trainer import DataflexGRPOConfig, DataflexGRPOTrainer


def sampling_seed(seed: int, sampling_stream: int) -> int:
    """The training sampling stream's seed: the run's seed itself for stream 0, else a
    32-bit hash of (seed, stream)."""
    if sampling_stream == 0:
        return seed
    return zlib.crc32(f"dataflex-sampling/{seed}/{sampling_stream}".encode())


def eval_seed(seed: int, step: int, prefix: str) -> int:
    """The seed of one evaluation: (run seed, global step, dataset's metric prefix)."""
    return zlib.crc32(f"dataflex-eval/{seed}/{step}/{prefix}".encode())


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU and CUDA) RNGs seeded with ``seed`` inside, restored
    to their outer states afterwards."""
    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        set_seed(seed)
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


class PairedGRPOTrainer(DataflexGRPOTrainer):
    """`DataflexGRPOTrainer` whose evaluations sample under their own seeds (`eval_seed`)."""

    def __init__(self, *args, pairing_seed: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pairing_seed = pairing_seed

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        step = self.state.global_step
        with seeded(eval_seed(self.pairing_seed, step, metric_key_prefix)):
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)


class JsonlLog(TrainerCallback):
    """Every TRL log call as a line of ``metrics.jsonl``: ``{"kind": "train"|"eval", "step",
    ...}``; a training line's ``step`` counts from 0 (the step just done), as the engine's."""

    def __init__(self, out_dir: str) -> None:
        self.path = Path(out_dir) / METRICS_FILE

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        kind = "eval" if any(k.startswith("eval_") for k in logs) else "train"
        step = state.global_step - (1 if kind == "train" else 0)
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, "step": step, **logs}, default=str) + "\n")


def load_dataset_file(path: str):
    """A dataset from a parquet / JSON / JSONL file or a ``save_to_disk`` folder."""
    from datasets import Dataset, load_from_disk

    p = Path(path)
    if p.is_dir():
        return load_from_disk(str(p))
    if p.suffix == ".parquet":
        return Dataset.from_parquet(str(p))
    if p.suffix in (".json", ".jsonl"):
        return Dataset.from_json(str(p))
    raise ConfigError(f"{path}: expected a .parquet, .json or .jsonl file or a save_to_disk folder")


def grpo_config(settings: dict, strategy: dict, *, seed: int, out_dir: str, resume: bool):
    """The run's `DataflexGRPOConfig`: the settings' ``grpo`` fields and learning rate
    (``lr``, `TrlHost.run_config` sets it; without it GRPOConfig's default) plus the run's
    seed, folder, strategy and evaluation at step 0 (not again when resuming)."""
    return DataflexGRPOConfig(
        **settings["grpo"],
        **({"learning_rate": settings["lr"]} if "lr" in settings else {}),
        output_dir=out_dir,
        seed=seed,
        data_seed=seed,
        eval_on_start=not resume,
        report_to="none",
        disable_tqdm=True,
        dataflex={"strategy": strategy, "seed": seed, **settings.get("dataflex", {})},
    )


def run_training(
    settings: dict, strategy: dict, *, seed: int, out_dir: str, resume: bool
) -> dict[str, Any]:
    """Train one run of a TRL experiment (settings: `TrlHost.run_config`) into ``out_dir``
    (TRL's output_dir); ``resume`` continues from its newest checkpoint. Returns
    ``{"global_step", "train_runtime", "resumed_from", "final_eval"}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = newest_checkpoint(out_dir) if resume else None
    if resume and checkpoint is None:
        raise FileNotFoundError(f"{out_dir}: resume asked, but no finished checkpoint-N here")
    if not resume:
        (out / METRICS_FILE).unlink(missing_ok=True)
    n = settings["eval_per_domain"]
    evals = {}
    for d, f in settings["eval"].items():
        ds = load_dataset_file(f)
        evals[d] = ds.select(range(min(n, len(ds))))
    rewards = [import_object(r, f"trl.rewards[{i}]") for i, r in enumerate(settings["rewards"])]
    args = grpo_config(settings, strategy, seed=seed, out_dir=out_dir, resume=resume)
    trainer = PairedGRPOTrainer(
        model=settings["model"],
        reward_funcs=rewards,
        args=args,
        train_dataset=load_dataset_file(settings["train"]),
        eval_dataset=evals,
        processing_class=AutoTokenizer.from_pretrained(settings["model"]),
        pairing_seed=seed,
        callbacks=[JsonlLog(out_dir)],
    )
    # the training sampling stream (TRL seeded it with `seed` while building the trainer;
    # a resumed run restores the checkpoint's RNG states instead)
    set_seed(sampling_seed(seed, settings.get("sampling_stream", 0)), device_specific=True)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    evaluated = {e["step"] for e in trainer.state.log_history if _is_eval(e)}
    final = None
    if trainer.state.global_step not in evaluated:  # the last step is always evaluated
        final = trainer.evaluate()
    trainer.save_state()  # trainer_state.json in out_dir: the log history the harness reads
    return {
        "global_step": trainer.state.global_step,
        "train_runtime": result.metrics.get("train_runtime"),
        "resumed_from": checkpoint,
        "final_eval": final,
    }


def _is_eval(entry: dict) -> bool:
    return any(k.startswith("eval_") and k.endswith("_loss") for k in entry)


# ------------------------------------------------------------------ the check before runs
def check_settings(
    settings: dict, train_fn: str, where: str = "trl", strategies: list[dict] | None = None
) -> None:
    """What only the TRL Python can check: the GRPOConfig fields, each strategy against
    them (`config.check`), the rewards and the training function; a `ConfigError` names the
    key."""
    valid = [f.name for f in dataclasses.fields(GRPOConfig)]
    for key in settings["grpo"]:
        if key not in valid:
            raise ConfigError(
                f"{where}.grpo.{key}: not a GRPOConfig field of trl 1.16.{suggest(key, valid)}"
            )
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in strategies or [{"name": "baseline"}]:
            try:
                args = grpo_config(settings, strategy, seed=0, out_dir=tmp, resume=False)
            except (ValueError, TypeError) as e:
                if isinstance(e, ConfigError):
                    raise
                raise ConfigError(f"{where}.grpo: GRPOConfig refuses these fields: {e}") from e
            try:
                check(parse_block(args.dataflex), args)
            except ConfigError as e:
                raise ConfigError(
                    f"{where}.grpo: strategy {strategy.get('name')!r} does not fit: {e}"
                ) from e
    for i, r in enumerate(settings["rewards"]):
        if not callable(import_object(r, f"{where}.rewards[{i}]")):
            raise ConfigError(f"{where}.rewards[{i}]: {r} is not callable")
    if not callable(import_object(train_fn, f"{where}.train_fn")):
        raise ConfigError(f"{where}.train_fn: {train_fn} is not callable")
