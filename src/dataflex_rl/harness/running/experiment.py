"""Experiment files (``configs/experiments/quick.yaml``): strategies × seeds on one host
configuration and budget.

Their keys, defaults and ranges are declared once in `ExperimentFile` (``dataflex-rl compare
--help`` prints them; docs/harness.md). Unknown keys, wrong types and out-of-range values raise
`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import Checked, key_path, param, validate, with_overrides
from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.core.spec import StrategySpec, load_yaml, parse_strategy
from dataflex_rl.harness.running.controls import Control, parse_controls
from dataflex_rl.harness.statistics.analysis import StatsOptions
from dataflex_rl.hosts.engine.config import EngineConfig, from_dict
from dataflex_rl.hosts.host import Host, merge_overrides
from dataflex_rl.hosts.registry import HOSTS, get_host
from dataflex_rl.tracking import TrackingConfig


@dataclass
class Budget(Checked):
    """Training budget of every run."""

    steps: int = param(
        100, "GRPO steps per run (with generated_tokens: the most steps per run)", ge=0
    )
    generated_tokens: int | None = param(
        None,
        "stop each run once its generation cost reaches this many tokens (response tokens, "
        "screens and audits included, plus a skip policy's forward passes), so strategies "
        "that save generation are compared at equal cost; null: steps only (engine host)",
        ge=1,
    )
    prompts_per_step: int = param(16, "prompts (groups) per step", ge=1)
    samples_per_prompt: int = param(8, "G: sampled responses per prompt", ge=2)


@dataclass
class Evaluation(Checked):
    """Held-out evaluation of every run (the same problems for every strategy and seed)."""

    metric: str = param(
        "greedy",
        "accuracy compared: greedy (temperature 0) or sampled "
        "(mean over 'samples' responses at temperature 1)",
        choices=("greedy", "sampled"),
    )
    every: int = param(
        25,
        "evaluate every N steps, and at the start and the end (0: start and "
        "end only); each checkpoint is a row of results.csv",
        ge=0,
    )
    per_domain: int = param(200, "held-out problems per domain", ge=1)
    samples: int = param(
        0, "sampled responses per problem for the sampled accuracy (0: greedy only, faster)", ge=0
    )


@dataclass
class Resources(Checked):
    """What each run holds while it runs: a Ray task's resources; the local executor gives
    each worker process its own GPUs and, without --workers, one worker per cpus_per_run
    cores. Where a run executes never changes its result (not part of its fingerprint)."""

    cpus_per_run: float = param(1, "CPU cores each run holds (Ray: num_cpus)", gt=0.0)
    gpus_per_run: float = param(
        0,
        "GPUs each run holds (Ray: num_gpus, fractions share a GPU; local: whole GPUs, "
        "given to each worker through CUDA_VISIBLE_DEVICES)",
        ge=0.0,
    )
    custom: dict[str, float] = param(
        {},
        "custom Ray resources each run holds, e.g. {a100: 1} (the ray executor only)",
        ge=0.0,
    )


EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class StrategyEntry:
    """One strategy of the matrix: its label, its fully expanded spec and, for a control arm,
    its host-settings overrides and the control's name."""

    label: str
    spec: StrategySpec
    #: the host's settings of this arm only, merged into the experiment's (an engine arm's
    #: e.g. {"optim": {"lr": 0}}; a TRL arm's {"grpo": {"learning_rate": 0}})
    overrides: dict = field(default_factory=dict)
    #: the control this arm is (harness/running/controls.py), None for the experiment's strategies
    control: str | None = None

    def to_dict(self) -> dict:
        """The spec as a plain mapping named by the label (what each worker rebuilds)."""
        return {**self.spec.to_dict(), "name": self.label}

    @property
    def mixes(self) -> bool:
        return self.spec.mix is not None


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file."""

    name: str
    strategies: tuple[StrategyEntry, ...]
    baseline: str
    seeds: tuple[int, ...]
    engine: dict = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    evaluation: Evaluation = field(default_factory=Evaluation)
    statistics: StatsOptions = field(default_factory=StatsOptions)
    description: str = ""
    path: str | None = None
    #: the requested controls; their arms are the last entries of ``strategies``
    controls: tuple[Control, ...] = ()
    #: trackers of every run and of the report
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    #: where the runs execute (`EXECUTORS`) and what each one holds
    executor: str = "local"
    resources: Resources = field(default_factory=Resources)
    #: the trainer that runs the runs (`dataflex_rl.hosts`: engine, trl, verl)
    host: str = "engine"
    #: the training function of every run (None: the host's own, `Host.train_fn`)
    train_fn: str | None = None
    #: the host's section (``trl:``, ...) when the host is not the engine (its is ``engine``)
    host_settings: dict = field(default_factory=dict)

    @property
    def host_impl(self) -> Host:
        """The `Host` the runs run on (`hosts.registry`)."""
        return get_host(self.host)

    @property
    def domains(self) -> list[str]:
        """The evaluated domains (the report's benchmarks)."""
        return self.host_impl.domains(self)

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.strategies]

    @property
    def control_outcomes(self) -> dict[str, str]:
        """Control arm label -> the outcome it must have: "same" or "worse"."""
        return {c.label: c.outcome for c in self.controls}

    def engine_config(self, overrides: dict | None = None) -> EngineConfig:
        """The `EngineConfig` shared by every run (strategy and seed are set per run), with a
        control arm's ``overrides`` merged in (engine experiments only)."""
        if self.host != "engine":
            raise ConfigError(f"{self.path or self.name}: host {self.host!r} has no engine config")
        data = merge_overrides(self.engine, overrides or {})
        b, e = self.budget, self.evaluation
        data["steps"] = b.steps
        if b.generated_tokens is not None:
            data["generated_tokens"] = b.generated_tokens
        data.setdefault("grpo", {}).update(
            prompts_per_step=b.prompts_per_step, group_size=b.samples_per_prompt
        )
        data["eval"] = {"every": e.every, "per_domain": e.per_domain, "samples": e.samples}
        log = data.setdefault("log", {})
        log.setdefault("progress", False)
        log.setdefault("plots", False)
        return from_dict(EngineConfig, data, key_path(self.path or self.name, "engine"))


