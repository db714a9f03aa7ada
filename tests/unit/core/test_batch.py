"""`RolloutBatch`: validation, masks and group statistics, hand-worked."""

import math

import pytest
import torch

from dataflex_rl.core.batch import (
    BatchError,
    RolloutBatch,
    clean_rewards,
    from_lists,
    group_domain,
    group_layout,
    group_successes,
    informative_mask,
    invalid_reward_mask,
    rank_in_group,
    token_mask,
)

NAN, INF = float("nan"), float("inf")


def _batch(B=3, T=2, **kw):
    base = dict(
        rewards=torch.zeros(B),
        response_mask=torch.ones(B, T, dtype=torch.bool),
        group_ids=torch.zeros(B, dtype=torch.int64),
    )
    base.update(kw)
    return RolloutBatch(**base)


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(rewards=torch.zeros(3, 1)), "rewards must be a 1-D"),
        (dict(rewards=torch.zeros(3, dtype=torch.int64)), "rewards must be float"),
        (dict(response_mask=torch.ones(2, 2, dtype=torch.bool)), "response_mask must be"),
        (dict(response_mask=torch.ones(3, dtype=torch.bool)), "response_mask must be"),
        (dict(response_mask=torch.full((3, 2), 0.5)), "bool or 0/1"),
        (dict(response_mask=torch.full((3, 2), 2, dtype=torch.int64)), "bool or 0/1"),
        (dict(group_ids=torch.zeros(3, dtype=torch.int32)), "group_ids must be int64"),
        (dict(group_ids=torch.zeros(2, dtype=torch.int64)), "group_ids must be"),
        (dict(group_ids=torch.tensor([0, 2, 2])), "dense"),
        (dict(group_ids=torch.tensor([-1, 0, 0])), ">= 0"),
        (dict(domains=("a", "a")), "unique"),
        (dict(domains=()), "non-empty"),
        (dict(domains=("a", "b")), "domain_ids is required"),
        (dict(domains=("a", "b"), domain_ids=torch.tensor([0, 1, 2])), r"0\.\.1"),
        (dict(domain_ids=torch.zeros(3, dtype=torch.int32)), "domain_ids must be int64"),
        (dict(advantages=torch.zeros(3, 3)), "advantages must have shape"),
        (dict(advantages=torch.zeros(3, 2, dtype=torch.int64)), "advantages must be float"),
        (dict(old_log_probs=torch.zeros(3)), "old_log_probs must have shape"),
        (dict(is_padding=torch.zeros(3, dtype=torch.int64)), "is_padding must be bool"),
        (dict(is_padding=torch.zeros(2, dtype=torch.bool)), "is_padding must be bool"),
        (dict(prompt_keys=("a", "b")), "prompt_keys must have B=3"),
        (dict(step=-1), "step"),
    ],
)
def test_validation_errors(kw, match):
    with pytest.raises(BatchError, match=match):
        _batch(**kw)


def test_batch_error_is_a_value_error():
    assert issubclass(BatchError, ValueError)


