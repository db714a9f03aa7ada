"""Experiment files (``configs/experiments/quick.yaml``): strategies × seeds on one host
configuration and budget.

Their keys, defaults and ranges are declared once in `ExperimentKeys`, plus one section per
registered host, named for it (`experiment_file`; ``dataflex-rl compare --help`` prints them;
docs/harness.md). Unknown keys, wrong types and out-of-range values raise `ConfigError` naming
the key. What differs between hosts is asked of the experiment's `Host`: its section, its
settings and what it can do (`Host.evaluation_only`, `Host.token_budget`, `Host.tracking`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import Checked, key_path, param, validate, with_overrides
from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.core.spec import StrategySpec, load_yaml, parse_strategy
from dataflex_rl.harness.running.controls import Control, parse_controls
from dataflex_rl.harness.statistics.analysis import StatsOptions
from dataflex_rl.hosts.host import Host
from dataflex_rl.hosts.registry import DEFAULT_HOST, get_host, host_classes
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
        "that save generation are compared at equal cost; null: steps only (a host that "
        "cannot stop its runs at a token count refuses it, saying why)",
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
    #: e.g. {"optim": {"lr": 0}}; a TRL arm's {"lr": 0})
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
    #: the trainer that runs the runs (a name in `dataflex_rl.hosts.registry.HOSTS`)
    host: str = DEFAULT_HOST
    #: the training function of every run (None: the host's own, `Host.train_fn`)
    train_fn: str | None = None
    #: the host's section (the one named for it) as `Host.parse_section` returned it
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


@dataclass
class ExperimentKeys(Checked):
    """The keys of every experiment file, whatever its host (``parse_experiment`` checks what
    spans keys); `experiment_file` adds ``host`` and the hosts' sections."""

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
        "by the experiment name) and of the report (docs/tracking.md); a host whose runs log "
        "through their own trackers refuses it, naming where its settings set them",
    )
    executor: str = param(
        "local",
        "where the runs execute: local (worker processes on this machine) or ray (tasks on a "
        "Ray cluster; compare --address; docs/cluster.md)",
        choices=EXECUTORS,
    )
    resources: Resources = param(Resources(), "what each run holds while it runs")
    train_fn: str | None = param(
        None,
        "the training function of every run, on every host, as module:attr (your own script's, "
        "on PYTHONPATH): train(settings, strategy, *, seed, out_dir, resume) -> dict, settings "
        "the host's run settings; null: the host's own",
    )


def experiment_file() -> type:
    """The schema of an experiment file: `ExperimentKeys`, ``host`` (one of the registered
    hosts) and each registered host's section, named for it (`Host.section_doc`)."""
    return _experiment_file(tuple((n, h.section_doc) for n, h in host_classes().items()))


@functools.cache
def _experiment_file(sections: tuple[tuple[str, str], ...]) -> type:
    names = tuple(n for n, _ in sections)
    host = param(
        DEFAULT_HOST,
        "the trainer that runs the runs, its settings in the section named for it: "
        f"{', '.join(names)}; docs/hosts/compare.md",
        choices=names,
    )
    fields = [("host", str, host)]
    fields += [(n, dict | None, param(None, doc)) for n, doc in sections]
    return dataclasses.make_dataclass("ExperimentFile", fields, bases=(ExperimentKeys,))


def _hosts_that(can: Callable[[type[Host]], bool]) -> str:
    """The registered hosts that ``can``, as ``"engine"`` or ``"engine and mine"``."""
    return " and ".join(n for n, h in host_classes().items() if can(h)) or "no"


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
    schema = experiment_file()
    if not isinstance(data, dict):
        keys = ", ".join(f.name for f in dataclasses.fields(schema))
        raise ConfigError(f"{where}: the top level must be a mapping with keys {keys}")
    top = validate(schema, data, where)
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
    for section in host_classes():
        if getattr(top, section) is not None and section != top.host:
            raise ConfigError(
                f"{key_path(where, section)}: the settings of host {section!r}, but the "
                f"experiment's host is {top.host!r} (set host: {section} to use them)"
            )
    if top.budget.steps < 1 and not host.evaluation_only:
        why = f"{host.no_evaluation_only}; " if host.no_evaluation_only else ""
        raise ConfigError(
            f"{key_path(where, 'budget.steps')}: host {top.host!r} trains at least 1 step "
            f"({why}steps: 0, evaluation only, is for "
            f"{_hosts_that(lambda h: h.evaluation_only)} runs)"
        )
    if top.budget.generated_tokens is not None and not host.token_budget:
        raise ConfigError(
            f"{key_path(where, 'budget.generated_tokens')}: host {top.host!r} cannot stop a "
            f"run at a generation cost: {host.no_token_budget}. Hosts that can: "
            f"{_hosts_that(lambda h: h.token_budget)}. Use budget.steps; the refill metrics "
            "(dataflex/refill/overgeneration) say what each arm generated"
        )
    if host.tracking is not None and top.tracking != TrackingConfig():
        raise ConfigError(
            f"{key_path(where, 'tracking')}: the experiment's trackers follow "
            f"{_hosts_that(lambda h: h.tracking is None)} runs and their report; host "
            f"{top.host!r} runs log through their own: set {host.tracking}"
        )
    settings = host.parse_section(getattr(top, top.host), key_path(where, top.host), base)
    same = "description budget evaluation statistics tracking train_fn executor resources host"
    exp = Experiment(
        name=name,
        strategies=entries,
        baseline=baseline,
        seeds=_seeds(top.seeds, key_path(where, "seeds")),
        host_settings=settings,
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

    if not dotted:
        return build(data)
    return with_overrides(data, dotted, experiment_file(), str(path), build)
