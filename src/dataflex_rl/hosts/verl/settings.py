"""One verl run of ``compare``: the experiment's ``verl:`` section and the command it becomes.

Needs no verl. A run's command line is the base ``overrides`` followed by the run's own keys
(`run_overrides`: files, model, the ``dataflex`` block, seeds, budget, validation,
checkpoints); a base override of a run's own key is refused (`check_overrides`).
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import Checked, param, validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.config import shared_param
from dataflex_rl.hosts.verl.config import VerlHostConfig

#: where a run writes, relative to its folder
CKPT_DIR = "ckpt"
METRICS_DIR = "verl_metrics"
LOG_DIR = "verl_log"
STRATEGY_FILE = "dataflex_strategy.yaml"
#: the held-out prompts a run validates on when ``eval_per_domain`` is set
HELD_OUT_FILE = "held_out.parquet"
#: verl writes it last when it saves a checkpoint (holds the step)
LATEST_FILE = "latest_checkpointed_iteration.txt"
#: a run's rollout seed is ``seed + STREAM_STRIDE * sampling_stream`` (distinct for every
#: seed below the stride)
STREAM_STRIDE = 1_000_000
RAY_MODES = ("own", "join")
EVAL_METRICS = ("greedy", "sampled")


@dataclass
class VerlSettings(Checked):
    """The ``verl:`` section of an experiment file (``host: verl``)."""

    model: str = param(doc="local Hugging Face model directory (actor_rollout_ref.model.path)")
    train_files: str | list[str] = param(doc="training parquet file(s) (data.train_files)")
    val_files: str | list[str] = param(
        doc="held-out parquet file(s) (data.val_files); accuracy is read per data_source"
    )
    domains: list[str] | None = param(
        None,
        "the data sources of val_files, in the report's order (null: as they first appear "
        "in the files); checked against the files before any run",
    )
    python: str = param(
        ".venv-verl/bin/python",
        "the Python that runs verl (its venv has verl and dataflex-rl); bash "
        "scripts/setup_verl.sh makes .venv-verl",
    )
    config: str | None = param(
        None, "a verl YAML config (--config-path/--config-name); null: verl's ppo_trainer"
    )
    overrides: list[str] = param(
        [],
        "base Hydra overrides of every run (GRPO settings, batch sizes, rollout engine, "
        "reward function, GPUs...); keys a run sets itself are refused here",
    )
    dataflex: dict = param(
        {},
        "keys of the dataflex block other than strategy and seed (domain_key, "
        "poll_interval, decision_log, ...; docs/hosts/verl.md)",
    )
    env: dict[str, str] = param(
        {},
        "environment variables of the run (its driver and, with ray: join, every Ray actor)",
    )
    modules: list[str] = param(
        [],
        "modules imported in every verl process at 'import verl' (VERL_USE_EXTERNAL_MODULES):"
        " a platform, a rollout or agent loop of your own",
    )
    #: the actor's (actor_rollout_ref.actor.optim.lr)
    lr: float = shared_param("lr", "verl")
    #: verl: rollout.seed = seed + 1e6 x stream
    sampling_stream: int = shared_param("sampling_stream")
    save_every: int | None = param(
        None,
        "checkpoint every N steps (trainer.save_freq; a killed run resumes from the newest);"
        " null: at every validation",
        ge=1,
    )
    ray: str = param(
        "own",
        "own: each run starts its own Ray instance on the machine it runs on, with the GPUs "
        "it was given (one node); join: it joins the cluster it runs on, and verl places its "
        "workers there (multi-node runs; resources.gpus_per_run must be 0)",
        choices=RAY_MODES,
    )
    # set by the experiment (budget and evaluation), not in the verl section
    steps: int = param(100, "training steps (trainer.total_training_steps)", ge=1)
    prompts_per_step: int = param(16, "prompts per step (data.train_batch_size)", ge=1)
    samples_per_prompt: int = param(8, "responses per prompt (actor_rollout_ref.rollout.n)", ge=1)
    eval_every: int = param(25, "validate every N steps (0: at the start and the end)", ge=0)
    eval_metric: str = param("greedy", "validation: greedy or sampled", choices=EVAL_METRICS)
    eval_samples: int = param(1, "responses per held-out prompt when sampled", ge=1)
    eval_per_domain: int | None = param(
        None,
        "held-out prompts per data source: the first N of each in val_files, written into the "
        "run's folder (`held_out_subset`) and validated instead of val_files; null: all",
        ge=1,
    )


#: keys of the verl section the experiment sets (budget, evaluation) -> where to set them
EXPERIMENT_KEYS = {
    "steps": "budget.steps",
    "prompts_per_step": "budget.prompts_per_step",
    "samples_per_prompt": "budget.samples_per_prompt",
    "eval_every": "evaluation.every",
    "eval_metric": "evaluation.metric",
    "eval_samples": "evaluation.samples",
    "eval_per_domain": "evaluation.per_domain",
}
#: Hydra keys a run sets (exact, or a prefix ending in '.') -> the setting that owns them
RUN_KEYS = {
    "actor_rollout_ref.model.path": "verl.model",
    "data.train_files": "verl.train_files",
    "data.val_files": "verl.val_files",
    "actor_rollout_ref.actor.optim.lr": "verl.lr (controls no_update and half_lr change it)",
    "data.seed": "the run's seed",
    "actor_rollout_ref.actor.data_loader_seed": "the run's seed",
    "critic.data_loader_seed": "the run's seed",
    "actor_rollout_ref.rollout.seed": "the run's seed and verl.sampling_stream",
    "data.train_batch_size": "budget.prompts_per_step",
    "actor_rollout_ref.rollout.n": "budget.samples_per_prompt",
    "trainer.total_training_steps": "budget.steps",
    "trainer.test_freq": "evaluation.every",
    "trainer.val_before_train": "the run (validation at step 0 is the pairing check)",
    "actor_rollout_ref.rollout.val_kwargs.": "evaluation.metric and evaluation.samples",
    "trainer.save_freq": "verl.save_every",
    "trainer.resume_mode": "the run (auto when it resumes)",
    "trainer.resume_from_path": "the run (it resumes from its own folder)",
    "trainer.default_local_dir": "the run (its folder)",
    "trainer.experiment_name": "the run (<label>-seed<s>)",
    "trainer.v1.trainer_mode": "the run (dataflex)",
    "dataflex.": "verl.dataflex, and the experiment's strategies",
    "dataflex": "verl.dataflex, and the experiment's strategies",
    "ray_kwargs.ray_init.address": "verl.ray",
}
#: keys of ``verl.dataflex`` a run sets itself
RUN_BLOCK_KEYS = {"strategy": "the experiment's strategies", "seed": "the run's seed"}
_KEY = re.compile(r"^(?:\+\+|\+|~)?([A-Za-z_][\w.\-/@]*)(?:=|$)")
_PLAIN = re.compile(r"^[A-Za-z0-9_./@-]+$")


def override_key(override: str, where: str) -> str:
    """The dotted key of a Hydra override (``+a.b=1``, ``++a.b=1``, ``~a.b`` -> ``a.b``)."""
    m = _KEY.match(override) if isinstance(override, str) else None
    if m is None:
        raise ConfigError(f"{where}: {override!r} is not a Hydra override (key=value)")
    return m.group(1)


def check_overrides(overrides: list[str], where: str = "verl.overrides") -> None:
    """Refuse a base override of a key a run sets itself, naming the setting that owns it."""
    for i, o in enumerate(overrides):
        key = override_key(o, f"{where}[{i}]")
        for owned, owner in RUN_KEYS.items():
            if key == owned or (owned.endswith(".") and key.startswith(owned)):
                raise ConfigError(f"{where}[{i}]: {key} is set by each run; use {owner} ({o!r})")


def parse_settings(data: Any, where: str = "verl") -> VerlSettings:
    """Validate a verl section (with the experiment's keys merged in); a `ConfigError`
    names the key."""
    s = validate(VerlSettings, data, where)
    check_overrides(s.overrides, f"{where}.overrides")
    for key, owner in RUN_BLOCK_KEYS.items():
        if key in s.dataflex:
            raise ConfigError(f"{where}.dataflex.{key}: set by each run; use {owner}")
    validate(VerlHostConfig, s.dataflex, f"{where}.dataflex")
    for key in s.env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ConfigError(f"{where}.env.{key}: not an environment variable name")
    return s


def hydra_value(value: Any) -> str:
    """``value`` as the right-hand side of a Hydra override (strings quoted when needed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in ("null", "true", "false") and not _number(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _number(text: str) -> bool:
    """Whether Hydra would read ``text`` as a number (then a string must be quoted)."""
    try:
        float(text.replace("_", ""))
    except ValueError:
        return False
    return True


def flat_overrides(prefix: str, mapping: dict) -> list[str]:
    """``++prefix.a.b=value`` for every leaf of a nested mapping (added or replaced)."""
    out = []
    for k, v in mapping.items():
        if isinstance(v, dict) and v:
            out += flat_overrides(f"{prefix}.{k}", v)
        else:
            out.append(f"++{prefix}.{k}={hydra_value(v)}")
    return out


def seed_overrides(seed: int, stream: int) -> list[str]:
    """Every verl 0.9.1 seed that differs between runs of one arm, from the run's seed (the
    rollout's: ``seed + STREAM_STRIDE * stream``); engine seeds stay verl's, the same in every
    run (docs/hosts/compare.md#what-is-paired-on-verl)."""
    return [
        f"data.seed={seed}",
        f"actor_rollout_ref.actor.data_loader_seed={seed}",
        f"critic.data_loader_seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed + STREAM_STRIDE * stream}",
        f"++dataflex.seed={seed}",
    ]


def with_file_logger(overrides: list[str]) -> list[str]:
    """The base overrides with ``trainer.logger`` = their loggers (verl's default: console)
    plus ``file``, which writes the metrics the harness reads (one override of the key)."""
    loggers: list[str] = ["console"]
    rest = []
    for o in overrides:
        if override_key(o, "verl.overrides") == "trainer.logger" and "=" in o:
            value = o.split("=", 1)[1].strip()
            loggers = [x.strip().strip("'\"") for x in value.strip("[]").split(",") if x.strip()]
        else:
            rest.append(o)
    if "file" not in loggers:
        loggers.append("file")
    return [*rest, f"trainer.logger={hydra_value(loggers)}"]


def validation_overrides(s: VerlSettings, resume_step: int = 0) -> list[str]:
    """Validation at step 0 (the pairing check), every ``eval_every`` steps and at the end,
    greedy or ``eval_samples`` responses at temperature 1; a resume off that grid
    (``resume_step``) skips verl's validation before training."""
    every = s.eval_every if s.eval_every > 0 else s.steps
    on_grid = resume_step % every == 0 or resume_step == s.steps
    out = [f"trainer.val_before_train={hydra_value(on_grid)}", f"trainer.test_freq={every}"]
    if s.eval_metric == "greedy":
        out += [
            "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
            "actor_rollout_ref.rollout.val_kwargs.n=1",
        ]
    else:
        out += [
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            f"actor_rollout_ref.rollout.val_kwargs.n={s.eval_samples}",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        ]
    return out


def run_env(s: VerlSettings, cwd: str, pythonpath: str = "") -> dict[str, str]:
    """Environment variables a run adds: ``env``, ``modules`` (into
    ``VERL_USE_EXTERNAL_MODULES``), and ``PYTHONPATH`` = the working directory, ``env``'s,
    then the inherited ``pythonpath``."""
    env = dict(s.env)
    named = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    modules = named + [m for m in s.modules if m not in named]
    if modules:
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules)
    paths = [cwd, *env.get("PYTHONPATH", "").split(":"), *pythonpath.split(":")]
    env["PYTHONPATH"] = ":".join(dict.fromkeys(p for p in paths if p))
    return env


def run_overrides(
    s: VerlSettings,
    *,
    seed: int,
    out_dir: Path,
    strategy_file: Path,
    name: str,
    resume: bool,
    resume_step: int,
    env: dict[str, str],
) -> list[str]:
    """The Hydra overrides of one run (see the module docstring); ``resume_step`` is the
    checkpoint it resumes from (0: none)."""
    every = s.eval_every if s.eval_every > 0 else s.steps
    save = s.save_every or every
    out = [
        *with_file_logger(s.overrides),
        f"actor_rollout_ref.model.path={hydra_value(s.model)}",
        f"data.train_files={hydra_value(s.train_files)}",
        f"data.val_files={hydra_value(s.val_files)}",
        f"actor_rollout_ref.actor.optim.lr={hydra_value(float(s.lr))}",
        "trainer.v1.trainer_mode=dataflex",
        f"++dataflex.strategy={hydra_value(str(strategy_file))}",
        *flat_overrides("dataflex", s.dataflex),
        *seed_overrides(seed, s.sampling_stream),
        f"data.train_batch_size={s.prompts_per_step}",
        f"actor_rollout_ref.rollout.n={s.samples_per_prompt}",
        f"trainer.total_training_steps={s.steps}",
        *validation_overrides(s, resume_step),
        f"trainer.save_freq={save}",
        f"trainer.default_local_dir={hydra_value(str(out_dir / CKPT_DIR))}",
        f"trainer.experiment_name={hydra_value(name)}",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
    ]
    if s.ray == "own":
        out.append("++ray_kwargs.ray_init.address=local")
    else:
        out.append("++ray_kwargs.ray_init.address=auto")
        out += [
            f"++ray_kwargs.ray_init.runtime_env.env_vars.{k}={hydra_value(v)}"
            for k, v in env.items()
        ]
    return out


def command(s: VerlSettings, python: str, overrides: list[str]) -> list[str]:
    """``python -m verl.trainer.main_ppo [--config-path D --config-name N] OVERRIDES``."""
    argv = [python, "-m", "verl.trainer.main_ppo"]
    if s.config:
        cfg = Path(s.config).resolve()
        argv += ["--config-path", str(cfg.parent), "--config-name", cfg.stem]
    return argv + overrides


def settings_table() -> str:
    """The ``verl:`` section as a Markdown table (docs/hosts/verl.md embeds it verbatim); the
    keys the experiment's budget and evaluation set are left out."""
    from dataflex_rl.core.config import field_rows

    rows = ["| key | default | meaning |", "|---|---|---|"]
    for r in field_rows(VerlSettings):
        if r["name"] in EXPERIMENT_KEYS:
            continue
        default = r["default"]
        shown = "required" if default is MISSING else f"`{'null' if default is None else default}`"
        rows.append(f"| `{r['name']}` | {shown} | {r['doc']} |")
    return "\n".join(rows) + "\n"
