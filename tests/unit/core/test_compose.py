"""A group-level selection (``select``) and a token-level one (``tokens``) in one strategy,
hand-worked on `tests.hand_worked.batch` (3 groups of 4; its module doc gives rewards, lengths
and entropies): the token pool is the kept groups' tokens, so the combined keep mask is neither
part's alone nor the two parts' masks AND-ed; the loss's denominator; the order of the parts;
refill checked against ``select``; the spec and state round trips."""

from __future__ import annotations

import math

import pytest
import torch

from dataflex_rl import Strategy
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import parse_strategy
from tests.hand_worked import HIGH_ENTROPY, R, batch

DAPO_ENTROPY = {"name": "de", "select": "dapo", "tokens": "high_entropy"}
#: dapo keeps groups 0 and 2: rows 0-3 (lengths 2 4 1 3) and 8-11 (4 4 2 2), 22 tokens
DAPO_ROWS = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
#: the 22 tokens' entropies: 16 at .1, then .4 .5 1 1.5 2 3. The .8-quantile's rank is
#: .8 x 21 = 16.8, so the threshold is .4 + .8 x (.5 - .4) = .48: five tokens kept
COMBINED = [(0, 0), (1, 1), (3, 2), (8, 3), (9, 1)]


def _tokens(mask: torch.Tensor) -> list[tuple[int, int]]:
    return [tuple(p) for p in mask.nonzero().tolist()]


def test_tokens_are_chosen_among_the_groups_select_kept():
    d = Strategy(DAPO_ENTROPY).decide(batch())
    assert _tokens(d.token_keep_mask) == COMBINED
    assert d.keep_mask.tolist() == [bool(i in (0, 1, 3, 8, 9)) for i in range(12)]
    assert d.loss_rows.tolist() == [bool(k) for k in DAPO_ROWS]
    assert d.weights_per_token[d.token_keep_mask].tolist() == [1.0] * 5
    assert float(d.weights_per_token.sum()) == 5.0
    assert d.metrics["dataflex/select/active"] == 1.0
    assert d.metrics["dataflex/tokens/active"] == 1.0
    assert d.metrics["dataflex/kept_token_fraction"] == pytest.approx(5 / 32)


def test_neither_part_alone_nor_their_masks_anded_give_the_combined_mask():
    b = batch()
    dapo = Strategy("dapo").decide(b)
    high = Strategy("high_entropy").decide(b)
    # dapo alone trains on all 22 tokens of groups 0 and 2
    assert dapo.token_keep_mask is None and int(dapo.loss_mask.sum()) == 22
    # high_entropy alone pools all 32 tokens (threshold .34): it keeps (6, 2), .7, in the
    # zero-variance group 1, and (11, 1), .4
    assert _tokens(high.token_keep_mask) == sorted(HIGH_ENTROPY)
    # AND-ing the two leaves (11, 1): .4 is above .34 but below the kept groups' .48
    anded = dapo.loss_mask & high.loss_mask
    assert _tokens(anded) == sorted(COMBINED + [(11, 1)])
    assert _tokens(Strategy(DAPO_ENTROPY).decide(b).loss_mask) == COMBINED


def test_the_denominator_holds_every_token_of_the_kept_groups():
    # band renormalizes (dropped groups leave the denominator), top_tokens does not (its
    # dropped tokens stay, weight 0): the loss is averaged over the 22 tokens of groups 0
    # and 2, rows 2, 10 and 11 included though none of their tokens is kept
    d = Strategy(DAPO_ENTROPY).decide(batch())
    assert d.renormalizes and not d.drops_tokens
    assert d.loss_rows.tolist() == [bool(k) for k in DAPO_ROWS]
    assert torch.equal(d.denominator_mask, batch().response_mask & d.loss_rows[:, None])
    assert int(d.denominator_mask.sum()) == 22


