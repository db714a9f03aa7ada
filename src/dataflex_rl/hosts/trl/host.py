"""TRL's ``GRPOTrainer`` as a host of ``compare`` (``host: trl``; docs/hosts/compare.md#trl).

Each run is a process of ``trl.python`` running `TRAIN_FN` (or the experiment's
``train_fn``) on `run_config`'s settings. The harness never imports TRL: `check` asks the
TRL Python to validate the settings, and results are read from the run's
``trainer_state.json`` (`read_records`). ``model: tiny`` and ``train`` / ``eval: default``
are the engine's policy and tasks, exported on first use into ``exports``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import Checked, key_path, param
from dataflex_rl.core.config import validate as from_dict
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.config import SHARED_SETTINGS, HostConfig, shared_param
from dataflex_rl.hosts.host import (
    ExternalPythonHost,
    HostControls,
    merge_overrides,
    metrics_steps_done,
    resolve_path,
)

TRAIN_FN = "dataflex_rl.hosts.trl.run:run_training"
#: TRL's default learning rate, declared in SHARED_SETTINGS: GRPOConfig's in TRL 1.16 (half_lr
#: halves it when it is not set; tests/hosts_trl checks it against the installed TRL)
TRL_DEFAULT_LR = SHARED_SETTINGS["lr"].default_for("trl")
#: GRPOConfig fields the experiment sets: field -> where to set it
OWNED = {
    "output_dir": "--out (each run's folder)",
    "seed": "seeds (the run's pairing seed)",
    "data_seed": "seeds (the run's pairing seed)",
    "max_steps": "budget.steps",
    "num_train_epochs": "budget.steps",
    "num_generations": "budget.samples_per_prompt",
    "per_device_train_batch_size": "budget.prompts_per_step (x samples_per_prompt)",
    "gradient_accumulation_steps": "budget.prompts_per_step (one generation batch per step)",
    "generation_batch_size": "budget.prompts_per_step",
    "steps_per_generation": "budget.prompts_per_step",
    "num_generations_eval": "evaluation.samples",
    "eval_strategy": "evaluation.every",
    "eval_steps": "evaluation.every",
    "eval_on_start": "evaluation (always at step 0: the pairing check)",
    "do_eval": "evaluation",
    "resume_from_checkpoint": "compare (a rerun resumes unfinished runs)",
    "learning_rate": "trl.lr (the learning rate every host names lr)",
    "dataflex": "strategies (and trl.dataflex for the other keys)",
}
#: keys of the dataflex block the experiment sets
OWNED_DATAFLEX = {"strategy": "strategies", "seed": "seeds (the run's pairing seed)"}
#: what `model: tiny` / `train: default` / `eval: default` name, under ``exports``
TINY, DEFAULT = "tiny", "default"


@dataclass
class TrlSettings(Checked):
    """The ``trl:`` section of an experiment file."""

    python: str = param(
        ".venv-trl/bin/python",
        "the Python of the TRL runs (an environment with dataflex-rl[trl], TRL 1.16; "
        "bash scripts/setup_trl.sh creates .venv-trl); relative: to the current folder",
    )
    model: str = param(
        TINY,
        "a Hugging Face model directory (relative: to the experiment file, else the current "
        "folder), or 'tiny': the engine's shipped warm-started policy, exported on first use "
        "into exports/tiny",
    )
    train: str = param(
        DEFAULT,
        "the training dataset: a parquet, JSON/JSONL file or save_to_disk folder in verl's "
        "schema (dataflex-rl export tasks), or 'default': the engine's default tasks, exported "
        "on first use into exports/tasks",
    )
    eval: str | dict[str, str] = param(
        DEFAULT,
        "held-out datasets, one per domain: {domain: file}, a folder of <domain>.parquet "
        "files, or 'default' (exports/tasks/eval); TRL evaluates and logs each",
        expect="'default', a folder or a mapping domain -> file",
    )
    exports: str = param(
        "exported",
        "where 'tiny' and 'default' are exported on first use (relative: to the current folder)",
    )
    rewards: list[str] = param(
        ["dataflex_rl.tasks.rewards:correct"],
        "TRL reward functions as module:attr (the default verifies each row by its domain)",
    )
    accuracy: str | None = param(
        None,
        "the reward whose evaluation mean is the held-out accuracy (its function's name; "
        "default: the first reward's)",
    )
    grpo: dict[str, Any] = param(
        {},
        "GRPOConfig fields passed as they are (checked by the TRL Python before any run), "
        "except the ones the experiment sets (trl.OWNED)",
    )
    dataflex: dict[str, Any] = param(
        {}, "other keys of the dataflex block (domain_key, decision_log, ...; docs/hosts/trl.md)"
    )
    #: TRL: the global RNG is seeded from (seed, sampling_stream) after the trainer is built
    sampling_stream: int = shared_param("sampling_stream")
    #: GRPOConfig's learning_rate
    lr: float = shared_param("lr", "trl")


def _where(exp) -> str:
    return key_path(exp.path or exp.name, "trl")


def _exports(s: dict) -> Path:
    return Path(s["exports"]).expanduser().resolve()


def _default_domains() -> list[str]:
    """The domains of the engine's default tasks (what `export tasks` writes)."""
    from dataflex_rl.hosts.engine.config import load_config

    return list(load_config(None).tasks.domains)


