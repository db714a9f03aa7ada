"""Group statistics and masks equal a plain-loop oracle; permuting groups permutes them."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dataflex_rl.core.batch import from_lists, group_successes, informative_mask, rank_in_group
from tests.property import oracles
from tests.strategies import permute_groups, rollout_batches


@given(rollout_batches())
def test_group_statistics_equal_the_loop_oracle(b):
    o = oracles.group_stats(b)
    assert b.group_size.tolist() == o["size"]
    assert group_successes(b).tolist() == o["successes"]
    assert group_successes(b, 0.25).tolist() == oracles.group_stats(b, 0.25)["successes"]
    assert b.group_mean.tolist() == pytest.approx(o["mean"], rel=1e-5, abs=1e-5)
    assert b.group_std.tolist() == pytest.approx(o["std"], rel=1e-4, abs=1e-5)
    assert rank_in_group(b).tolist() == o["rank"]
    assert all(math.isfinite(v) for v in b.group_mean.tolist() + b.group_std.tolist())


@given(rollout_batches())
def test_masks_equal_the_loop_oracle(b):
    rs = oracles.rows(b)
    assert b.active_mask.tolist() == [oracles.active(r) for r in rs]
    assert informative_mask(b).tolist() == oracles.informative(b)
    assert b.response_length.tolist() == [r["length"] for r in rs]
    assert not (b.active_mask & b.is_padding).any()


@given(rollout_batches(), st.data())
def test_permuting_groups_permutes_the_statistics(b, data):
    # hand-worked (constant statistics would permute too): groups (1, 0) and (2, 2): means .5
    # and 2, unbiased stds sqrt(.5) and 0; ranks 1, 0 | 0, 1 (tie by index)
    hw = from_lists([1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1])
    assert hw.group_mean.tolist() == [0.5, 2.0]
    assert hw.group_std.tolist() == pytest.approx([math.sqrt(0.5), 0.0])
    assert rank_in_group(hw).tolist() == [1, 0, 0, 1]
    assert informative_mask(hw).tolist() == [True, True, False, False]
    perm = data.draw(st.permutations(range(b.num_groups)))
    pb, rows = permute_groups(b, perm)
    # new group perm[g] is old group g
    assert torch.equal(pb.group_size[torch.tensor(perm)], b.group_size)
    assert torch.allclose(pb.group_mean[torch.tensor(perm)], b.group_mean, atol=1e-6)
    assert torch.allclose(pb.group_std[torch.tensor(perm)], b.group_std, atol=1e-5)
    assert torch.equal(rank_in_group(pb), rank_in_group(b)[rows])
    assert torch.equal(informative_mask(pb), informative_mask(b)[rows])
