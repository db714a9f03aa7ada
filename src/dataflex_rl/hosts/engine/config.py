"""Engine configuration: strict dataclasses (`dataflex_rl.core.config`) loaded from YAML;
each field's doc feeds ``--help`` and the docs. Example: ``examples/quickstart.yaml``."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dataflex_rl.core.config import Checked, key_path, param, validate, with_overrides
from dataflex_rl.core.proportions import normalize_proportions
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import load_yaml
from dataflex_rl.hosts.common.config import DecisionLogConfig, shared_param
from dataflex_rl.tracking.config import TrackingConfig

#: difficulty levels of the engine's default task set; the shipped tiny policy was warm-started
#: on them (used for the domains that have one when ``tasks.difficulty`` is null)
DEFAULT_DIFFICULTY: Mapping[str, int] = MappingProxyType({"math": 5, "logic": 3, "science": 4})


def default_difficulty(domains: Sequence[str]) -> dict[str, int]:
    """`DEFAULT_DIFFICULTY` restricted to ``domains`` (other domains: the task defaults)."""
    return {d: DEFAULT_DIFFICULTY[d] for d in domains if d in DEFAULT_DIFFICULTY}


#: the built-in domains of ``source: generated`` (the default of ``tasks.domains``)
BUILTIN_DOMAINS = ("math", "logic", "science")
#: `TasksConfig` keys that only apply with ``source: files``
FILE_KEYS = ("train", "eval", "verifiers", "domain_key")


@dataclass
class TasksConfig(Checked):
    """Which tasks, and how prompts are drawn when the strategy has no ``mix``."""

    source: str = param(
        "generated",
        "where the prompts come from: 'generated' (the built-in domains' generators) or "
        "'files' (a verl-schema dataset: tasks.train, tasks.verifiers; docs/datasets.md)",
        choices=("generated", "files"),
    )
    train: str | list[str] | None = param(
        None,
        "source files: the training data, a .parquet/.jsonl/.json file, a list of them, or a "
        "save_to_disk directory (a DatasetDict gives its 'train' split); relative paths are "
        "resolved against the config file's folder",
    )
    eval: str | list[str] | None = param(
        None,
        "source files: held-out data (null: the 'test' or 'validation' split of a "
        "DatasetDict train directory, else tasks.eval_fraction of each domain of train, "
        "split by tasks.eval_seed)",
    )
    eval_fraction: float = param(
        0.1, "source files without eval data: fraction of each domain held out", gt=0.0, lt=1.0
    )
    domain_key: str | None = shared_param("domain_key")
    prompt_column: str = param(
        "prompt", "source files: column of the prompt (a string or a chat list of messages)"
    )
    answer_column: str = param(
        "reward_model.ground_truth", "source files: column (dotted path) of the ground truth"
    )
    verifiers: dict[str, str | dict[str, Any]] = param(
        {},
        "source files: the verifier of every domain of the data, a kind ('exact', 'numeric', "
        "'math', 'domain': a built-in domain's own rule, or 'module:attr') or {kind: ..., "
        "PARAM: value} (numeric: rel_tol, abs_tol); the key order is the domain id order",
    )
    domains: list[str] = param(
        list(BUILTIN_DOMAINS),
        "task domains, in id order (source files: the keys of tasks.verifiers)",
    )
    seed: int = param(
        0,
        "seed of the task stream: which prompts are drawn (one de-duplicated "
        "stream per domain, split at random into held-out, training and "
        "warm-start prompts)",
        ge=0,
    )
    train_size: int = param(2000, "training prompts per domain", ge=1)
    eval_size: int = param(200, "held-out prompts per domain (never in a training pool)", ge=1)
    eval_seed: int = param(
        0,
        "seed of the random split of the drawn prompts into held-out, "
        "training and warm-start prompts (the held-out set depends on it, "
        "seed and all three sizes)",
        ge=0,
    )
    warm_size: int = param(
        0,
        "held-out-from-GRPO warm-start split per domain; must match the "
        "policy's bootstrap so the eval and training splits are the ones "
        "the policy was warm-started beside",
        ge=0,
    )
    difficulty: dict[str, Any] | None = param(
        None,
        "per domain: a level number or knobs (null: math 5, logic 3, science 4, the "
        "levels the shipped tiny policy was warm-started on)",
    )
    proportions: list[float] | dict[str, float] | None = param(
        None, "domain proportions used when the strategy has no mix (default uniform)", ge=0.0
    )
    candidate_factor: float = shared_param("candidate_factor")
    max_draw_rounds: int = shared_param("max_draw_rounds")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source == "files":
            self._check_files()
        else:
            for key in FILE_KEYS:
                if getattr(self, key):
                    raise ConfigError(
                        f"TasksConfig.{key}: only used with source: files (tasks.source is "
                        f"{self.source!r}); set source: files or remove {key}"
                    )
        if len(set(self.domains)) != len(self.domains) or not self.domains:
            raise ConfigError(
                f"TasksConfig.domains: must be non-empty and unique, got {self.domains}"
            )
        if self.proportions is not None:  # a misspelt domain is refused here, before any run
            normalize_proportions(self.proportions, self.domains, "TasksConfig.proportions")

    def _check_files(self) -> None:
        """``source: files``: train and a verifier per domain are given, the verifiers build
        (kinds and parameters checked), the domains are the verifiers' keys."""
        from dataflex_rl.tasks.verifiers import build_verifier, verifier_kinds

        if not self.train:
            raise ConfigError(
                "TasksConfig.train: required with source: files (a .parquet/.jsonl/.json "
                "file, a list of them, or a save_to_disk directory)"
            )
        if not self.verifiers:
            raise ConfigError(
                "TasksConfig.verifiers: required with source: files: a verifier per domain "
                f"of the data, e.g. {{math: math, logic: exact}}; kinds: "
                f"{', '.join(verifier_kinds())}"
            )
        if self.difficulty is not None:
            raise ConfigError(
                "TasksConfig.difficulty: only used with source: generated (a dataset's "
                "problems are given, not generated)"
            )
        for domain, spec in self.verifiers.items():
            build_verifier(spec, f"TasksConfig.verifiers.{domain}", domain=domain)
        keys = list(self.verifiers)
        if self.domains not in (list(BUILTIN_DOMAINS), keys):
            raise ConfigError(
                f"TasksConfig.domains: with source: files the domains are the keys of "
                f"tasks.verifiers ({keys}); got {self.domains}. Leave domains out"
            )
        self.domains = keys


