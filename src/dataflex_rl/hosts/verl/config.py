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

from dataflex_rl.core.config import param, validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import get_path, parse_strategy
from dataflex_rl.core.strategy import GROUP_ESTIMATORS, Strategy
from dataflex_rl.hosts.common.config import (
    HostConfig,
    check_proportions,
    placeholder_domains,
    resolved_option,
)
from dataflex_rl.hosts.common.config import config_table as host_config_table

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
#: estimators whose advantages are one value per response, the same on each of its valid tokens
#: (verl 0.9.1 ``core_algos``: a per-response scalar times ``response_mask``; gdpo and
#: reinforce_plus_plus_baseline then whiten elementwise, which keeps a row constant). The host
#: passes these values to the strategy (``response_advantages``), read once per row.
PER_RESPONSE_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_vectorized",
        "grpo_passk",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "gdpo",
        "reinforce_plus_plus_baseline",
    }
)


@dataclass
class VerlHostConfig(HostConfig):
    """The ``dataflex`` block of verl's config: `HostConfig` plus verl's own keys."""

    poll_interval: float | None = param(
        None, "replay-buffer poll interval in seconds (null: verl's default, 2 s)", gt=0.0
    )


def parse_host_config(block: Any) -> VerlHostConfig:
    """Validate the ``dataflex`` block (a mapping, or None for defaults)."""
    if block is None:
        logger.warning(
            "dataflex: trainer mode 'dataflex' without a 'dataflex' block; running "
            "the 'baseline' strategy (add +dataflex.strategy=<preset or path>)"
        )
    return validate(VerlHostConfig, block, "dataflex")


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
        domains = placeholder_domains(host, spec)
    strategy = Strategy(
        spec,
        domains=domains,
        advantage_estimator=estimator,
        available_fields=HOST_FIELDS,
        norm_adv_by_std=norm_by_std,
    )
    check_proportions(host, strategy)
    check_host_fit(strategy, config)
    return strategy


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
    return host_config_table(VerlHostConfig)
