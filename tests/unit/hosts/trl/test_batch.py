"""TRL's gathered generation batch as a `RolloutBatch`: TRL's reward rule, contiguous groups,
per-response advantages and lengths. Needs no TRL."""

from __future__ import annotations

import math

import pytest
import torch

from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.trl.batch import build_batch, prefix_mask, trl_rewards


def test_rewards_follow_trls_rule_by_hand():
    nan = float("nan")
    per_func = torch.tensor([[1.0, 0.5], [nan, 2.0], [nan, nan], [0.0, 0.0]])
    # weights 1, 2: 1 + 1 = 2; nansum skips the None of function 0: 4; all None: NaN; 0
    r = trl_rewards(per_func, torch.tensor([1.0, 2.0]))
    assert r[[0, 1, 3]].tolist() == [2.0, 4.0, 0.0] and math.isnan(r[2])


def test_prefix_mask():
    assert prefix_mask(torch.tensor([2, 0, 3])).tolist() == [
        [True, True, False],
        [False, False, False],
        [True, True, True],
    ]
    assert prefix_mask(torch.tensor([0, 0])).shape == (2, 1)


def test_batch_groups_domains_and_invalid_rows():
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0, 1.0, 1.0])
    adv = torch.tensor([0.7, -0.7, 0.0, 0.0, 0.0, 0.0])
    b = build_batch(
        rewards=rewards,
        advantages=adv,
        lengths=torch.tensor([3, 1, 2, 4, 0, 2]),
        group_size=3,
        step=5,
        domains=("a", "b"),
        domain_ids=torch.tensor([1, 1, 1, 0, 0, 0]),
        prompt_keys=[7, 7, 7, 2, 2, 2],
    )
    assert b.group_ids.tolist() == [0, 0, 0, 1, 1, 1] and b.step == 5
    assert b.invalid_mask.tolist() == [False, False, True, False, False, False]
    assert b.response_length.tolist() == [3, 1, 2, 4, 0, 2]
    assert b.response_mask.shape == (6, 4) and b.advantages is None
    assert b.prompt_keys == (7, 7, 7, 2, 2, 2) and b.domains == ("a", "b")
    # the strategy decides from these B values: group 1 has no signal, difffilter drops it
    d = Strategy("difffilter").decide(b)
    assert d.keep_mask.tolist() == [True, True, False, False, False, False]


def test_completions_must_be_whole_groups():
    with pytest.raises(ValueError, match="5 completions are not whole groups of num_generations=2"):
        build_batch(
            rewards=torch.zeros(5),
            advantages=torch.zeros(5),
            lengths=torch.ones(5, dtype=torch.int64),
            group_size=2,
            step=0,
        )
