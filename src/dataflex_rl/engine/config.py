"""Engine configuration: strict dataclasses loaded from YAML.

Unknown keys, wrong types and out-of-range values raise `ConfigError` naming the key (with a
"did you mean"). Each field's doc lives in its metadata, next to its range, so ``--help`` and
the docs are generated from the same place. Example: ``examples/quickstart.yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from dataflex_rl.core.component import check_value
from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.core.spec import load_yaml


#: difficulty levels of the engine's default task set; the shipped tiny policy was warm-started
#: on them (used for the domains that have one when ``tasks.difficulty`` is null)
DEFAULT_DIFFICULTY: Mapping[str, int] = MappingProxyType({"math": 5, "logic": 3, "science": 4})


def default_difficulty(domains: Sequence[str]) -> dict[str, int]:
    """`DEFAULT_DIFFICULTY` restricted to ``domains`` (other domains: the task defaults)."""
    return {d: DEFAULT_DIFFICULTY[d] for d in domains if d in DEFAULT_DIFFICULTY}


def opt(default: Any, doc: str, **bounds: Any) -> Any:
    """A config field with a doc line and optional bounds (``ge``, ``gt``, ``le``, ``choices``)."""
    meta = {"doc": doc, **bounds}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TasksConfig:
    """Which tasks, and how prompts are drawn when the strategy has no ``mix``."""

    domains: list[str] = opt(["math", "logic", "science"], "task domains, in id order")
    seed: int = opt(0, "seed of the task stream: which prompts are drawn (one de-duplicated "
                       "stream per domain, split at random into held-out, training and "
                       "warm-start prompts)", ge=0)
    train_size: int = opt(2000, "training prompts per domain", ge=1)
    eval_size: int = opt(200, "held-out prompts per domain (never in a training pool)", ge=1)
    eval_seed: int = opt(0, "seed of the random split of the drawn prompts into held-out, "
                            "training and warm-start prompts (the held-out set depends on it, "
                            "seed and all three sizes)", ge=0)
    warm_size: int = opt(0, "held-out-from-GRPO warm-start split per domain; must match the "
                            "policy's bootstrap so the eval and training splits are the ones "
                            "the policy was warm-started beside", ge=0)
    difficulty: dict[str, Any] | None = opt(
        None, "per domain: a level number or knobs (null: math 5, logic 3, science 4, the "
              "levels the shipped tiny policy was warm-started on)")
    proportions: list[float] | dict[str, float] | None = opt(
        None, "domain proportions used when the strategy has no mix (default uniform)", ge=0.0)
    candidate_factor: float = opt(
        1.0, "with prerollout: candidates drawn per missing prompt in each round", ge=1.0)
    max_draw_rounds: int = opt(
        8, "with prerollout: candidate rounds to fill the batch with prompts the skip policy "
           "keeps (1: one round, skipped prompts leave the batch short)", ge=1)


@dataclass
class GRPOConfig:
    """Rollouts and the policy loss (verl semantics)."""

    prompts_per_step: int = opt(16, "prompts per step (groups)", ge=1)
    group_size: int = opt(8, "G: samples per prompt", ge=2)
    max_new_tokens: int = opt(10, "response budget in tokens (EOS included)", ge=1)
    temperature: float = opt(1.0, "sampling temperature (also divides the training logits)",
                             gt=0.0)
    clip_low: float = opt(0.2, "ratio clip: lower bound is 1 - clip_low", ge=0.0, lt=1.0)
    clip_high: float = opt(0.2, "ratio clip: upper bound is 1 + clip_high", ge=0.0)
    clip_ratio_c: float = opt(3.0, "dual-clip bound for negative advantages", gt=1.0)
    kl_coef: float = opt(0.0, "coefficient of the k3 KL to the initial policy (0: no "
                              "reference model)", ge=0.0)
    adv_eps: float = opt(1e-6, "epsilon added to the group std", gt=0.0)
    norm_adv_by_std: bool = opt(True, "divide advantages by the group std (False: Dr. GRPO)")
    ppo_epochs: int = opt(1, "gradient steps on each batch (the ratio clip matters when > 1)",
                          ge=1)
    loss_agg: str = opt("informative-token-mean",
                        "token-mean denominator: 'token-mean' counts every response token of "
                        "the batch (verl's default), 'informative-token-mean' only the tokens "
                        "of responses that carry a gradient (non-zero weighted advantage)",
                        choices=("token-mean", "informative-token-mean"))


@dataclass
class OptimConfig:
    """Optimizer (AdamW or SGD) and gradient clipping."""

    lr: float = opt(0.02, "learning rate (0: the parameters never move, the 'no update' "
                          "control)", ge=0.0)
    name: str = opt("sgd", "optimizer: 'adamw', or 'sgd' (plain SGD on the clipped gradient; "
                           "with the tiny policy it learns more per step than AdamW before "
                           "gradient noise erodes what the warm start taught)",
                    choices=("adamw", "sgd"))
    weight_decay: float = opt(0.0, "weight decay (decoupled for AdamW, L2 for SGD)", ge=0.0)
    betas: list[float] = opt([0.9, 0.999], "AdamW betas", ge=0.0, lt=1.0)
    momentum: float = opt(0.0, "SGD momentum (sgd only)", ge=0.0, lt=1.0)
    grad_clip: float = opt(1.0, "max global gradient norm (0: no clipping)", ge=0.0)
    warmup_steps: int = opt(10, "linear learning-rate warm-up steps", ge=0)


@dataclass
class EvalConfig:
    """Held-out evaluation per domain."""

    every: int = opt(50, "evaluate every N steps (and at the start and the end; 0: only "
                         "start and end)", ge=0)
    per_domain: int = opt(200, "held-out problems per domain", ge=1)
    samples: int = opt(4, "sampled responses per problem for the sampled accuracy (0: greedy "
                          "only)", ge=0)
    temperature: float = opt(1.0, "temperature of the sampled accuracy", gt=0.0)


@dataclass
class LogConfig:
    """Outputs: progress bar, TensorBoard, checkpoints, plots."""

    progress: bool = opt(True, "show a progress bar")
    tensorboard: bool = opt(False, "also write TensorBoard events (needs tensorboard)")
    checkpoint_every: int = opt(50, "save a checkpoint every N steps (and at the end; 0: only "
                                    "at the end)", ge=0)
    plots: bool = opt(True, "write PNG plots at the end (needs matplotlib)")


@dataclass
class DecisionLogConfig:
    """Decision log: per step, the signals strategies read and the decision applied
    (Parquet, for ``dataflex-rl replay``; see docs/replay.md)."""

    enabled: bool = opt(False, "write the decision log")
    dir: str = opt("decisions", "log folder (relative: under the run's output folder; on verl "
                                 "trainer.default_local_dir)")
    steps_per_file: int = opt(100, "steps per Parquet file (a crash loses at most the open "
                                   "file's steps)", ge=1)
    full_tokens: bool = opt(False, "also log per-token advantages and old log-probs (list "
                                   "columns; replays token-level strategies exactly)")
    token_prob_mean: bool = opt(False, "also log each response's mean token probability (one "
                                       "pass over the tokens; replays the per-response weights "
                                       "of 'ar' without full_tokens)")


@dataclass
class EngineConfig:
    """One embedded-engine run (or, with ``strategies``, a side-by-side comparison)."""

    policy: str = opt("tiny", "'tiny' (shipped warm-started preset), a bootstrap checkpoint "
                              "directory, or a local Hugging Face causal-LM directory")
    strategy: str | dict = opt("baseline", "preset name, strategy YAML path or inline spec")
    strategies: list[str] = opt([], "strategies run side by side by 'dataflex-rl train' (preset "
                                    "names or YAML paths); empty: just 'strategy'")
    seed: int = opt(0, "seed of sampling, data order and prerollout randomness", ge=0)
    noise_stream: int = opt(0, "rollout sampling-noise stream: two runs of one seed and stream "
                               "share their sampling noise (common random numbers); another "
                               "stream gives independent rollouts (the A/A control); held-out "
                               "evaluation noise is keyed by the seed alone", ge=0)
    steps: int = opt(200, "GRPO steps", ge=0)
    out: str | None = opt(None, "output directory (default runs/<strategy>-s<seed>)")
    threads: int = opt(1, "torch CPU threads (1 is fastest for the tiny model; run processes "
                          "in parallel instead)", ge=1)
    tasks: TasksConfig = opt(TasksConfig(), "task domains and prompt drawing")
    grpo: GRPOConfig = opt(GRPOConfig(), "rollouts and loss")
    optim: OptimConfig = opt(OptimConfig(), "optimizer")
    eval: EvalConfig = opt(EvalConfig(), "held-out evaluation")
    log: LogConfig = opt(LogConfig(), "outputs")
    decision_log: DecisionLogConfig = opt(DecisionLogConfig(), "decision log for replay")

    def to_dict(self) -> dict:
        """Plain-data copy (for checkpoints and ``config.json``)."""
        return dataclasses.asdict(self)


def from_dict(cls: type, data: Any, where: str = "config") -> Any:
    """Build dataclass ``cls`` from a mapping, recursing into nested sections.

    Raises:
        ConfigError: unknown key (with close matches and the valid keys), wrong type or value.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown key.{suggest(str(key), list(fields))} "
                              f"Valid keys: {', '.join(fields)}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = from_dict(tp, value, f"{where}.{key}")
            continue
        meta = {k: v for k, v in fields[key].metadata.items() if k != "doc"}
        check_value(value, tp, meta, f"{where}.{key}")
        kwargs[key] = value
    cfg = cls(**kwargs)
    if cls is EngineConfig:
        _check_engine(cfg, where)
    return cfg