def test_mask_of_0_1_numbers_becomes_bool():
    b = _batch(response_mask=torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    assert b.response_mask.dtype == torch.bool
    assert b.response_length.tolist() == [1, 2, 0]


def test_defaults_one_domain_no_padding():
    b = _batch()
    assert b.domain_ids.tolist() == [0, 0, 0] and b.domain_ids.dtype == torch.int64
    assert b.is_padding.tolist() == [False] * 3
    assert (b.batch_size, b.num_groups, b.num_domains) == (3, 1, 1)


def test_empty_batch_is_valid():
    b = from_lists([], [])
    assert (b.batch_size, b.num_groups) == (0, 0)
    assert b.group_size.shape == (0,) and b.group_std.shape == (0,)
    assert rank_in_group(b).shape == (0,) and b.active_mask.shape == (0,)


def test_replace_validates_again_and_recounts_groups():
    b = from_lists([1.0, 0.0, 1.0], [0, 0, 1])
    b2 = b.replace(group_ids=torch.tensor([0, 0, 0]))
    assert b2.num_groups == 1 and b.num_groups == 2
    with pytest.raises(BatchError, match="dense"):
        b.replace(group_ids=torch.tensor([0, 0, 5]))


# ---------------------------------------------------------------- masks
def test_padding_and_non_finite_rewards_are_inactive():
    b = from_lists(
        [1.0, NAN, INF, -INF, 0.5, NAN],
        [0, 0, 0, 0, 0, 0],
        is_padding=torch.tensor([False, False, False, False, True, True]),
    )
    assert b.active_mask.tolist() == [True, False, False, False, False, False]
    # padding rows are not "invalid" even with NaN rewards: they are padding
    assert invalid_reward_mask(b).tolist() == [False, True, True, True, False, False]
    assert clean_rewards(b).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert token_mask(b).sum(1).tolist() == [4, 0, 0, 0, 0, 0]


def test_advantage_per_response_masks_tokens():
    # row 0: tokens 2.0, 4.0 valid, 100 on the padding token -> mean 3.0
    # row 1: no valid token -> 0; row 2: padding row -> 0
    adv = torch.tensor([[2.0, 4.0, 100.0], [NAN, NAN, NAN], [5.0, 5.0, 5.0]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        response_mask=torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]]),
        group_ids=torch.tensor([0, 0, 0]),
        advantages=adv,
        is_padding=torch.tensor([False, False, True]),
    )
    assert b.advantage_per_response.tolist() == [3.0, 0.0, 0.0]


def test_informative_mask_with_and_without_advantages():
    # without advantages: rows of groups with two different rewards
    b = from_lists([1.0, 0.0, 1.0, 1.0, 0.3], [0, 0, 1, 1, 2])
    assert informative_mask(b).tolist() == [True, True, False, False, False]
    # with advantages: |mean token advantage| > 1e-8
    b = from_lists([1.0, 0.0, 1.0], [0, 0, 1], advantages=[0.7, -0.7, 0.0])
    assert informative_mask(b).tolist() == [True, True, False]


def test_advantage_per_response_is_none_without_advantages():
    assert from_lists([1.0], [0]).advantage_per_response is None
    assert from_lists([1.0], [0], advantages=[0.5]).advantage_per_response.tolist() == [0.5]


# ---------------------------------------------------------------- group statistics
def test_group_statistics_hand_worked():
    # group 0: rewards 1, 0, 1, 0.5 -> size 4, successes (> 0.5) 2, mean 2.5 / 4 = 0.625,
    #   deviations .375, -.625, .375, -.125 -> squares sum .6875 -> unbiased var .6875 / 3
    # group 1: 2, 2 -> size 2, mean 2, std 0, successes 2
    # group 2: a single 3 -> std 0 (size < 2)
    # group 3: one NaN reward and one padding row -> size 0, mean 0, std 0
    b = from_lists(
        [1.0, 0.0, 2.0, 1.0, 0.5, 2.0, 3.0, NAN, 1.0],
        [0, 0, 1, 0, 0, 1, 2, 3, 3],
        is_padding=torch.tensor([False] * 8 + [True]),
    )
    assert b.group_size.tolist() == [4, 2, 1, 0]
    assert group_successes(b).tolist() == [2, 2, 1, 0]
    assert group_successes(b, threshold=0.25).tolist() == [3, 2, 1, 0]
    assert b.group_mean.tolist() == pytest.approx([0.625, 2.0, 3.0, 0.0])
    assert b.group_std.tolist() == pytest.approx([math.sqrt(0.6875 / 3), 0.0, 0.0, 0.0])
    assert not torch.isnan(b.group_std).any()


def test_group_std_is_unbiased_like_torch_std():
    r = torch.tensor([0.3, 1.7, -0.2, 0.9])
    b = from_lists(r.tolist(), [0, 0, 0, 0])
    assert float(b.group_std[0]) == pytest.approx(float(r.std(unbiased=True)), rel=1e-6)