@dataclass
class GRPOConfig(Checked):
    """Rollouts and the policy loss (verl semantics)."""

    prompts_per_step: int = param(16, "prompts per step (groups)", ge=1)
    group_size: int = param(8, "G: samples per prompt", ge=2)
    max_new_tokens: int = param(10, "response budget in tokens (EOS included)", ge=1)
    temperature: float = param(
        1.0, "sampling temperature (also divides the training logits)", gt=0.0
    )
    clip_low: float = param(0.2, "ratio clip: lower bound is 1 - clip_low", ge=0.0, lt=1.0)
    clip_high: float = param(0.2, "ratio clip: upper bound is 1 + clip_high", ge=0.0)
    clip_ratio_c: float = param(3.0, "dual-clip bound for negative advantages", gt=1.0)
    kl_coef: float = param(
        0.0, "coefficient of the k3 KL to the initial policy (0: no reference model)", ge=0.0
    )
    adv_eps: float = param(
        1e-6, "epsilon added to the group std (also in recomputed advantages)", gt=0.0
    )
    norm_adv_by_std: bool = param(True, "divide advantages by the group std (False: Dr. GRPO)")
    ppo_epochs: int = param(
        1, "gradient steps on each batch (the ratio clip matters when > 1)", ge=1
    )
    loss_agg: str = param(
        "informative-token-mean",
        "token-mean denominator: 'token-mean' counts every response token of "
        "the batch (verl's default), 'informative-token-mean' only the tokens "
        "of responses that carry a gradient (non-zero weighted advantage)",
        choices=("token-mean", "informative-token-mean"),
    )


