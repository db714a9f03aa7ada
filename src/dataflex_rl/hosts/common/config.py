"""Settings every host takes the same way (`SHARED_SETTINGS`, `HostConfig`: the ``dataflex``
block of verl and TRL), and the checks every such host makes before training starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dataflex_rl.core.base import SKIP_POLICIES
from dataflex_rl.core.config import Checked, field_rows, param
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import StrategySpec, parse_strategy, resolved_option
from dataflex_rl.core.strategy import check_strategy


@dataclass
class DecisionLogConfig(Checked):
    """Decision log: per step, the signals strategies read and the decision applied
    (Parquet, for ``dataflex-rl replay``; see docs/replay.md)."""

    enabled: bool = param(False, "write the decision log")
    dir: str = param(
        "decisions",
        "log folder (relative: under the run's output folder: verl's "
        "trainer.default_local_dir, TRL's output_dir)",
    )
    steps_per_file: int = param(
        100, "steps per Parquet file (a crash loses at most the open file's steps)", ge=1
    )
    full_tokens: bool = param(
        False,
        "also log per-token advantages and old log-probs (list "
        "columns; replays token-level strategies exactly)",
    )
    token_prob_mean: bool = param(
        False,
        "also log each response's mean token probability (one "
        "pass over the tokens; replays the per-response weights "
        "of 'ar' without full_tokens)",
    )


@dataclass(frozen=True)
class SharedSetting:
    """One setting that more than one host has: its default, meaning and checks, declared once.

    ``checks`` are `param`'s range keywords; ``host_defaults`` (host -> default, every host
    that has the setting) replaces ``default`` where no one value fits every host's model,
    and ``why`` says why (both go into the doc line, `meaning`).
    """

    default: Any
    doc: str
    checks: Mapping[str, Any] = field(default_factory=dict)
    host_defaults: Mapping[str, Any] | None = None
    why: str = ""

    def default_for(self, host: str) -> Any:
        """The default on ``host`` (ValueError: a per-host default that does not list it)."""
        if self.host_defaults is None:
            return self.default
        if host not in self.host_defaults:
            raise ValueError(
                f"host {host!r} has no default declared in SHARED_SETTINGS (hosts declared: "
                f"{', '.join(self.host_defaults)}); add it there"
            )
        return self.host_defaults[host]

    @property
    def meaning(self) -> str:
        """The doc line every host shows: ``doc``, and with per-host defaults each host's
        default and why they differ."""
        if self.host_defaults is None:
            return self.doc
        each = ", ".join(f"{h} {v}" for h, v in self.host_defaults.items())
        return f"{self.doc}; the default is the host's own ({each}): {self.why}"


#: settings that more than one host has: every host declares them with `shared_param`, so
#: the name, type, default and meaning are one (tests/contract/test_host_settings.py compares
#: every host's schema, and docs/config.md shows this table)
SHARED_SETTINGS: dict[str, SharedSetting] = {
    "candidate_factor": SharedSetting(
        1.0,
        "with prerollout: candidates drawn per missing prompt in each round (1: as many as "
        "are missing, so a skip policy that reads the policy's representation pays for no "
        "extra forward passes; more: fewer rounds)",
        {"ge": 1.0},
    ),
    "max_draw_rounds": SharedSetting(
        8,
        "with prerollout: candidate rounds to fill the batch with prompts the skip policy "
        "keeps; then skipped candidates fill the rest, so every batch is full (1: one round)",
        {"ge": 1},
    ),
    "sampling_stream": SharedSetting(
        0,
        "the training rollouts' sampling stream: runs of one seed and stream share their "
        "sampling randomness as far as the host can pair it; another stream gives independent "
        "rollouts (the aa control takes another); evaluation does not depend on it",
        {"ge": 0},
    ),
    "domain_key": SharedSetting(
        None,
        "column of the training set with each prompt's domain (dotted for a nested field, e.g. "
        "extra_info.domain; the engine reads it with tasks.source files); an error when it is "
        "not a column or a row lacks it; null: 'domain' if the training set has it, else "
        "'data_source'",
    ),
    "lr": SharedSetting(
        None,
        "learning rate of the policy's optimizer (the no_update control sets 0, half_lr halves it)",
        {"ge": 0.0},
        host_defaults=MappingProxyType({"engine": 0.02, "trl": 1e-6, "verl": 1e-6}),
        why="the engine's ~0.9M-parameter tiny policy learns the most per step with SGD at "
        "0.02, while TRL and verl train LLMs with AdamW, where 1e-6 is GRPO's usual rate (TRL's "
        "GRPOConfig default); no one rate fits both model scales",
    ),
}


def shared_param(name: str, host: str | None = None) -> Any:
    """The dataclass field of the shared setting ``name`` (`SHARED_SETTINGS`) on ``host``
    (needed, else a ValueError, where the setting's default is each host's own)."""
    setting = SHARED_SETTINGS[name]
    if setting.host_defaults is not None and host is None:
        raise ValueError(f"shared setting {name!r}: its default is each host's own; name the host")
    default = setting.default if host is None else setting.default_for(host)
    return param(default, setting.meaning, **setting.checks)


@dataclass
class HostConfig(Checked):
    """The ``dataflex`` block: which strategy, and how prompts are drawn at intake."""

    strategy: str | dict = param(
        "baseline", "preset name, strategy YAML path or inline spec (the engine's schema)"
    )
    domain_key: str | None = shared_param("domain_key")
    domains: list[str] | None = param(
        None, "domain names in id order (default: the sorted values found in the training set)"
    )
    proportions: list[float] | dict[str, float] | None = param(
        None,
        "intake proportions when the strategy pre-filters or has a curriculum but does not "
        "mix (default: the training set's own)",
        ge=0.0,
    )
    candidate_factor: float = shared_param("candidate_factor")
    max_draw_rounds: int = shared_param("max_draw_rounds")
    seed: int = param(0, "seed of intake sampling and pre-rollout randomness", ge=0)
    decision_log: DecisionLogConfig = param(DecisionLogConfig(), "decision log for replay")


@dataclass(frozen=True)
class HostSettings:
    """What a host tells the driver about itself: its name (``"verl"``, ``"trl"``), the
    advantage estimator it runs, whether advantages are divided by the group std, the
    `RolloutBatch` fields it fills, and the constant it adds to the group std (``adv_eps``:
    recomputed advantages use the host's own)."""

    name: str
    advantage_estimator: str
    norm_adv_by_std: bool
    fields: tuple[str, ...]
    adv_eps: float = 1e-6
    #: the host's asynchronous mode (verl: ``colocate_async``, ``separate_async``), where
    #: finished groups wait for an update and ``admission`` can act; None: synchronous
    asynchronous: str | None = None


def check_block(block: HostConfig, host: HostSettings) -> StrategySpec:
    """The block's strategy, parsed and checked for ``host`` before anything is built
    (`check_strategy` with `placeholder_domains`, `check_proportions`)."""
    spec = parse_strategy(block.strategy, where="dataflex.strategy")
    check_strategy(
        spec,
        domains=placeholder_domains(block, spec),
        advantage_estimator=host.advantage_estimator,
        available_fields=host.fields,
    )
    check_proportions(block, spec)
    if host.name in ("verl", "trl") and spec.admission is not None and not host.asynchronous:
        where = {
            "verl": "trainer.v1.trainer_mode=dataflex runs verl's sync mode (PPOTrainerSync, "
            "parameter_sync_step 1); use trainer.v1.trainer_mode=dataflex_colocate_async or "
            "dataflex_separate_async (docs/hosts/verl.md#asynchronous-modes)",
            "trl": "DataflexGRPOTrainer extends GRPOTrainer, which generates with the "
            "current policy",
        }[host.name]
        use = {
            "verl": "",
            "trl": " or in TRL's AsyncGRPOTrainer through DataflexAsyncGRPOTrainer (past: drop)",
        }[host.name]
        raise ConfigError(
            "dataflex.strategy.admission: admission acts under asynchronous training, where "
            f"groups wait in a queue, but {where}. Use it on the embedded engine with "
            f"asynchronous.staleness >= 1{use}"
        )
    if host.name == "verl" and spec.rollouts is not None:
        raise ConfigError(
            "dataflex.strategy.rollouts: per-prompt budgets need generation per prompt, which "
            "verl does not give its plugin: every prompt is repeated actor_rollout_ref."
            "rollout.n times before generation (RayPPOTrainer.fit: batch.repeat(repeat_times="
            "rollout.n, interleave=True); the V1 trainer's _compute_advantage passes "
            "num_repeat=rollout.n), and its DAPO refill (filter_groups) replaces whole "
            "groups by uid. GRPO advantages by uid (compute_grpo_outcome_advantage) would "
            "take uneven groups, but the plugin cannot ask the rollout for more completions "
            "of one prompt. Use it on the embedded engine or TRL (until_signal)"
        )
    if host.name == "verl" and spec.prerollout is not None:
        name = spec.prerollout.actuator.name
        if SKIP_POLICIES.get(name).reads_features:
            raise ConfigError(
                f"dataflex.strategy.prerollout.actuator: {name!r} reads the policy's prompt "
                "representation, which verl cannot give its intake: the intake draws rows in "
                "the driver process (PPOTrainerSync._next_train_batch), which holds no model; "
                "the policy lives in the actor worker group (ActorRolloutRefWorker), which "
                "has no call that returns prompt hidden states. Use greso or thompson on verl"
            )
    return spec


def uses_intake(spec: StrategySpec) -> bool:
    """Whether the strategy acts before generation (mix, prerollout or curriculum)."""
    return spec.mix is not None or spec.prerollout is not None or spec.curriculum is not None


def acts_on_loss(spec: StrategySpec) -> bool:
    """Whether the strategy changes the loss (select, tokens or reweight)."""
    return spec.select is not None or spec.tokens is not None or spec.reweight is not None


def recomputes_advantages(spec: StrategySpec) -> bool:
    """Whether the strategy's selector recomputes GRPO advantages on the kept subset (its
    ``recompute_advantages``, or the selector's paper default)."""
    return spec.select is not None and resolved_option(spec.select, "recompute_advantages")


def placeholder_domains(host: HostConfig, spec: StrategySpec) -> tuple[str, ...]:
    """Domains to check a mixing strategy with before the training set is read."""
    if host.domains:
        return tuple(host.domains)
    prior = spec.mix.options.get("prior") if spec.mix is not None else None
    if isinstance(prior, dict) and prior:
        return tuple(prior)
    if isinstance(prior, list) and prior:
        return tuple(f"_domain{i}" for i in range(len(prior)))
    return ("_any",)


def check_proportions(host: HostConfig, spec: StrategySpec) -> None:
    """``proportions`` is only read by a strategy that pre-filters or has a curriculum,
    without mixing."""
    draws = spec.prerollout is not None or spec.curriculum is not None
    if host.proportions is not None and not (draws and spec.mix is None):
        raise ConfigError(
            "dataflex.proportions: only used by a strategy that pre-filters or has a "
            "curriculum, without mixing; a mixing strategy sets its own prior "
            "(strategy.mix.prior)"
        )


def config_table(schema: type = HostConfig) -> str:
    """A host's ``dataflex`` block as a Markdown table (docs/hosts/*.md embed it verbatim)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for r in field_rows(schema):
        shown = "null" if r["default"] is None else r["default"]
        rows.append(f"| `{r['name']}` | `{shown}` | {r['doc']} |")
    return "\n".join(rows) + "\n"