def _check_engine(cfg: EngineConfig, where: str) -> None:
    if len(set(cfg.tasks.domains)) != len(cfg.tasks.domains) or not cfg.tasks.domains:
        raise ConfigError(f"{where}.tasks.domains: must be non-empty and unique, "
                          f"got {cfg.tasks.domains}")
    if len(cfg.optim.betas) != 2:
        raise ConfigError(f"{where}.optim.betas: needs two values, got {cfg.optim.betas}")


def load_config(source: str | Path | dict | None = None, **overrides: Any) -> EngineConfig:
    """An `EngineConfig` from a YAML path, a mapping or defaults, with top-level overrides.

    Relative paths in ``strategy``/``strategies``/``policy`` are resolved against the YAML
    file's directory when they exist there.

    Raises:
        ConfigError: missing or malformed file, unknown key, wrong type or value.
    """
    base: Path | None = None
    if isinstance(source, (str, Path)):
        base = Path(source).resolve().parent
        data = load_yaml(source)
        where = str(source)
    else:
        data, where = copy.deepcopy(source or {}), "config"
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of keys")
    data = dict(data or {})
    data.update({k: v for k, v in overrides.items() if v is not None})
    cfg = from_dict(EngineConfig, data, where)
    if base is not None:
        cfg.policy = _resolve(cfg.policy, base)
        if isinstance(cfg.strategy, str):
            cfg.strategy = _resolve(cfg.strategy, base)
        cfg.strategies = [_resolve(s, base) for s in cfg.strategies]
    return cfg


def _resolve(value: str, base: Path) -> str:
    """``base / value`` when that exists and ``value`` is a relative path; else ``value``."""
    p = Path(value)
    if not p.is_absolute() and (base / p).exists() and not p.exists():
        return str(base / p)
    return value


def field_docs(cls: type = EngineConfig, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(dotted key, doc, default) for every leaf field, for ``--help`` and docs."""
    out = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out.extend(field_docs(tp, key + "."))
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append((key, f.metadata.get("doc", ""), default))
    return out
