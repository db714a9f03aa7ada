"""The ``dataflex`` block of verl's Hydra config, and the checks made before training starts.

Needs no verl: the trainer passes plain containers (``OmegaConf.to_container``). Example::

    trainer.v1.trainer_mode=dataflex
    +dataflex.strategy=difffilter            # preset, strategy YAML path or inline mapping
    +dataflex.domain_key=domain              # only read when the strategy mixes or pre-filters

Every error is a `ConfigError` naming the key, like the engine's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataflex_rl.core.config import Checked, field_rows, param, validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import StrategySpec, get_path, parse_strategy
from dataflex_rl.core.strategy import GROUP_ESTIMATORS, Strategy
from dataflex_rl.hosts.common.config import DecisionLogConfig

logger = logging.getLogger("dataflex_rl.hosts.verl")

#: `RolloutBatch` fields the verl host fills (domains and prompt keys only with our intake)
HOST_FIELDS = (
    "rewards",
    "response_mask",
    "group_ids",
    "advantages",
    "old_log_probs",
    "is_padding",
    "step",
    "domain_ids",
    "prompt_keys",
)
#: verl policy losses that multiply ``rollout_is_weights`` into the per-token loss (0.9.1)
WEIGHTED_LOSSES = frozenset(
    {
        "vanilla",
        "dppo_tv",
        "dppo_kl",
        "gspo",
        "sapo",
        "gpg",
        "clip_cov",
        "kl_cov",
        "geo_mean",
        "dro",
        "cispo",
    }
)
#: estimators whose advantages `recompute_advantages` (GRPO re-centred on the kept subset) matches
GRPO_LIKE = frozenset({"grpo", "grpo_vectorized"})


@dataclass
class VerlHostConfig(Checked):
    """The ``dataflex`` block: which strategy, and how prompts are drawn at intake."""

    strategy: str | dict = param(
        "baseline", "preset name, strategy YAML path or inline spec (the engine's schema)"
    )
    domain_key: str | None = param(
        None,
        "dataset column with each prompt's domain (dotted "
        "for a nested field, e.g. extra_info.domain); an error "
        "when it is not a column; null: 'domain' if the "
        "training set has it, else 'data_source'",
    )
    domains: list[str] | None = param(
        None, "domain names in id order (default: the sorted values found in the training set)"
    )
    proportions: list[float] | dict[str, float] | None = param(
        None,
        "intake proportions when the strategy pre-filters but does not mix (default: "
        "the training set's own)",
        ge=0.0,
    )
    candidate_factor: float = param(
        2.0, "prerollout: candidates drawn per missing prompt in each round", ge=1.0
    )
    max_draw_rounds: int = param(
        8, "prerollout: candidate rounds before skipped prompts fill the rest of the batch", ge=1
    )
    seed: int = param(0, "seed of intake sampling and pre-rollout randomness", ge=0)
    poll_interval: float | None = param(
        None, "replay-buffer poll interval in seconds (null: verl's default, 2 s)", gt=0.0
    )
    decision_log: DecisionLogConfig = param(DecisionLogConfig(), "decision log for replay")


def parse_host_config(block: Any) -> VerlHostConfig:
    """Validate the ``dataflex`` block (a mapping, or None for defaults)."""
    if block is None:
        logger.warning(
            "dataflex: trainer mode 'dataflex' without a 'dataflex' block; running "
            "the 'baseline' strategy (add +dataflex.strategy=<preset or path>)"
        )
    return validate(VerlHostConfig, block, "dataflex")


def uses_intake(strategy: Strategy) -> bool:
    """Whether the strategy acts before generation (mix or prerollout)."""
    return "mix" in strategy.parts or "prerollout" in strategy.parts


def resolved_option(strategy: Strategy, key: str) -> bool:
    """A select option after the selector's paper default is applied (False without select)."""
    if "select" not in strategy.parts:
        return False
    value = strategy.spec.select.options.get(key)
    if value is None:
        value = getattr(type(strategy.parts["select"][1]), f"{key}_default", False)
    return bool(value)


