"""The ``dataflex`` block of a TRL run (`HostConfig`'s schema; a mapping or a YAML file), and
the checks made before training starts. Needs no TRL: settings are read by attribute from a
``GRPOConfig``. Every error is a `ConfigError` naming the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import StrategySpec, load_yaml, resolved_option
from dataflex_rl.core.strategy import group_parts
from dataflex_rl.hosts.common.config import (
    HostConfig,
    HostSettings,
    acts_on_loss,
    check_block,
    config_table,  # noqa: F401  (this host's block table: HostConfig's)
    recomputes_advantages,
)

logger = logging.getLogger("dataflex_rl.hosts.trl")

#: `RolloutBatch` fields the TRL host fills (domains and prompt keys only with our intake)
HOST_FIELDS = (
    "rewards",
    "response_mask",
    "group_ids",
    "advantages",
    "response_advantages",
    "response_lengths",
    "old_log_probs",
    "step",
    "domain_ids",
    "prompt_keys",
    "entropies",
    "micro_batch_ids",
)


def parse_block(value: Any) -> HostConfig:
    """Validate the ``dataflex`` block: a mapping, a YAML file holding one (at its top level
    or under a ``dataflex`` key), or None for the defaults (the ``baseline`` strategy)."""
    if isinstance(value, HostConfig):
        return value
    if isinstance(value, (str, Path)):
        path = str(value)
        if not Path(path).is_file():
            raise ConfigError(
                f"dataflex: {path!r} is not a file; pass the block as a mapping "
                "(e.g. {'strategy': 'difffilter'}) or the path of a YAML file holding it"
            )
        value = load_yaml(path)
        if isinstance(value, Mapping) and set(value) == {"dataflex"}:
            value = value["dataflex"]
        if not isinstance(value, Mapping):
            raise ConfigError(f"dataflex: {path} must hold a mapping, got {type(value).__name__}")
    elif value is not None and not isinstance(value, Mapping):
        raise ConfigError(
            f"dataflex: must be a mapping or the path of a YAML file, got {type(value).__name__}"
        )
    return validate(HostConfig, None if value is None else dict(value), "dataflex")


#: what TRL's GRPOTrainer adds to the group std (trl 1.16, ``_generate_and_score_completions``)
TRL_ADV_EPS = 1e-4


def norm_adv_by_std(args: Any) -> bool:
    """Whether TRL divides advantages by a std (``scale_rewards`` 'group' or 'batch')."""
    return str(getattr(args, "scale_rewards", "group")) != "none"


def host_settings(args: Any) -> HostSettings:
    """The TRL host for the driver: GRPO advantages (std-normalized unless
    ``scale_rewards='none'``), and the fields `HOST_FIELDS`."""
    # TRL 1.16 divides by (std + 1e-4), a constant of GRPOTrainer, not a setting
    return HostSettings("trl", "grpo", norm_adv_by_std(args), HOST_FIELDS, adv_eps=TRL_ADV_EPS)


def check(block: HostConfig, args: Any) -> StrategySpec:
    """The block's strategy, checked against TRL's ``GRPOConfig`` ``args`` (read by attribute;
    TRL's defaults for missing ones) before anything is built: `check_block`, a group
    strategy under ``normalize_then_sum`` aggregation (no group advantages), `check_host_fit`.
    """
    spec = check_block(block, host_settings(args))
    aggregation = str(getattr(args, "multi_objective_aggregation", "sum_then_normalize"))
    needs = group_parts(spec) if aggregation == "normalize_then_sum" else []
    if needs:
        raise ConfigError(
            "multi_objective_aggregation: 'normalize_then_sum' normalizes advantages "
            f"over the whole batch, not per prompt group, but strategy {spec.name!r} "
            f"needs groups ({'; '.join(needs)}). Use 'sum_then_normalize' "
            "(TRL's default) or a response-level strategy"
        )
    check_host_fit(spec, args)
    return spec


def check_host_fit(spec: StrategySpec, args: Any) -> None:
    """TRL settings that would silently defeat the strategy are errors (`ConfigError`)."""
    from dataflex_rl.hosts.trl.loss import LOSS_TYPES

    loss_type = str(getattr(args, "loss_type", "dapo"))
    if loss_type not in LOSS_TYPES:
        raise ConfigError(
            f"loss_type: {loss_type!r} is not one the dataflex TRL host can renormalize "
            f"(trl 1.16); use one of {', '.join(sorted(LOSS_TYPES))}"
        )
    if spec.rollouts is not None:
        where = "dataflex.strategy.rollouts.mode"
        if spec.rollouts.mode in ("allocate", "sequential"):
            raise ConfigError(
                f"{where}: {spec.rollouts.mode!r} gives prompts uneven numbers of "
                "completions, but TRL "
                "1.16's GRPOTrainer generates num_generations for every prompt (RepeatSampler "
                "repeats each prompt num_generations times, and "
                "_generate_and_score_completions groups rewards by view(-1, num_generations)); "
                "use mode 'until_signal' on TRL, or this mode on the embedded engine"
            )
        scale = str(getattr(args, "scale_rewards", "group"))
        aggregation = str(getattr(args, "multi_objective_aggregation", "sum_then_normalize"))
        if scale == "batch" or aggregation != "sum_then_normalize":
            raise ConfigError(
                f"{where}: 'until_signal' trains on a balanced subset of each prompt's "
                "completions and recomputes TRL's group advantages over it, but TRL "
                f"normalizes over the batch (scale_rewards={scale!r}, "
                f"multi_objective_aggregation={aggregation!r}); use scale_rewards 'group' or "
                "'none' with 'sum_then_normalize'"
            )
    if recomputes_advantages(spec):
        where = f"{spec.name}.select.recompute_advantages"
        scale = str(getattr(args, "scale_rewards", "group"))
        aggregation = str(getattr(args, "multi_objective_aggregation", "sum_then_normalize"))
        if scale == "batch" or aggregation != "sum_then_normalize":
            raise ConfigError(
                f"{where}: recomputes group-normalized GRPO advantages on the kept subset, but "
                f"TRL normalizes over the batch (scale_rewards={scale!r}, "
                f"multi_objective_aggregation={aggregation!r}). Set {where}: false, or use "
                "scale_rewards 'group' or 'none' with 'sum_then_normalize'"
            )
    if spec.tokens is not None and resolved_option(spec.tokens, "renormalize"):
        raise ConfigError(
            f"{spec.name}.tokens.renormalize: a token-level selector cannot take its dropped "
            "tokens out of TRL's denominators one by one (TRL's completion_mask is also the "
            "attention mask of the completion); set renormalize: false (TRL's own "
            "top_entropy_quantile keeps them in the denominator too)"
        )
    spg = getattr(args, "steps_per_generation", None)
    ga = getattr(args, "gradient_accumulation_steps", 1)
    if acts_on_loss(spec) and spg is not None and spg != ga:
        logger.warning(
            "dataflex: steps_per_generation (%s) != gradient_accumulation_steps (%s): one "
            "decision covers a generation batch that spans several optimizer steps, so the "
            "kept rows are renormalized over the generation batch, not per optimizer step",
            spg,
            ga,
        )


# ---------------------------------------------------------------------- AsyncGRPOTrainer
#: where TRL 1.16's asynchronous GRPO lives (the refusals below name its code)
ASYNC_WORKER = "trl/experimental/async_grpo/async_rollout_worker.py"
ASYNC_PACKING = "trl/experimental/async_grpo/packing.py"
#: what the asynchronous host fills: a `RolloutSample` holds the completion's tokens and
#: mask, its reward (``metrics['reward']``), its advantage and the policy version it came from
ASYNC_FIELDS = (
    "rewards",
    "response_mask",
    "group_ids",
    "advantages",
    "response_advantages",
    "response_lengths",
    "step",
    "prompt_keys",
    "staleness",
)
#: what `AsyncRolloutWorker._score_group` adds to a group's (population) std
ASYNC_ADV_EPS = 1e-8


def async_host_settings() -> HostSettings:
    """The asynchronous TRL host for the driver: the rollout worker's GRPO advantages and
    the fields `ASYNC_FIELDS`."""
    return HostSettings(
        "trl_async",
        "grpo",
        True,
        ASYNC_FIELDS,
        adv_eps=ASYNC_ADV_EPS,
        asynchronous="AsyncGRPOTrainer",
    )


def check_async(block: HostConfig, args: Any, *, tools: Any = None, environment: Any = None):
    """The block's strategy, checked for ``DataflexAsyncGRPOTrainer`` (TRL 1.16's
    ``AsyncGRPOTrainer``, ``args`` read by attribute) before the model is built: what cannot
    act there is a `ConfigError` naming the setting and the TRL code that stops it."""
    from dataflex_rl.core.base import REWEIGHTERS
    from dataflex_rl.core.spec import parse_strategy

    spec = parse_strategy(block.strategy, where="dataflex.strategy")
    draws = (
        f"the rollout worker draws the prompts itself ({ASYNC_WORKER}: "
        "AsyncRolloutWorker._repeat_iterator walks the training set in order, cycling, and "
        "a custom rollout_worker draws its own), so the trainer never chooses a prompt"
    )
    for section, what in (
        ("mix", "domain proportions"),
        ("prerollout", "skipping prompts before generation"),
        ("curriculum", "choosing which prompts are drawn"),
    ):
        if getattr(spec, section) is not None:
            raise ConfigError(
                f"dataflex.strategy.{section}: {what} cannot act in AsyncGRPOTrainer: {draws}. "
                "Use it with DataflexGRPOTrainer or the embedded engine"
            )
    for key in ("domain_key", "domains", "proportions"):
        if getattr(block, key) is not None:
            raise ConfigError(
                f"dataflex.{key}: AsyncGRPOTrainer's samples carry no dataset row or domain "
                f"(RolloutSample in {ASYNC_WORKER}) and {draws}; leave it unset"
            )
    if spec.rollouts is not None:
        raise ConfigError(
            "dataflex.strategy.rollouts: per-prompt budgets need more completions of chosen "
            f"prompts, but {ASYNC_WORKER}: AsyncRolloutWorker._repeat_iterator gives every "
            "prompt num_generations completions and _score_group scores the group once they "
            "are in. Use it with DataflexGRPOTrainer (until_signal) or the embedded engine"
        )
    adm = spec.admission
    if adm is not None and adm.past == "pace":
        raise ConfigError(
            "dataflex.strategy.admission.past: 'pace' stops drawing a domain while its queued "
            f"groups are past the limit, but {draws}. Use past: drop (a stale group is dropped "
            "before the strategy sees it)"
        )
    if adm is not None and not isinstance(adm.max_staleness, int):
        raise ConfigError(
            "dataflex.strategy.admission.max_staleness: a per-domain limit needs each group's "
            f"domain, which AsyncGRPOTrainer's samples do not carry (RolloutSample in "
            f"{ASYNC_WORKER}); give one number"
        )
    per_sample = (
        f"AsyncGRPOTrainer trains each sample with one advantage for all of its tokens "
        f"({ASYNC_PACKING}: TreeRow.pack repeats sample['advantage'] over the sample's "
        "loss tokens; RolloutQueueDataset yields a scalar 'advantage')"
    )
    if spec.tokens is not None:
        raise ConfigError(
            f"dataflex.strategy.tokens: a token-level selection needs per-token weights, but "
            f"{per_sample}. Use it with DataflexGRPOTrainer"
        )
    if spec.reweight is not None:
        name = spec.reweight.actuator.name
        if getattr(REWEIGHTERS.get(name), "level", "response") == "token":
            raise ConfigError(
                f"dataflex.strategy.reweight.actuator: {name!r} weighs single tokens, but "
                f"{per_sample}. Use a response-level reweighter, or DataflexGRPOTrainer"
            )
    if recomputes_advantages(spec):
        raise ConfigError(
            f"{spec.name}.select.recompute_advantages: the rollout worker computes GRPO "
            f"advantages as (r - mean) / (population std + 1e-8) ({ASYNC_WORKER}: "
            "AsyncRolloutWorker._score_group), which the strategy's recomputation on the kept "
            f"subset (unbiased std) does not reproduce. Set {spec.name}.select."
            "recompute_advantages: false (the kept responses keep the worker's advantages)"
        )
    for name, given in (("tools", tools), ("environment_factory", environment)):
        if given:
            raise ConfigError(
                f"{name}: with tools or environments a conversation can fork into several "
                f"training rows ({ASYNC_WORKER}: AsyncRolloutWorker._score_group stamps one "
                "advantage on every row of completions_sequences), so a group is not "
                "num_generations samples and the dataflex host cannot tell when it is complete"
            )
    spec = check_block(block, async_host_settings())
    G = int(getattr(args, "num_generations", 8))
    per_update = int(getattr(args, "per_device_train_batch_size", 8)) * int(
        getattr(args, "gradient_accumulation_steps", 1)
    )
    if per_update % G:
        raise ConfigError(
            f"per_device_train_batch_size x gradient_accumulation_steps ({per_update}) must "
            f"be a multiple of num_generations ({G}): the dataflex host decides on the whole "
            "groups of one update"
        )
    return spec