@dataclass
class AsyncConfig(Checked):
    """Asynchronous training (docs/concepts.md#asynchronous-training): generation runs up to
    ``staleness`` batches ahead of the update, and the update trains on the groups that
    finished first, generated by a policy up to about that many steps old."""

    staleness: int = param(
        0,
        "k: batches the generator runs ahead of the update (0: synchronous, each step "
        "trains on what its own policy generated)",
        ge=0,
        le=64,
    )
    is_cap: float = param(
        2.0,
        "off-policy correction (k >= 1): the ratio is taken against the current policy and "
        "each token's advantage weighed by min(pi_current / pi_generating, is_cap) "
        "(truncated importance sampling)",
        ge=1.0,
    )


@dataclass
class OptimConfig(Checked):
    """Optimizer (AdamW or SGD) and gradient clipping."""

    #: the tiny policy's SGD learning rate: its default is the engine's own (SHARED_SETTINGS)
    lr: float = shared_param("lr", "engine")
    name: str = param(
        "sgd",
        "optimizer: 'adamw', or 'sgd' (plain SGD on the clipped gradient; "
        "with the tiny policy it learns more per step than AdamW before "
        "gradient noise erodes what the warm start taught)",
        choices=("adamw", "sgd"),
    )
    weight_decay: float = param(0.0, "weight decay (decoupled for AdamW, L2 for SGD)", ge=0.0)
    betas: list[float] = param([0.9, 0.999], "AdamW betas", ge=0.0, lt=1.0)
    momentum: float = param(0.0, "SGD momentum (sgd only)", ge=0.0, lt=1.0)
    grad_clip: float = param(1.0, "max global gradient norm (0: no clipping)", ge=0.0)
    warmup_steps: int = param(10, "linear learning-rate warm-up steps", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.betas) != 2:
            raise ConfigError(f"OptimConfig.betas: needs two values, got {self.betas}")


@dataclass
class EvalConfig(Checked):
    """Held-out evaluation per domain."""

    every: int = param(
        50, "evaluate every N steps (and at the start and the end; 0: only start and end)", ge=0
    )
    per_domain: int = param(200, "held-out problems per domain", ge=1)
    samples: int = param(
        4, "sampled responses per problem for the sampled accuracy (0: greedy only)", ge=0
    )
    temperature: float = param(1.0, "temperature of the sampled accuracy", gt=0.0)


@dataclass
class LogConfig(Checked):
    """Outputs: progress bar, checkpoints, plots (trackers: the ``tracking`` section)."""

    progress: bool = param(True, "show a progress bar")
    checkpoint_every: int = param(
        50, "save a checkpoint every N steps (and at the end; 0: only at the end)", ge=0
    )
    plots: bool = param(True, "write PNG plots at the end (needs matplotlib)")


@dataclass
class EngineConfig(Checked):
    """One embedded-engine run (or, with ``strategies``, a side-by-side comparison)."""

    policy: str = param(
        "tiny",
        "'tiny' (shipped warm-started preset), a bootstrap checkpoint "
        "directory, or a local Hugging Face causal-LM directory",
    )
    strategy: str | dict = param("baseline", "preset name, strategy YAML path or inline spec")
    strategies: list[str] = param(
        [],
        "strategies run side by side by 'dataflex-rl train' (preset "
        "names or YAML paths); empty: just 'strategy' (a strategy set on the command line, "
        "strategy=NAME or --strategy NAME, runs just that one)",
    )
    seed: int = param(0, "seed of sampling, data order and prerollout randomness", ge=0)
    #: two runs of one seed and stream share their sampling noise (common random numbers)
    sampling_stream: int = shared_param("sampling_stream")
    steps: int = param(200, "GRPO steps", ge=0)
    generated_tokens: int | None = param(
        None,
        "stop once the run's generation cost reaches this many tokens (response tokens of "
        "trained and audited groups plus the skip policy's forward passes; "
        "engine/generation_cost_tokens_total); steps stays the most steps (null: steps only)",
        ge=1,
    )
    out: str | None = param(None, "output directory (default runs/<strategy>-s<seed>)")
    threads: int = param(
        1,
        "torch CPU threads (1 is fastest for the tiny model; run processes in parallel instead)",
        ge=1,
    )
    tasks: TasksConfig = param(TasksConfig(), "task domains and prompt drawing")
    grpo: GRPOConfig = param(GRPOConfig(), "rollouts and loss")
    optim: OptimConfig = param(OptimConfig(), "optimizer")
    asynchronous: AsyncConfig = param(AsyncConfig(), "asynchronous training (stale groups)")
    eval: EvalConfig = param(EvalConfig(), "held-out evaluation")
    log: LogConfig = param(LogConfig(), "outputs")
    decision_log: DecisionLogConfig = param(DecisionLogConfig(), "decision log for replay")
    tracking: TrackingConfig = param(
        TrackingConfig(), "experiment trackers: TensorBoard, W&B, MLflow (docs/tracking.md)"
    )

    def to_dict(self) -> dict:
        """Plain-data copy (for checkpoints and ``config.json``)."""
        return dataclasses.asdict(self)