def _eval_files(s: dict, where: str) -> dict[str, str]:
    """Domain -> held-out file (absolute)."""
    value = s["eval"]
    if isinstance(value, dict):
        if not value:
            raise ConfigError(f"{where}.eval: expected at least one domain")
        return {d: str(Path(f).expanduser().resolve()) for d, f in value.items()}
    folder = _exports(s) / "tasks" / "eval" if value == DEFAULT else Path(value).expanduser()
    if value == DEFAULT:
        return {d: str(folder / f"{d}.parquet") for d in _default_domains()}
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    if not files:
        raise ConfigError(
            f"{where}.eval: {folder} is not a folder of <domain>.parquet files "
            "(or give a mapping domain -> file)"
        )
    return {f.stem: str(f.resolve()) for f in files}


def _paths(s: dict, where: str) -> dict:
    ex = _exports(s)
    model = ex / TINY if s["model"] == TINY else Path(s["model"]).expanduser().resolve()
    train = (
        ex / "tasks" / "train.parquet"
        if s["train"] == DEFAULT
        else Path(s["train"]).expanduser().resolve()
    )
    return {"model": str(model), "train": str(train), "eval": _eval_files(s, where)}


def _eval_batch(per_domain: int, samples: int) -> int:
    """Completions per evaluation batch: whole groups of ``samples`` over a number of prompts
    dividing ``per_domain`` (so TRL's mean over batches is the mean over problems), at most
    64 completions where possible."""
    prompts = max(
        (g for g in range(1, per_domain + 1) if per_domain % g == 0 and g * samples <= 64),
        default=1,
    )
    return prompts * samples


def _export_missing(settings: dict, config: dict) -> None:
    """Export the engine's tiny policy / default tasks into ``exports`` where the settings
    name them and they are not there yet."""
    if settings.get("model", TINY) == TINY and not Path(config["model"], "config.json").is_file():
        from dataflex_rl.hosts.engine.export import export_policy

        export_policy(TINY, config["model"], force=True)
        print(f"exported the engine's tiny policy to {config['model']} (first use)")
    tasks = _exports({"exports": settings.get("exports", TrlSettings.exports)}) / "tasks"
    uses_default = DEFAULT in (settings.get("train", DEFAULT), settings.get("eval", DEFAULT))
    if uses_default and not (tasks / "tasks.json").is_file():
        from dataflex_rl.hosts.engine.config import load_config
        from dataflex_rl.hosts.engine.export import export_engine_tasks

        export_engine_tasks(load_config(None), tasks, force=True)
        print(f"exported the engine's default tasks to {tasks} (first use)")


