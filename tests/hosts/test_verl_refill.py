"""Refill on verl: the strategy's ``refill`` is carried by verl's own ``algorithm.filter_groups``
(the preset ``dapo`` maps onto it), which evicts exactly the groups dapo's selector drops; a
refill verl cannot carry is refused before anything starts."""

import logging

import pytest

pytest.importorskip("verl")

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer  # noqa: E402

from dataflex_rl.core.batch import from_lists  # noqa: E402
from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.core.strategy import Strategy  # noqa: E402
from dataflex_rl.hosts.verl.trainer import DataflexTrainer  # noqa: E402
from tests.hosts.verl_helpers import put_groups, verl_config  # noqa: E402

REWARDS = [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.9, 0.6, 0.9, 0.6]]


def test_dapo_maps_onto_filter_groups_and_says_what_verl_does_not_honour(caplog):
    caplog.set_level(logging.WARNING, logger="dataflex_rl.hosts.verl")
    trainer = DataflexTrainer(verl_config("+dataflex.strategy=dapo"))
    fg = trainer.config.algorithm.filter_groups
    assert fg.enable is True and fg.metric == "reward"
    assert trainer.replay_buffer.filter_groups_metric == "reward"
    assert "refill.max_rounds (4) and refill.overdraw are not honoured" in caplog.text
    assert "max_num_gen_batches is ignored" in caplog.text
    # without refill, verl's filter stays as configured
    assert not DataflexTrainer(
        verl_config("+dataflex.strategy=difffilter")
    ).config.algorithm.filter_groups.enable


def test_dapo_with_token_selection_maps_onto_filter_groups_beside_top_tokens():
    # the group part is verl's filter; top_tokens then acts on the batch verl's buffer gives
    # (whole-batch scope); TRL's micro-batch scope verl cannot give is refused up front
    trainer = DataflexTrainer(verl_config("+dataflex.strategy=dapo_entropy"))
    fg = trainer.config.algorithm.filter_groups
    assert fg.enable is True and fg.metric == "reward"
    with pytest.raises(ConfigError, match=r"TopTokens \(scope: micro_batch\) needs micro_batch"):
        DataflexTrainer(
            verl_config(
                "+dataflex.strategy.select.preset=dapo",
                "+dataflex.strategy.tokens.preset=high_entropy",
                "+dataflex.strategy.tokens.actuator.scope=micro_batch",
                "+dataflex.strategy.refill.max_rounds=4",
            )
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [
                "+dataflex.strategy.select.preset=difffilter",
                "+dataflex.strategy.refill.max_rounds=2",
            ],
            r"dataflex\.strategy\.refill: on verl, refilling is verl's own "
            r"algorithm\.filter_groups.*replay_buffer\.py",
        ),
        (
            [
                "+dataflex.strategy=dapo",
                "algorithm.filter_groups.enable=true",
                "algorithm.filter_groups.metric=acc",
            ],
            r"algorithm\.filter_groups\.metric: 'acc'",
        ),
        (
            ["+dataflex.strategy.select.preset=dapo", "+dataflex.strategy.refill.max_rounds=0"],
            r"refill\.max_rounds: must be >= 1",
        ),
        (
            ["+dataflex.strategy=reinforce_ada"],
            r"dataflex\.strategy\.rollouts: per-prompt budgets.*rollout\.n.*batch\.repeat",
        ),
        (
            ["+dataflex.strategy=knapsack_rl"],
            r"dataflex\.strategy\.rollouts: per-prompt budgets.*compute_grpo_outcome_advantage",
        ),
    ],
)
def test_a_refill_verl_cannot_carry_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        DataflexTrainer(verl_config(*overrides))


def test_verl_evicts_exactly_the_groups_dapo_drops(tq_train):
    # verl's replay buffer with filter_groups (metric reward) over 4 finished groups: it
    # evicts the all-1 and all-0 groups (2 evicted; group 3 varies though every reward is
    # > .5) and samples the other two: the groups dapo's selector keeps
    uids = put_groups(REWARDS)
    refills = []
    buffer = ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=8,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.05,
        refill_fn=refills.append,
        filter_groups_metric="reward",
        train_batch_size=4,
        gen_batch_size=1,
    )
    meta, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    sampled = {k.split("_")[0] for k in meta.keys}
    ours = Strategy("dapo").groups_kept(
        from_lists([r for g in REWARDS for r in g], [g for g in range(4) for _ in range(4)])
    )
    assert sampled == {u for u, keep in zip(uids, ours.tolist()) if keep} == {uids[0], uids[3]}
    assert metrics["training/filter_groups/evicted_samples"] == 2 and refills == []