@dataclass
class ExperimentFile(Checked):
    """The keys of an experiment file (``parse_experiment`` checks what spans keys)."""

    name: str = param(doc="experiment name; names the output folder (no '/')")
    strategies: list[str | dict] = param(
        doc="preset names, strategy YAML paths (relative to the file) or {label, strategy}",
        expect="a non-empty list of preset names, YAML paths or {label, strategy}",
    )
    seeds: int | list[int] = param(doc="a count n (seeds 0..n-1) or a list of distinct seeds", ge=0)
    description: str = param("", "one line on what is compared")
    baseline: str | None = param(
        None, "label the others are compared with (default 'baseline' if present, else the first)"
    )
    engine: dict | None = param(
        None,
        "EngineConfig keys (policy, threads, tasks, optim, grpo, "
        "log) except steps, seed, strategy and eval, which the "
        "experiment sets",
    )
    budget: Budget = param(Budget(), "training budget of every run")
    evaluation: Evaluation = param(Evaluation(), "held-out evaluation of every run")
    statistics: StatsOptions = param(StatsOptions(), "options of the paired statistics")
    controls: list | dict | None = param(
        None,
        "control arms: aa, no_update, half_lr, drop_half (docs/controls.md)",
        expect="a list of control names or a mapping name -> parameters",
    )
    tracking: TrackingConfig = param(
        TrackingConfig(),
        "experiment trackers of every run (one tracker run per strategy and seed, grouped "
        "by the experiment name) and of the report (docs/tracking.md); engine host only: "
        "trl and verl runs log through their own (trl.grpo.report_to, verl.overrides "
        "trainer.logger)",
    )
    executor: str = param(
        "local",
        "where the runs execute: local (worker processes on this machine) or ray (tasks on a "
        "Ray cluster; compare --address; docs/cluster.md)",
        choices=EXECUTORS,
    )
    resources: Resources = param(Resources(), "what each run holds while it runs")
    host: str = param(
        "engine",
        "the trainer that runs the runs: engine (the embedded CPU engine, settings in the "
        "'engine' section), trl (TRL's GRPOTrainer, 'trl'), verl (verl, 'verl'); "
        "docs/hosts/compare.md",
        choices=tuple(HOSTS.names()),
    )
    train_fn: str | None = param(
        None,
        "the training function of every run, on every host, as module:attr (your own script's, "
        "on PYTHONPATH): train(settings, strategy, *, seed, out_dir, resume) -> dict, settings "
        "the host's run settings; null: the host's own",
    )
    trl: dict | None = param(
        None,
        "host trl: the TRL run's settings (TrlHost; docs/hosts/compare.md)",
    )
    verl: dict | None = param(None, "host verl: the verl run's settings (docs/hosts/compare.md)")