def build_strategy(
    host: VerlHostConfig, config: Mapping, domains: tuple[str, ...] | None, *, early: bool = False
) -> Strategy:
    """The engine's `Strategy`, bound to verl's estimator; raises `ConfigError` on misfit.

    Args:
        host: the parsed ``dataflex`` block.
        config: verl's settings as plain containers (see `trainer.host_view`).
        domains: domain names of the intake (None without mix/prerollout).
        early: check before the training set is read: placeholder domains stand in.
    """
    estimator = str(get_path(config, "algorithm.adv_estimator", "gae"))
    norm_by_std = bool(get_path(config, "algorithm.norm_adv_by_std_in_grpo", True))
    spec = parse_strategy(host.strategy, where="dataflex.strategy")
    if early and domains is None:
        domains = _placeholder_domains(host, spec)
    strategy = Strategy(
        spec,
        domains=domains,
        advantage_estimator=estimator,
        available_fields=HOST_FIELDS,
        norm_adv_by_std=norm_by_std,
    )
    if host.proportions is not None and not (
        "prerollout" in strategy.parts and "mix" not in strategy.parts
    ):
        raise ConfigError(
            "dataflex.proportions: only used by a strategy that pre-filters "
            "without mixing; a mixing strategy sets its own prior "
            "(strategy.mix.prior)"
        )
    check_host_fit(strategy, config)
    return strategy


def _placeholder_domains(host: VerlHostConfig, spec: StrategySpec) -> tuple[str, ...]:
    """Domains to check a mixing strategy with before the training set is read."""
    if host.domains:
        return tuple(host.domains)
    prior = spec.mix.options.get("prior") if spec.mix is not None else None
    if isinstance(prior, dict) and prior:
        return tuple(prior)
    if isinstance(prior, list) and prior:
        return tuple(f"_domain{i}" for i in range(len(prior)))
    return ("_any",)


def check_host_fit(strategy: Strategy, config: Mapping) -> None:
    """verl settings that would silently defeat the strategy are errors.

    Raises:
        ConfigError: ``trainer.use_v1`` is off; ``loss_mode=bypass_mode`` (it ignores
            ``rollout_is_weights``) with select or reweight; ``recompute_advantages`` under an
            estimator whose advantages are not GRPO's.
    """
    name = strategy.spec.name
    if not get_path(config, "trainer.use_v1", True):
        raise ConfigError(
            "trainer.use_v1: the 'dataflex' trainer mode is a v1 trainer; set trainer.use_v1=true"
        )
    acts_on_loss = "select" in strategy.parts or "reweight" in strategy.parts
    loss_mode = str(get_path(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))
    if acts_on_loss and loss_mode == "bypass_mode":
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode: 'bypass_mode' ignores "
            f"rollout_is_weights, so strategy {name!r} (select/reweight) would have no effect. "
            f"Use one of {', '.join(sorted(WEIGHTED_LOSSES))}"
        )
    if acts_on_loss and loss_mode not in WEIGHTED_LOSSES:
        logger.warning(
            "dataflex: policy loss %r is not one of verl 0.9.1's losses known to "
            "apply rollout_is_weights (%s); make sure it does, or strategy %r has "
            "no effect",
            loss_mode,
            ", ".join(sorted(WEIGHTED_LOSSES)),
            name,
        )
    estimator = str(get_path(config, "algorithm.adv_estimator", "gae"))
    if resolved_option(strategy, "recompute_advantages") and estimator not in GRPO_LIKE:
        where = f"{name}.select.recompute_advantages"
        hint = "" if estimator in GROUP_ESTIMATORS else " (and it is not a group estimator)"
        raise ConfigError(
            f"{where}: recomputes GRPO advantages on the kept subset, but "
            f"algorithm.adv_estimator is {estimator!r}{hint}. Set {where}: false, or use "
            f"{' or '.join(sorted(GRPO_LIKE))}"
        )


def config_table() -> str:
    """The ``dataflex`` block as a Markdown table (docs/hosts/verl.md embeds it verbatim)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for r in field_rows(VerlHostConfig):
        shown = "null" if r["default"] is None else r["default"]
        rows.append(f"| `{r['name']}` | `{shown}` | {r['doc']} |")
    return "\n".join(rows) + "\n"
