"""The ``dataflex`` block of verl's Hydra config, and the checks made before training starts.

Needs no verl (the trainer passes plain containers). Every error is a `ConfigError` naming
the key (docs/hosts/verl.md#the-dataflex-block).
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
#: estimators whose advantages are one value per response, constant over its valid tokens
#: (verl 0.9.1 ``core_algos``); the host passes them as ``response_advantages``
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


#: the plugin's trainer modes -> the verl 0.9.1 mode each extends (`trainer.py`)
TRAINER_MODES = {
    "dataflex": "sync",
    "dataflex_colocate_async": "colocate_async",
    "dataflex_separate_async": "separate_async",
}
#: verl's asynchronous modes (finished groups wait in TransferQueue for an update)
ASYNC_MODES = ("colocate_async", "separate_async")
#: where verl 0.9.1 drops stale groups, named in messages and docs
VERL_STALE_DROP = (
    "verl/trainer/ppo/v1/replay_buffer.py (ReplayBufferAsync._stale_terminal_keys evicts a "
    "finished group when global_steps - its prompt's global_steps + 1 > "
    "trainer.v1.sampler.max_off_policy_threshold, one threshold for every group, with "
    "max_off_policy_strategy=drop; wait_for_sampleable replaces it through refill_fn)"
)


def host_settings(config: Mapping, mode: str = "sync") -> HostSettings:
    """The verl host for the driver: verl's advantage estimator and std normalization (read
    from its settings, verl's defaults where unset), the fields `HOST_FIELDS`, and verl's
    mode (``mode``: one of `TRAINER_MODES`' values; an asynchronous one admits ``admission``)."""
    return HostSettings(
        "verl",
        str(get_path(config, "algorithm.adv_estimator", "gae")),
        bool(get_path(config, "algorithm.norm_adv_by_std_in_grpo", True)),
        HOST_FIELDS,
        adv_eps=1e-6,  # verl's group estimators' epsilon (core_algos, not a setting)
        asynchronous=mode if mode in ASYNC_MODES else None,
    )


def check(host: VerlHostConfig, config: Mapping, mode: str = "sync") -> StrategySpec:
    """The block's strategy, checked against verl's settings (plain containers,
    `trainer.host_view`) and verl's ``mode`` before anything is built (`check_block`,
    `check_host_fit`, `admission_overrides`)."""
    spec = check_block(host, host_settings(config, mode))
    check_host_fit(spec, config)
    admission_overrides(spec, mode)
    return spec


def admission_overrides(spec: StrategySpec, mode: str) -> dict[str, Any]:
    """verl's settings that carry the strategy's ``admission`` in an asynchronous ``mode``
    (empty without one): verl's own stale-group eviction (`VERL_STALE_DROP`) with
    ``max_off_policy_threshold`` = ``max_staleness`` + 1 (verl counts the versions a group
    spans, the step it was submitted in included: a group submitted at step p and trained at
    step s has staleness s - p at most) and ``max_off_policy_strategy`` = drop. Raises
    `ConfigError` for what verl's buffer cannot do: ``past: pace`` and per-domain limits."""
    adm = spec.admission
    if adm is None:
        return {}
    where = f"dataflex.strategy.admission (verl {mode})"
    if adm.past != "drop":
        raise ConfigError(
            f"{where}.past: 'pace' trains stale groups first and stops drawing their domain, "
            "but verl's replay buffer picks the oldest finished groups itself and only drops "
            f"or waits for stale ones ({VERL_STALE_DROP}; 'wait' blocks sampling until the "
            "stale in-flight groups finish: ReplayBufferAsync._has_enough_samples); use "
            "past: drop, or pace on the embedded engine"
        )
    if not isinstance(adm.max_staleness, int):
        raise ConfigError(
            f"{where}.max_staleness: one limit per domain, but verl's replay buffer has one "
            f"threshold for every group ({VERL_STALE_DROP}); give one number"
        )
    return {
        "trainer.v1.sampler.max_off_policy_threshold": adm.max_staleness + 1,
        "trainer.v1.sampler.max_off_policy_strategy": "drop",
    }


def check_host_fit(spec: StrategySpec, config: Mapping) -> None:
    """verl settings that would silently defeat the strategy are errors (`ConfigError`)."""
    refill_overrides(spec, config)
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


#: where verl 0.9.1 refills (DAPO's dynamic sampling), named in messages and docs
VERL_FILTER_GROUPS = (
    "verl/trainer/ppo/v1/replay_buffer.py (ReplayBuffer._dapo_filtered_keys evicts a finished "
    "group whose metric has std 0 over more than one trajectory; the evicted prompts are "
    "replaced through refill_fn, the trainer's _add_prompts_to_generate)"
)


#: what a verl run of a refilling strategy warns in an asynchronous mode (logged once)
REFILL_LIMITATION_ASYNC = (
    "dataflex: strategy %r refills through verl's algorithm.filter_groups (metric 'reward') "
    "in verl's %s mode: the asynchronous replay buffer evicts each finished zero-variance "
    "group and submits one new prompt for it (ReplayBufferAsync.wait_for_sampleable), until "
    "the update holds its groups, so refill.max_rounds (%d) and refill.overdraw are not "
    "honoured"
)

#: what a verl run of a refilling strategy warns (the trainer logs it once)
REFILL_LIMITATION = (
    "dataflex: strategy %r refills through verl's algorithm.filter_groups (metric 'reward'): "
    "verl refills until the batch is full, so refill.max_rounds (%d) and refill.overdraw are "
    "not honoured (verl 0.9.1's V1 ReplayBuffer has no round limit: max_num_gen_batches is "
    "ignored by trainer_base._resolve_filter_groups_metric; refills replace exactly the "
    "evicted prompts)"
)


def zero_variance_selector(spec: StrategySpec) -> bool:
    """Whether the selector drops exactly the groups whose rewards are all equal, every step
    (preset ``dapo``): verl's own rule with ``algorithm.filter_groups.metric=reward``."""
    sel = spec.select
    if sel is None or sel.scorer is None or sel.scorer.name != "reward_std":
        return False
    p = sel.actuator.params
    return (
        sel.actuator.name == "band"
        and float(p.get("low", 0.2)) == 0.0
        and p.get("high", 0.8) is None
        and not p.get("inclusive", False)
        and sel.warmup_steps == 0
        and sel.every == 1
    )


def refill_overrides(spec: StrategySpec, config: Mapping) -> dict[str, Any]:
    """verl's settings that carry the strategy's ``refill`` (empty without one):
    ``algorithm.filter_groups`` with the metric ``reward``, which replaces only zero-variance
    groups (`zero_variance_selector`; limits: `REFILL_LIMITATION`). Raises `ConfigError` for
    another selector, or ``filter_groups`` enabled with another metric."""
    if spec.refill is None:
        return {}
    if not zero_variance_selector(spec):
        raise ConfigError(
            f"dataflex.strategy.refill: on verl, refilling is verl's own "
            f"algorithm.filter_groups, which replaces only groups whose rewards are all equal "
            f"({VERL_FILTER_GROUPS}); strategy {spec.name!r} selects with "
            f"{spec.select.actuator.name!r} over "
            f"{'no scorer' if spec.select.scorer is None else repr(spec.select.scorer.name)}, "
            "which drops other groups too. Use select: {preset: dapo} with refill, or drop "
            "'refill' (the selector then drops without refilling)"
        )
    fg = get_path(config, "algorithm.filter_groups") or {}
    metric = fg.get("metric") if isinstance(fg, Mapping) else None
    if isinstance(fg, Mapping) and fg.get("enable") and metric not in (None, "reward"):
        raise ConfigError(
            f"algorithm.filter_groups.metric: {metric!r}, but strategy {spec.name!r} refills "
            "zero-variance reward groups; set it to 'reward' (or leave filter_groups to the "
            "strategy)"
        )
    return {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward"}


def config_table() -> str:
    """The ``dataflex`` block as a Markdown table (docs/hosts/verl.md embeds it verbatim)."""
    return host_config_table(VerlHostConfig)