def test_the_loss_is_the_kept_tokens_over_every_token_of_the_kept_groups():
    # a per-token loss equal to the entropies: the five kept tokens hold 2 + 1.5 + 3 + 1 + .5
    # = 8. dapo_entropy averages over the kept groups' 22 tokens: 8 / 22 (the kept tokens
    # alone, 8 / 5, would be 4.4x that); tokens.renormalize: 8 / 5; renormalizing
    # nothing: over all 32 valid tokens, 8 / 32
    b = batch()
    loss = b.entropies.clone().requires_grad_(True)
    d = Strategy(DAPO_ENTROPY).decide(b)
    total = d.aggregate(loss)
    assert float(total.detach()) == pytest.approx(8 / 22)
    total.backward()  # the gradient: 1 / 22 on each kept token, 0 elsewhere
    assert torch.equal(loss.grad, d.token_keep_mask.float() / 22)
    spec = {**DAPO_ENTROPY, "tokens": {"preset": "high_entropy", "renormalize": True}}
    assert float(Strategy(spec).decide(b).aggregate(b.entropies)) == pytest.approx(8 / 5)
    spec = {**DAPO_ENTROPY, "select": {"preset": "dapo", "renormalize": False}}
    assert float(Strategy(spec).decide(b).aggregate(b.entropies)) == pytest.approx(8 / 32)


def test_aggregate_on_some_rows_and_tokens_and_its_own_denominator():
    # the engine computes the loss on the rows with a gradient only, up to their longest
    # response: rows 0, 3 and 9 hold the kept tokens (0, 0), (3, 2), (9, 1): 2 + 3 + .5
    b = batch()
    d = Strategy(DAPO_ENTROPY).decide(b)
    rows = torch.tensor([0, 3, 9])
    part = b.entropies[rows, :3]
    assert float(d.aggregate(part, rows)) == pytest.approx(5.5 / 22)
    # informative-token-mean: rows 0-3 and 8-11 hold 10 + 12 tokens; of rows 0 and 1, 6
    informative = torch.zeros(12, dtype=torch.bool)
    informative[[0, 1]] = True
    assert int(d.denominator_tokens(informative)) == 6
    assert float(d.aggregate(part, rows, d.denominator_tokens(informative))) == pytest.approx(
        5.5 / 6
    )
    with pytest.raises(ValueError, match=r"aggregate: per_token_loss must be \[3, <= 4\]"):
        d.aggregate(b.entropies, rows)
    # nothing in the denominator: 0, not NaN
    empty = Strategy(
        {"select": {"scorer": "reward", "actuator": {"name": "band", "low": 5, "high": 6}}}
    )
    with pytest.warns(UserWarning, match="dropped every response"):
        e = empty.decide(b)
    assert float(e.aggregate(b.entropies)) == 0.0


def test_renormalized_tokens_leave_the_denominator_too():
    spec = {**DAPO_ENTROPY, "tokens": {"preset": "high_entropy", "renormalize": True}}
    d = Strategy(spec).decide(batch())
    assert d.drops_tokens and d.metrics["dataflex/tokens/renormalize"] == 1.0
    assert torch.equal(d.denominator_mask, d.loss_mask)
    assert int(d.denominator_mask.sum()) == 5
    # whatever select's flag: the loss is averaged over the kept tokens only
    spec["select"] = {"preset": "dapo", "renormalize": False}
    d = Strategy(spec).decide(batch())
    assert d.metrics["dataflex/select/renormalize"] == 0.0
    assert d.drops_tokens and int(d.denominator_mask.sum()) == 5


def test_without_renormalizing_the_denominator_is_every_valid_token():
    spec = {**DAPO_ENTROPY, "select": {"preset": "dapo", "renormalize": False}}
    d = Strategy(spec).decide(batch())
    assert not d.renormalizes and d.denominator_mask is d.response_mask
    assert _tokens(d.token_keep_mask) == COMBINED  # the pool is still the kept groups'