def test_rank_in_group_ties_by_index_and_inactive_last():
    # group 0 rows 0, 2, 3, 5: rewards 1, 0, 1, NaN -> 0 (row 2) rank 0, rows 0 and 3 tie
    # (index order) -> 1, 2; the NaN row is ranked after every active row -> 3
    # group 1 rows 1, 4: padding row 1 goes last -> row 4 rank 0, row 1 rank 1
    b = from_lists(
        [1.0, 5.0, 0.0, 1.0, 2.0, NAN],
        [0, 1, 0, 0, 1, 0],
        is_padding=torch.tensor([False, True, False, False, False, False]),
    )
    assert rank_in_group(b).tolist() == [1, 1, 0, 2, 0, 3]


def test_group_domain_is_the_domain_of_the_first_row():
    b = from_lists(
        [0.0] * 4, [1, 0, 1, 0], domain_ids=torch.tensor([2, 0, 2, 0]), domains=("a", "b", "c")
    )
    assert group_domain(b).tolist() == [0, 2]


def test_from_lists_lengths_and_advantages():
    b = from_lists([1.0, 0.0], [0, 0], [3, 1], advantages=[0.5, -0.5])
    assert b.response_mask.tolist() == [[True, True, True], [True, False, False]]
    assert b.advantages.tolist() == [[0.5, 0.5, 0.5], [-0.5, 0.0, 0.0]]


def test_non_finite_advantage_or_log_prob_on_a_valid_token_makes_the_row_invalid():
    # row 0: NaN advantage on a valid token -> invalid; row 1: NaN only on a padding token
    # -> fine; row 2: -inf old log-prob on a valid token -> invalid. Rewards are all finite.
    adv = torch.tensor([[NAN, 1.0], [1.0, NAN], [1.0, 1.0]])
    lp = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-INF, -1.0]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        group_ids=torch.tensor([0, 0, 0]),
        response_mask=torch.tensor([[1, 1], [1, 0], [1, 1]]),
        advantages=adv,
        old_log_probs=lp,
    )
    assert b.invalid_mask.tolist() == [True, False, True]
    assert invalid_reward_mask(b).tolist() == [False, False, False]
    assert b.active_mask.tolist() == [False, True, False]
    assert b.group_size.tolist() == [1]
    assert b.advantage_per_response.tolist() == [0.0, 1.0, 0.0]


def test_group_layout_leaves_out_trailing_padding():
    # 3 groups of 2, then 2 padding rows copied from the first rows: the table is [3, 2],
    # its cells the first 6 rows; padding elsewhere keeps its cell
    g = [0, 0, 1, 1, 2, 2, 0, 0]
    pad = torch.tensor([False] * 6 + [True] * 2)
    t = group_layout(from_lists([1.0] * 8, g, is_padding=pad))
    assert (t.identity, t.covered, t.size, t.width) == (True, 6, 8, 2)
    t = group_layout(from_lists([1.0] * 8, g, is_padding=pad.roll(-1)))  # rows 5, 6 padding
    assert (t.covered, t.width) == (8, 4)
    assert (
        group_layout(from_lists([1.0] * 2, [0, 0], is_padding=torch.tensor([True, True]))) is None
    )


def test_group_domain_from_the_group_table():
    # 3 groups of 2 in domains 1, 0, 1, then a padding row: the first row of each group
    d = torch.tensor([1, 1, 0, 0, 1, 1, 1])
    pad = torch.tensor([False] * 6 + [True])
    kw = dict(domains=("a", "b"), domain_ids=d, is_padding=pad)
    b = from_lists([1.0] * 7, [0, 0, 1, 1, 2, 2, 0], **kw)
    assert group_layout(b).identity and group_domain(b).tolist() == [1, 0, 1]
    assert group_domain(from_lists([1.0] * 7, [0, 0, 1, 1, 2, 2, 0], **kw)).tolist() == [1, 0, 1]
