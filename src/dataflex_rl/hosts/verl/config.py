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
from dataflex_rl.core.spec import StrategySpec, get_path
from dataflex_rl.core.strategy import GROUP_ESTIMATORS
from dataflex_rl.hosts.common.config import (
    HostConfig,
    HostSettings,
    acts_on_loss,
    check_block,
    recomputes_advantages,
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
    "entropies",
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


def host_settings(config: Mapping) -> HostSettings:
    """The verl host for the driver: verl's advantage estimator and std normalization (read
    from its settings, verl's defaults where unset), and the fields `HOST_FIELDS`."""
    return HostSettings(
        "verl",
        str(get_path(config, "algorithm.adv_estimator", "gae")),
        bool(get_path(config, "algorithm.norm_adv_by_std_in_grpo", True)),
        HOST_FIELDS,
        adv_eps=1e-6,  # verl's group estimators' epsilon (core_algos, not a setting)
    )


def check(host: VerlHostConfig, config: Mapping) -> StrategySpec:
    """The block's strategy, checked against verl's settings before anything is built;
    raises `ConfigError` on misfit (`check_block`, `check_host_fit`).

    Args:
        host: the parsed ``dataflex`` block.
        config: verl's settings as plain containers (see `trainer.host_view`).
    """
    spec = check_block(host, host_settings(config))
    check_host_fit(spec, config)
    return spec


def check_host_fit(spec: StrategySpec, config: Mapping) -> None:
    """verl settings that would silently defeat the strategy are errors.

    Raises:
        ConfigError: ``trainer.use_v1`` is off; ``loss_mode=bypass_mode`` (it ignores
            ``rollout_is_weights``) with select or reweight; ``recompute_advantages`` under an
            estimator whose advantages are not GRPO's.
    """
    name = spec.name
    if not get_path(config, "trainer.use_v1", True):
        raise ConfigError(
            "trainer.use_v1: the 'dataflex' trainer mode is a v1 trainer; set trainer.use_v1=true"
        )
    loss_mode = str(get_path(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))
    if acts_on_loss(spec) and loss_mode == "bypass_mode":
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode: 'bypass_mode' ignores "
            f"rollout_is_weights, so strategy {name!r} (select/reweight) would have no effect. "
            f"Use one of {', '.join(sorted(WEIGHTED_LOSSES))}"
        )
    if acts_on_loss(spec) and loss_mode not in WEIGHTED_LOSSES:
        logger.warning(
            "dataflex: policy loss %r is not one of verl 0.9.1's losses known to "
            "apply rollout_is_weights (%s); make sure it does, or strategy %r has "
            "no effect",
            loss_mode,
            ", ".join(sorted(WEIGHTED_LOSSES)),
            name,
        )
    bypass = get_path(config, "algorithm.rollout_correction.bypass_mode", False)
    if bypass and "entropies" in _declared(spec):
        raise ConfigError(
            "algorithm.rollout_correction.bypass_mode: verl then takes the rollout's log-probs "
            "as old log-probs and computes no entropies (ppo/v1/trainer_base.py, "
            f"_compute_old_log_prob), but strategy {name!r} reads the policy's entropies; "
            "set bypass_mode=false"
        )
    estimator = str(get_path(config, "algorithm.adv_estimator", "gae"))
    if recomputes_advantages(spec) and estimator not in GRPO_LIKE:
        where = f"{name}.select.recompute_advantages"
        hint = "" if estimator in GROUP_ESTIMATORS else " (and it is not a group estimator)"
        raise ConfigError(
            f"{where}: recomputes GRPO advantages on the kept subset, but "
            f"algorithm.adv_estimator is {estimator!r}{hint}. Set {where}: false, or use "
            f"{' or '.join(sorted(GRPO_LIKE))}"
        )


def _declared(spec: StrategySpec) -> set[str]:
    """The optional `RolloutBatch` fields the strategy's components declare."""
    from dataflex_rl.core.spec import resolve_mechanism

    out: set[str] = set()
    for mech, mspec in spec.mechanisms().items():
        for comp in resolve_mechanism(mspec, f"{spec.name}.{mech}"):
            out.update(getattr(comp, "requires", ()) if comp is not None else ())
    return out


def config_table() -> str:
    """The ``dataflex`` block as a Markdown table (docs/hosts/verl.md embeds it verbatim)."""
    return host_config_table(VerlHostConfig)