def _checkpoints(out: str | Path) -> list[Path]:
    """``checkpoint-N`` folders TRL finished writing (``trainer_state.json`` is written
    last), oldest first."""
    found = [
        p
        for p in Path(out).glob("checkpoint-*")
        if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def newest_checkpoint(out: str | Path) -> str | None:
    """The newest ``checkpoint-N`` TRL finished writing, None without one."""
    found = _checkpoints(out)
    return str(found[-1]) if found else None


def log_history(out: Path) -> list[dict]:
    """TRL's log history of a run: its final ``trainer_state.json``, else the newest
    checkpoint's."""
    state = Path(out) / "trainer_state.json"
    if not state.is_file():
        newest = newest_checkpoint(out)
        if newest is None:
            raise FileNotFoundError(f"{out}: no trainer_state.json (the run logged nothing)")
        state = Path(newest) / "trainer_state.json"
    return json.loads(state.read_text())["log_history"]


def records_from_history(
    history: list[dict], domains: list[str], accuracy: str, mixes: bool = False
) -> tuple[list, list]:
    """Evaluation records and (for mixers) proportions from a TRL log history.

    Each eval dataset's entry holds ``eval_<domain>_loss`` and ``eval_rewards/<accuracy>/mean``
    (with 0/1 rewards, the sampled accuracy); a step evaluated twice keeps the later.
    Proportions are the training entries' mix figures at ``step - 1`` (as the engine counts).
    """
    from dataflex_rl.core.metrics import domain_metric, metric_domain

    key = f"eval_rewards/{accuracy}/mean"
    by_step: dict[int, dict] = {}
    props = []
    for entry in history:
        step = int(entry.get("step", 0))
        named = [d for d in domains if f"eval_{d}_loss" in entry or f"eval_{d}_runtime" in entry]
        if named:
            if key not in entry:
                raise KeyError(
                    f"the evaluation of {named[0]!r} at step {step} has no {key!r} "
                    f"(keys: {', '.join(sorted(entry))})"
                )
            if entry[key] is not None:
                by_step.setdefault(step, {"step": step})[f"{metric_domain(named[0])}/sampled"] = (
                    float(entry[key])
                )
        elif mixes:
            for d in domains:
                target = entry.get(domain_metric("mix", d, "target"))
                if target is not None:
                    props.append(
                        {
                            "step": step - 1,
                            "domain": d,
                            "target": target,
                            "actual": entry.get(domain_metric("mix", d, "actual")),
                        }
                    )
    return [by_step[s] for s in sorted(by_step)], props


class TrlHost(ExternalPythonHost):
    """TRL's ``GRPOTrainer`` (``host: trl``): each run a process of ``trl.python``."""

    name = "trl"
    section_doc = "host trl: the TRL run's settings (TrlHost; docs/hosts/compare.md)"
    setup = "bash scripts/setup_trl.sh"
    no_evaluation_only = "TRL reads max_steps 0 as 'train by epochs'"
    no_token_budget = (
        "TRL's GRPOTrainer stops at max_steps, and the TRL run entry has no stop at a count of "
        "generated tokens (refill rounds included), so its arms cannot be cut at equal "
        "generation cost"
    )
    #: what the controls change: aa another ``sampling_stream`` (training sampling, same
    #: model, prompt order and evaluation); no_update / half_lr ``lr`` (GRPOConfig's
    #: learning_rate)
    controls = HostControls(
        stream="sampling_stream", lr="lr", lr_default=TRL_DEFAULT_LR, section="trl."
    )
    #: where a TRL run's trackers are set (the experiment's ``tracking:`` is refused)
    tracking = (
        "trl.grpo: report_to, logging_dir and run_name, GRPOConfig's (TRL's own trackers; "
        "report_to: none keeps them off)"
    )
    schemas = {"trl": TrlSettings, "trl.dataflex": HostConfig}
    train_default = TRAIN_FN
    framework = "trl"
    check_module = "dataflex_rl.hosts.trl.check"

    # ------------------------------------------------------------ settings and planning
    def parse_section(self, data: Any, where: str, base: Path | None) -> dict:
        """The ``trl:`` section checked (`TrlSettings`), with data and model paths that exist
        relative to the experiment file resolved against it."""
        s = from_dict(TrlSettings, data or {}, where)
        for key, home in OWNED.items():
            if key in s.grpo:
                raise ConfigError(
                    f"{where}.grpo.{key}: set by the experiment, not the GRPOConfig fields; "
                    f"use {home}"
                )
        for key, home in OWNED_DATAFLEX.items():
            if key in s.dataflex:
                raise ConfigError(f"{where}.dataflex.{key}: set by the experiment; use {home}")
        if not s.rewards:
            raise ConfigError(f"{where}.rewards: expected at least one reward function")
        out = asdict(s)
        if s.model != TINY:
            out["model"] = resolve_path(s.model, base)
        if s.train != DEFAULT:
            out["train"] = resolve_path(s.train, base)
        if isinstance(s.eval, dict):
            out["eval"] = {d: resolve_path(f, base) for d, f in s.eval.items()}
        elif s.eval != DEFAULT:
            out["eval"] = resolve_path(s.eval, base)
        return out

    def run_config(self, exp, overrides: dict) -> dict:
        """The settings a TRL run receives: the section with the arm's overrides, paths made
        absolute, and ``grpo`` completed with what the experiment sets (`OWNED`)."""
        where = _where(exp)
        data = merge_overrides(exp.host_settings, overrides or {})
        s = asdict(from_dict(TrlSettings, data, where))
        e, b = exp.evaluation, exp.budget
        if e.metric != "sampled" or e.samples < 1:
            raise ConfigError(
                f"{key_path(exp.path or exp.name, 'evaluation.metric')}: host trl evaluates the "
                "sampled accuracy only (TRL's evaluation samples at its temperature): set "
                "evaluation.metric: sampled and evaluation.samples >= 1"
            )
        grpo = {
            "per_device_eval_batch_size": _eval_batch(e.per_domain, e.samples),
            "save_steps": e.every or b.steps or 1,
            "logging_steps": 1,
            **s["grpo"],
            "max_steps": b.steps,
            "num_generations": b.samples_per_prompt,
            "per_device_train_batch_size": b.prompts_per_step * b.samples_per_prompt,
            "gradient_accumulation_steps": 1,
            "num_generations_eval": e.samples,
            "eval_strategy": "steps" if e.every else "no",
            **({"eval_steps": e.every} if e.every else {}),
        }
        accuracy = s["accuracy"] or s["rewards"][0].rpartition(":")[2].rpartition(".")[2]
        return {
            **_paths(s, where),
            "rewards": s["rewards"],
            "accuracy": accuracy,
            "eval_per_domain": e.per_domain,
            "grpo": grpo,
            "dataflex": s["dataflex"],
            "sampling_stream": s["sampling_stream"],
            "lr": s["lr"],
        }

    def domains(self, exp) -> list[str]:
        return list(self.run_config(exp, {})["eval"])

    def check(self, exp) -> None:
        """Before any run: the TRL Python (`check_python`), ``tiny`` / ``default`` exported if
        missing, the model and data files, then the TRL Python's own check (`run_check`)."""
        where = _where(exp)
        self.check_python(exp)
        config = self.run_config(exp, {})
        _export_missing(exp.host_settings, config)
        model = Path(config["model"])
        if not (model / "config.json").is_file():
            raise ConfigError(f"{where}.model: {model} is not a Hugging Face model directory")
        if not Path(config["train"]).exists():
            raise ConfigError(f"{where}.train: {config['train']} does not exist")
        for d, f in config["eval"].items():
            if not Path(f).exists():
                raise ConfigError(f"{where}.eval.{d}: {f} does not exist")
        payload = {
            "settings": config,
            "train_fn": self.train_fn(exp),
            "where": where,
            "strategies": [s.to_dict() for s in exp.strategies],
        }
        self.run_check(exp, payload)

    def setup_lines(self, exp) -> list[str]:
        c, b = self.run_config(exp, {}), exp.budget
        own = exp.host_settings.get("grpo") or {}
        return [
            f"host: TRL GRPOTrainer (DataflexGRPOTrainer), model `{c['model']}`, train "
            f"`{c['train']}`, domains {', '.join(c['eval'])}; budget {b.steps} steps × "
            f"{b.prompts_per_step} prompts × {b.samples_per_prompt} samples; GRPOConfig "
            + (", ".join(f"{k}={v}" for k, v in own.items()) or "defaults"),
            "paired on TRL: per seed every arm loads the same model directory, draws the same "
            "prompt order (GRPOConfig seed = the seed: TRL's sampler), evaluates the same "
            "held-out problems at the same steps with the sampling RNG seeded by (seed, step, "
            "domain), apart from training's; training's sampling stream is seeded by (seed, "
            "sampling_stream) once the trainer is built (aa: another stream)",
            "not pairable on TRL: greedy accuracy (TRL evaluates by sampling; the score is "
            "sampled accuracy); a rollout's kernels may be nondeterministic on GPUs; "
            "strategies that mix or skip prompts draw other prompts",
        ]

    # ------------------------------------------------------------ running (in the run)
    def read_records(self, out: Path, config: dict, mixes: bool) -> tuple[list, list]:
        """`records_from_history` over the run's `log_history` (files only)."""
        history = log_history(out)
        return records_from_history(history, list(config["eval"]), config["accuracy"], mixes)

    def has_checkpoint(self, out: Path) -> bool:
        return bool(_checkpoints(out))

    def steps_done(self, out: Path) -> int:
        """The run's ``metrics.jsonl`` (every TRL log call, `hosts.trl.run.JsonlLog`)."""
        return metrics_steps_done(out)
