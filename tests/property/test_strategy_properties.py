"""Invariants of every decision on random batches (padding, NaN rewards, single responses)."""

import math
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.strategy import StrategyWarning
from dataflex_rl.presets import PRESETS
from tests.hand_worked import check_hand_worked
from tests.strategies import DOMAINS, permute_groups, rollout_batches

#: presets whose decision depends on each group only (topk breaks ties by global index)
GROUP_LOCAL = ["baseline", "difffilter", "maxvar", "gfpo", "softmax", "per", "diffband", "ar"]


@given(rollout_batches(num_domains=3), st.sampled_from(list(PRESETS)))
def test_every_decision_respects_the_contract(b, preset):
    check_hand_worked(preset)  # keep-all / weight-1 passes the invariants below, not this
    s = Strategy(preset, domains=DOMAINS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = s.decide(b)
    w = d.weights_per_token
    assert torch.isfinite(w).all() and (w >= 0).all()
    assert not (d.keep_mask & ~b.active_mask).any()  # padding / NaN never kept
    assert (w[~d.loss_mask] == 0).all()
    assert (d.weights_per_response[b.is_padding] == 0).all()
    assert all(math.isfinite(v) for v in d.metrics.values())
    all_dropped = bool(b.active_mask.any()) and not bool(d.keep_mask.any())
    assert d.metrics["dataflex/all_dropped"] == float(all_dropped)
    warned = any(issubclass(c.category, StrategyWarning) for c in caught)
    # a token selector that keeps no token of any active response drops them all too
    assert warned == all_dropped
    if all_dropped:
        assert (w == 0).all()


@given(rollout_batches(num_domains=3), st.sampled_from(GROUP_LOCAL), st.data())
@pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")
def test_permuting_groups_permutes_the_decision(b, preset, data):
    check_hand_worked(preset)
    perm = data.draw(st.permutations(range(b.num_groups)))
    pb, rows = permute_groups(b, perm)
    d = Strategy(preset).decide(b)
    pd = Strategy(preset).decide(pb)
    assert torch.equal(pd.keep_mask, d.keep_mask[rows])
    assert torch.allclose(pd.weights_per_token, d.weights_per_token[rows], rtol=1e-5, atol=1e-6)
    if d.advantages is not None:
        assert torch.allclose(pd.advantages, d.advantages[rows], atol=1e-5)