TOP_KEYS = tuple(f.name for f in dataclasses.fields(ExperimentFile))


def _strategy_entry(value: Any, where: str, base: Path | None) -> StrategyEntry:
    if isinstance(value, dict) and "label" in value:
        extra = [k for k in value if k not in ("label", "strategy")]
        if extra:
            raise ConfigError(
                f"{where}.{extra[0]}: unknown key. A strategy entry is a preset "
                "name, a YAML path, or a mapping with 'label' and 'strategy'"
            )
        label, source = value["label"], value.get("strategy", value["label"])
        if not isinstance(label, str) or not label:
            raise ConfigError(f"{where}.label: expected a non-empty str")
    elif isinstance(value, str):
        label, source = (Path(value).stem if value.endswith((".yaml", ".yml")) else value), value
    else:
        raise ConfigError(
            f"{where}: expected a preset name, a strategy YAML path or a mapping "
            f"{{label, strategy}}, got {type(value).__name__}"
        )
    if isinstance(source, str) and source.endswith((".yaml", ".yml")) and base is not None:
        if not Path(source).is_absolute() and (base / source).is_file():
            source = str(base / source)
    return StrategyEntry(label, parse_strategy(source, where))


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{where}: a seed count must be >= 1, got {value}")
        return tuple(range(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise ConfigError(f"{where}: seeds repeat: {value}")
        return tuple(value)
    raise ConfigError(
        f"{where}: expected a count (int >= 1) or a non-empty list of distinct "
        f"ints >= 0, got {value!r}"
    )


def parse_experiment(
    data: Any,
    where: str = "experiment",
    base: Path | None = None,
    controls: tuple[str, ...] | list[str] = (),
) -> Experiment:
    """Validate an experiment mapping; ``where`` names it in errors, ``base`` resolves relative
    paths, ``controls`` (``--control``) are added unless listed."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: the top level must be a mapping with keys {', '.join(TOP_KEYS)}"
        )
    top = validate(ExperimentFile, data, where)
    name = top.name
    if not name or "/" in name:
        raise ConfigError(
            f"{key_path(where, 'name')}: expected a non-empty str without '/', got {name!r}"
        )
    raw = top.strategies
    if not raw:
        raise ConfigError(f"{key_path(where, 'strategies')}: expected a non-empty list")
    entries = tuple(
        _strategy_entry(v, key_path(where, f"strategies[{i}]"), base) for i, v in enumerate(raw)
    )
    labels = [e.label for e in entries]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(
            f"{key_path(where, 'strategies')}: labels repeat: {', '.join(dupes)} (give "
            "{label, strategy} entries to tell them apart)"
        )
    bad = [x for x in labels if not x or "/" in x or x.startswith(".")]
    if bad:
        raise ConfigError(f"{key_path(where, 'strategies')}: label {bad[0]!r} cannot name a folder")
    baseline = top.baseline
    if baseline is None:
        baseline = "baseline" if "baseline" in labels else labels[0]
    if baseline not in labels:
        raise ConfigError(
            f"{key_path(where, 'baseline')}: {baseline!r} is not one of the strategies."
            f"{suggest(str(baseline), labels)} Strategies: {', '.join(labels)}"
        )
    host = get_host(top.host, key_path(where, "host"))
    for section in HOSTS.names():
        if getattr(top, section) is not None and section != top.host:
            raise ConfigError(
                f"{key_path(where, section)}: the settings of host {section!r}, but the "
                f"experiment's host is {top.host!r} (set host: {section} to use them)"
            )
    if top.budget.steps < 1 and not host.evaluation_only:
        raise ConfigError(
            f"{key_path(where, 'budget.steps')}: host {top.host!r} trains at least 1 step "
            "(steps: 0, evaluation only, is the engine host's; TRL reads max_steps 0 as "
            "'train by epochs')"
        )
    if top.budget.generated_tokens is not None and not host.token_budget:
        why = host.no_token_budget
        raise ConfigError(
            f"{key_path(where, 'budget.generated_tokens')}: only the engine host stops a run "
            f"at a generation cost: {why}. Use budget.steps; the refill metrics "
            "(dataflex/refill/overgeneration) say what each arm generated"
        )
    if host.tracking is not None and top.tracking != TrackingConfig():
        raise ConfigError(
            f"{key_path(where, 'tracking')}: the experiment's trackers follow engine runs "
            f"and their report; host {top.host!r} runs log through their own: set "
            f"{host.tracking}"
        )
    settings = host.parse_section(getattr(top, top.host), key_path(where, top.host), base)
    same = "description budget evaluation statistics tracking train_fn executor resources host"
    exp = Experiment(
        name=name,
        strategies=entries,
        baseline=baseline,
        seeds=_seeds(top.seeds, key_path(where, "seeds")),
        engine=settings if top.host == "engine" else {},
        host_settings=settings if top.host != "engine" else {},
        path=where,
        **{k: getattr(top, k) for k in same.split()},
    )
    if exp.evaluation.metric == "sampled" and exp.evaluation.samples == 0:
        raise ConfigError(
            f"{key_path(where, 'evaluation.samples')}: metric 'sampled' needs samples >= 1"
        )
    host.run_config(exp, {})  # validates the host's section now, not in a worker
    return _with_controls(exp, top.controls, list(controls), where)


def _with_controls(exp: Experiment, value: Any, extra: list[str], where: str) -> Experiment:
    """The experiment with its control arms appended to ``strategies``."""
    parsed = list(parse_controls(value, key_path(where, "controls")))
    for name in extra:
        if not any(c.name == name for c in parsed):
            parsed += parse_controls({name: None}, "--control")
    if not parsed:
        return exp
    base = next(s for s in exp.strategies if s.label == exp.baseline)
    host = exp.host_impl
    settings = host.run_config(exp, {})
    arms = []
    for c in parsed:
        at = key_path(where, f"controls.{c.name}")
        if c.label in exp.labels:
            raise ConfigError(
                f"{at}: its arm's label {c.label!r} is already a strategy label; "
                "rename that strategy"
            )
        spec, arm_overrides = c.arm(base.spec, host.controls, settings, at)
        arms.append(StrategyEntry(c.label, spec, arm_overrides, c.name))
    exp = dataclasses.replace(exp, strategies=exp.strategies + tuple(arms), controls=tuple(parsed))
    for arm in arms:  # validates each arm's settings now, not in a worker
        host.run_config(exp, arm.overrides)
    return exp


def load_experiment(
    path: str | Path,
    controls: tuple[str, ...] | list[str] = (),
    seeds: int | None = None,
    dotted: tuple[str, ...] | list[str] = (),
) -> Experiment:
    """Read and validate an experiment YAML file; ``seeds`` replaces its seeds with
    ``0..seeds-1``, ``dotted`` overrides are set before validation."""
    p = Path(path)
    data = load_yaml(p)
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise ConfigError(f"--seeds: must be an integer >= 1, got {seeds!r}")

    def build(data: Any, _: list[str] = ()) -> Experiment:
        if seeds is not None and isinstance(data, dict):
            data = {**data, "seeds": seeds}
        return parse_experiment(data, str(path), p.resolve().parent, controls)

    return with_overrides(data, dotted, ExperimentFile, str(path), build) if dotted else build(data)
