"""Responses with no valid token (issue 12, item 17), one definition tested everywhere.

A response of length 0 (an empty generation, or every token masked by the host):

* has weight 0 (per response and per token) and so no term in the loss;
* is never in a normalization set: the mean-1 of reweighting is over the other rows, so the
  other rows' weights are exactly those of the batch without it;
* adds nothing to a token-mean denominator (its ``loss_mask`` row is empty);
* is left out of the weight statistics; its mean advantage and its |A| are 0 (not informative);
* still counts in its group's reward statistics: its reward is an outcome of the policy.
"""

from __future__ import annotations

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl.core.advantages import grpo_advantages_per_response
from dataflex_rl.core.batch import from_lists, informative_mask
from dataflex_rl.core.strategy import Strategy

LENGTHS = [3, 0, 2, 4, 2, 0]
REWARDS = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1]
ADV = [1.0, -2.0, 0.5, -1.0, 0.7, 0.3]


def _batch(rows=None):
    rows = list(range(len(LENGTHS))) if rows is None else rows
    b = from_lists(
        [REWARDS[i] for i in rows],
        [GROUPS[i] for i in rows],
        [LENGTHS[i] for i in rows],
        advantages=[ADV[i] for i in rows],
    )
    T = b.response_mask.shape[1]
    lp = -0.1 * torch.arange(1, T + 1, dtype=torch.float32).expand(b.batch_size, T).clone()
    return b.replace(old_log_probs=lp)


EMPTY = [i for i, n in enumerate(LENGTHS) if n == 0]
FULL = [i for i, n in enumerate(LENGTHS) if n > 0]


@pytest.mark.parametrize(
    "spec",
    [
        {"reweight": {"preset": "softmax", "normalize": "active"}},
        {"reweight": {"preset": "per", "normalize": "active"}},
        {"reweight": {"preset": "softmax"}},
        {"reweight": {"preset": "ar", "normalize": "active"}},
    ],
)
def test_reweighting_ignores_empty_responses(spec):
    d = Strategy(spec).decide(_batch())
    without = Strategy(spec).decide(_batch(FULL))
    w = d.weights_per_response
    assert w[EMPTY].tolist() == [0.0] * len(EMPTY)
    assert not d.weights_per_token[EMPTY].any() and not d.loss_mask[EMPTY].any()
    # the others are weighted exactly as in the batch without the empty responses
    torch.testing.assert_close(w[FULL], without.weights_per_response)
    if "normalize" in spec["reweight"]:  # mean 1 over the non-empty rows (all active)
        if spec["reweight"]["preset"] == "ar":
            tok = d.weights_per_token[d.loss_mask].double()
            assert float(tok.mean()) == pytest.approx(1.0, rel=1e-6)
        else:
            assert float(w[FULL].double().mean()) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("preset", ["baseline", "maxvar", "gfpo", "topk", "difffilter"])
def test_selection_gives_empty_responses_no_weight_and_no_tokens(preset):
    d = Strategy(preset).decide(_batch())
    assert d.weights_per_response[EMPTY].tolist() == [0.0] * len(EMPTY)
    assert int(d.loss_mask[EMPTY].sum()) == 0  # nothing in a token-mean denominator
    kept_tokens = int(d.loss_mask.sum())
    assert kept_tokens == sum(LENGTHS[i] for i in FULL if bool(d.keep_mask[i]))
    m = d.metrics
    if bool(d.keep_mask[FULL].any()):
        # weight statistics are over kept responses with tokens: all weights 1 here
        assert m["dataflex/weight_min"] == 1.0 and m["dataflex/weight_mean"] == 1.0


def test_empty_responses_carry_no_advantage_but_count_in_group_rewards():
    b = _batch()
    assert b.advantage_per_response[EMPTY].tolist() == [0.0] * len(EMPTY)
    assert not informative_mask(b)[EMPTY].any()
    from dataflex_rl.scorers.policy import advantage_magnitude

    assert advantage_magnitude(b)[EMPTY].tolist() == [0.0] * len(EMPTY)
    # group 0 has rewards 1, 0, 1, 0 including the empty row 1: mean 0.5
    assert float(b.group_mean[0]) == 0.5 and int(b.group_size[0]) == 4
    keep = torch.ones(b.batch_size, dtype=torch.bool)
    adv = grpo_advantages_per_response(b, keep)
    assert float(adv[1]) < 0  # its reward is below the group mean, but it has no token:
    d = Strategy({"select": {"preset": "maxvar", "recompute_advantages": True}}).decide(b)
    if d.advantages is not None:
        assert not d.advantages[EMPTY].any()