def from_dict(cls: type, data: Any, where: str = "config") -> Any:
    """Build the declared dataclass ``cls`` from a mapping (`ConfigError` for a bad key,
    type or value)."""
    return validate(cls, data, where)


def load_config(
    source: str | Path | dict | None = None, *, dotted: Sequence[str] = (), **overrides: Any
) -> EngineConfig:
    """An `EngineConfig` from a YAML path, a mapping or defaults, with ``dotted``
    (``key.sub=value``) and top-level ``overrides`` (None: not set); relative paths that exist
    beside the YAML file are resolved against it.

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
    keywords = {k: v for k, v in overrides.items() if v is not None}

    def build(data: dict, dotted: list[str]) -> EngineConfig:
        data.update(keywords)
        given = {item.partition("=")[0].strip().split(".")[0] for item in dotted}
        _one_strategy_key(data, given | set(keywords))
        cfg = from_dict(EngineConfig, data, where)
        if base is not None:
            cfg.policy = _resolve(cfg.policy, base)
            if isinstance(cfg.strategy, str):
                cfg.strategy = _resolve(cfg.strategy, base)
            cfg.strategies = [_resolve(s, base) for s in cfg.strategies]
            for key in ("train", "eval"):
                setattr(cfg.tasks, key, resolve_paths(getattr(cfg.tasks, key), base))
        _check_strategies(cfg, where)
        return cfg

    return with_overrides(data, dotted, EngineConfig, where, build)


def _one_strategy_key(data: dict, given: set[str]) -> None:
    """An override of ``strategy`` drops the config's ``strategies`` (as ``--strategy`` does);
    overriding both ``strategy`` and a non-empty ``strategies`` is refused."""
    if "strategy" not in given:
        return
    if "strategies" not in given:
        data["strategies"] = []
    elif data.get("strategies"):
        raise ConfigError(
            f"both strategy ({data['strategy']!r}) and strategies ({data['strategies']!r}) "
            f"are set by overrides; strategies runs side by side and ignores strategy: "
            f"keep one (e.g. strategies=[maxvar, baseline], or just strategy=maxvar)"
        )


def _check_strategies(cfg: EngineConfig, where: str) -> None:
    """Parse the strategy (or each of ``strategies``) now, so errors come before any work."""
    from dataflex_rl.core.spec import parse_strategy

    if cfg.strategies:
        for i, s in enumerate(cfg.strategies):
            parse_strategy(s, key_path(where, f"strategies[{i}]"))
    else:
        parse_strategy(cfg.strategy, key_path(where, "strategy"))


def resolve_paths(value: Any, base: Path) -> Any:
    """A path or a list of paths with each one `_resolve`-d against ``base``."""
    if isinstance(value, str):
        return _resolve(value, base)
    if isinstance(value, list):
        return [_resolve(v, base) if isinstance(v, str) else v for v in value]
    return value


def _resolve(value: str, base: Path) -> str:
    """``base / value`` when that exists and ``value`` is a relative path; else ``value``."""
    p = Path(value)
    if not p.is_absolute() and (base / p).exists() and not p.exists():
        return str(base / p)
    return value