def test_recomputed_advantages_token_selection_and_token_reweighting_compose():
    # maxvar keeps rows 0, 3, 6, 7, 9, 10 (hand_worked.EXPECTED) with advantages R, -R, 0, 0,
    # -R, R. Their 18 tokens: 14 at .1, then .5 (9, 1), .7 (6, 2), 2 (0, 0), 3 (3, 2); rank
    # .8 x 17 = 13.6, threshold .1 + .6 x (.5 - .1) = .34: those four kept, so rows 7 and 10
    # are dropped. ar (alpha .5, p = .5 on row 0) gives raw .75, 1, 1 on the kept tokens of
    # the informative rows 0, 3, 9 (row 6's recomputed advantage is 0): mean 2.75 / 3 over
    # them; row 6 keeps weight 1
    spec = {"select": "maxvar", "tokens": "high_entropy", "reweight": "ar"}
    d = Strategy(spec).decide(batch())
    assert _tokens(d.token_keep_mask) == [(0, 0), (3, 2), (6, 2), (9, 1)]
    assert d.keep_mask.nonzero().squeeze(1).tolist() == [0, 3, 6, 9]
    torch.testing.assert_close(
        d.advantages_per_response,
        torch.tensor([R, 0, 0, -R, 0, 0, 0, 0, 0, -R, R, 0]),
        rtol=1e-5,
        atol=1e-6,
    )
    m = 2.75 / 3
    w = d.weights_per_token
    assert w[0, 0] == pytest.approx(0.75 / m) and w[3, 2] == pytest.approx(1 / m)
    assert w[9, 1] == pytest.approx(1 / m) and w[6, 2] == pytest.approx(1.0)
    assert float(w.sum()) == pytest.approx(2.75 / m + 1)


def test_a_token_selection_not_yet_due_leaves_select_alone():
    spec = {**DAPO_ENTROPY, "tokens": {"preset": "high_entropy", "warmup_steps": 1}}
    s = Strategy(spec)
    d0 = s.decide(batch(0))
    assert d0.token_keep_mask is None and d0.metrics["dataflex/tokens/active"] == 0.0
    assert d0.keep_mask.tolist() == [bool(k) for k in DAPO_ROWS]
    d1 = s.decide(batch(1))
    assert _tokens(d1.token_keep_mask) == COMBINED


# ---------------------------------------------------------------- refill and the spec
def test_refill_is_checked_against_select_and_counts_its_groups():
    s = Strategy({**DAPO_ENTROPY, "refill": {"max_rounds": 2}})
    assert s.refill_rounds == 2
    # groups_kept is select's: group 1 dropped, groups 0 and 2 kept, though group 2's row
    # 10 and 11 keep no token
    assert s.groups_kept(batch()).tolist() == [True, False, True]
    with pytest.raises(ConfigError, match=r"refill: refilling replaces .* no 'select' section"):
        Strategy({"tokens": "high_entropy", "refill": {}})
    with pytest.raises(ConfigError, match=r"refill: needs a selector .* 'max_variance'"):
        Strategy({"select": "maxvar", "tokens": "high_entropy", "refill": {}})


def test_the_preset_is_the_two_presets_with_dapos_refill():
    spec = parse_strategy("dapo_entropy").to_dict()
    assert spec["select"] == parse_strategy("dapo").to_dict()["select"]
    assert spec["tokens"] == parse_strategy("high_entropy").to_dict()["tokens"]
    assert spec["refill"] == {"max_rounds": 4, "overdraw": True}
    assert list(spec) == ["name", "description", "select", "tokens", "refill"]
    again = parse_strategy({k: v for k, v in spec.items()})
    assert again.to_dict() == spec


def test_state_round_trip_and_a_different_token_spec_is_refused():
    a = Strategy(DAPO_ENTROPY)
    a.decide(batch(0))
    state = a.state_dict()
    assert state["spec"]["tokens"]["actuator"]["name"] == "top_tokens"
    b = Strategy(DAPO_ENTROPY)
    b.load_state_dict(state)
    da, db = a.decide(batch(1)), b.decide(batch(1))
    assert torch.equal(da.token_keep_mask, db.token_keep_mask)
    other = {**DAPO_ENTROPY, "tokens": {"preset": "high_entropy", "actuator": {"fraction": 0.3}}}
    with pytest.raises(ValueError, match="checkpoint was saved with strategy"):
        Strategy(other).load_state_dict(state)


def test_every_row_dropped_warns_once_per_decision():
    # every group zero-variance: dapo drops all; the token selection has nothing to pool
    b = batch()
    flat = b.replace(rewards=torch.ones(12), advantages=torch.zeros_like(b.advantages))
    with pytest.warns(UserWarning, match="dropped every response"):
        d = Strategy(DAPO_ENTROPY).decide(flat)
    assert not d.keep_mask.any() and not d.token_keep_mask.any()
    assert not math.isnan(float(d.weights_per_token.sum()))
