"""Token selection by entropy (``top_tokens`` + ``token_entropy``, preset ``high_entropy``),
hand-worked: the quantile and its ties, the two scopes, composition with reweighting, the
decision's token views and metrics, and the settings refused before any work."""

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import BatchError, RolloutBatch
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.scorers.policy import TokenEntropy
from dataflex_rl.select.top_tokens import TopTokens


def _batch(entropies, lengths, *, rewards=None, micro=None, old_log_probs=None, **kw):
    e = torch.tensor(entropies, dtype=torch.float32)
    B, T = e.shape
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    rewards = rewards if rewards is not None else [float(i % 2) for i in range(B)]
    adv = torch.tensor([1.0 if r > 0 else -1.0 for r in rewards])
    return RolloutBatch(
        rewards=torch.tensor(rewards),
        response_mask=mask,
        group_ids=torch.arange(B) // 2,
        advantages=adv[:, None] * mask,
        entropies=torch.where(mask, e, torch.full_like(e, 99.0)),  # 99: padding, never read
        micro_batch_ids=None if micro is None else torch.tensor(micro),
        old_log_probs=old_log_probs,
        **kw,
    )


def _keep(batch, **params):
    sel = TopTokens(**params)
    return sel.select(TokenEntropy().score(batch), batch)


# ---------------------------------------------------------------- the quantile
def test_keeps_tokens_at_or_above_the_linear_quantile():
    # 10 valid tokens .0 .1 ... .9 (padding 99 is not a token); fraction .2: rank .8 x 9 =
    # 7.2, threshold .7 + .2 x .1 = .72: tokens .8 and .9 kept (2 of 10)
    b = _batch([[0.0, 0.5, 0.9, 7], [0.3, 0.8, 0.1, 0.2], [0.6, 0.4, 0.7, 7]], [3, 4, 3])
    keep = _keep(b, fraction=0.2)
    assert keep.nonzero().tolist() == [[0, 2], [1, 1]]


def test_ties_at_the_threshold_are_all_kept():
    # 8 tokens: five 1s, three 0s; fraction .25: rank .75 x 7 = 5.25 between two 1s ->
    # threshold 1, all five 1s kept (5 of 8, more than .25: ties are not broken)
    b = _batch([[1, 1, 0, 0], [1, 0, 1, 1]], [4, 4])
    assert int(_keep(b, fraction=0.25).sum()) == 5


def test_fraction_one_keeps_every_valid_token_and_nothing_else():
    b = _batch([[0.3, 0.2, 5], [0.1, 9, 9]], [2, 1])
    assert torch.equal(_keep(b, fraction=1.0), b.response_mask)


def test_inactive_rows_are_not_in_the_pool():
    # row 1's reward is NaN (invalid): its 3.0 is not a token of the pool; the pool is
    # .1 .2 .3 .4, fraction .5: rank .5 x 3 = 1.5, threshold .25 -> .3 and .4 kept
    b = _batch([[0.1, 0.2], [3.0, 3.0], [0.3, 0.4]], [2, 2, 2], rewards=[1.0, float("nan"), 0.0])
    keep = _keep(b, fraction=0.5)
    assert keep.nonzero().tolist() == [[2, 0], [2, 1]]


# ---------------------------------------------------------------- scopes
def test_micro_batch_scope_takes_a_quantile_per_micro_batch():
    # rows 0, 2 in micro-batch 0 (tokens 1 2 3 4), rows 1, 3 in micro-batch 1 (tokens 5 6 7
    # 8); fraction .5: thresholds 2.5 and 6.5 -> 3, 4 and 7, 8. The batch scope pools all
    # eight: rank 3.5, threshold 4.5 -> only 5 6 7 8 (rows 1, 3)
    ent = [[1, 3], [5, 7], [2, 4], [6, 8]]
    b = _batch(ent, [2, 2, 2, 2], micro=[0, 1, 0, 1])
    per_micro = _keep(b, fraction=0.5, scope="micro_batch")
    assert per_micro.nonzero().tolist() == [[0, 1], [1, 1], [2, 1], [3, 1]]
    whole = _keep(b, fraction=0.5, scope="batch")
    assert whole.nonzero().tolist() == [[1, 0], [1, 1], [3, 0], [3, 1]]


def test_micro_batch_scope_without_ids_is_one_micro_batch():
    b = _batch([[1, 3], [5, 7]], [2, 2])
    assert torch.equal(_keep(b, scope="micro_batch"), _keep(b, scope="batch"))


# ---------------------------------------------------------------- the decision
HIGH = {"tokens": {"preset": "high_entropy", "actuator": {"fraction": 0.5}}}


def test_decision_drops_rows_without_kept_tokens_and_zeroes_dropped_tokens():
    # tokens 1 2 | 3 4 | 5 6 (rows 0, 1, 2), fraction .5: rank 2.5, threshold 3.5 -> 4 5 6
    b = _batch([[1, 2], [3, 4], [5, 6]], [2, 2, 2])
    d = Strategy(HIGH).decide(b)
    assert d.keep_mask.tolist() == [False, True, True]
    assert d.token_keep_mask.nonzero().tolist() == [[1, 1], [2, 0], [2, 1]]
    assert d.per_token
    assert d.weights_per_response.tolist() == [0.0, 1.0, 1.0]  # weight 1 on kept tokens
    assert d.weights_per_token.tolist() == [[0, 0], [0, 1], [1, 1]]
    assert torch.equal(d.loss_mask, d.token_keep_mask)
    # TRL's choice: the other tokens stay in the denominator
    assert not d.renormalizes and d.denominator_mask is d.response_mask
    assert d.metrics["dataflex/kept_token_fraction"] == 0.5
    assert d.metrics["dataflex/kept_response_fraction"] == pytest.approx(2 / 3)


def test_composes_with_token_reweighting_mean_one_over_kept_tokens():
    # kept tokens as above: (1, 1), (2, 0), (2, 1) with p = .5, 1, 1; ar alpha .5 gives raw
    # .75, 1, 1, mean 2.75 / 3 over the kept tokens -> .8182, 1.0909, 1.0909; row weights
    # are the means over each row's kept tokens
    p = torch.tensor([[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]])
    b = _batch([[1, 2], [3, 4], [5, 6]], [2, 2, 2], old_log_probs=p.log())
    spec = {**HIGH, "reweight": {"preset": "ar", "normalize": "active"}}
    d = Strategy(spec).decide(b)
    m = 2.75 / 3
    expected = torch.tensor([[0, 0], [0, 0.75 / m], [1 / m, 1 / m]])
    torch.testing.assert_close(d.weights_per_token, expected)
    torch.testing.assert_close(d.weights_per_response, torch.tensor([0, 0.75 / m, 1 / m]))
    kept = d.weights_per_token[d.loss_mask]
    assert float(kept.mean()) == pytest.approx(1.0)


def test_composes_with_response_reweighting_on_kept_tokens_only():
    # diffband-like softmax over |A| = 1 for all: every kept row weight 1; the dropped
    # tokens of kept rows stay at 0
    b = _batch([[1, 2], [3, 4], [5, 6]], [2, 2, 2])
    d = Strategy({**HIGH, "reweight": "softmax"}).decide(b)
    assert d.weights_per_token.tolist() == [[0, 0], [0, 1], [1, 1]]


def test_renormalize_averages_over_kept_tokens():
    b = _batch([[1, 2], [3, 4], [5, 6]], [2, 2, 2])
    spec = {"tokens": {**HIGH["tokens"], "renormalize": True}}
    d = Strategy(spec).decide(b)
    assert d.renormalizes and d.drops_tokens
    assert torch.equal(d.denominator_mask, d.loss_mask) and int(d.loss_mask.sum()) == 3


def test_entropies_read_only_by_strategies_that_declare_them():
    # a NaN entropy on a valid token makes its row invalid for high_entropy only
    e = [[1.0, float("nan")], [3, 4]]
    b = _batch(e, [2, 2])
    assert Strategy(HIGH).decide(b).keep_mask.tolist() == [False, True]
    assert Strategy("baseline").decide(b).keep_mask.tolist() == [True, True]
    assert "entropies" in Strategy(HIGH).reads
    assert "entropies" not in Strategy("baseline").reads


# ---------------------------------------------------------------- refused before any work
@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.01])
def test_fraction_outside_zero_one_is_refused_naming_the_key(fraction):
    with pytest.raises(ConfigError, match=r"tokens\.actuator\.fraction: must be"):
        Strategy({"tokens": {"preset": "high_entropy", "actuator": {"fraction": fraction}}})


def test_a_host_without_entropies_is_refused_naming_the_scorer():
    with pytest.raises(ConfigError, match=r"tokens\.scorer: TokenEntropy needs entropies"):
        Strategy("high_entropy", available_fields=("rewards", "advantages"))


def test_micro_batch_scope_needs_a_host_that_gives_micro_batches():
    spec = {"tokens": {"preset": "high_entropy", "actuator": {"scope": "micro_batch"}}}
    with pytest.raises(ConfigError, match=r"tokens\.actuator: TopTokens \(scope: micro_batch\)"):
        Strategy(spec, available_fields=("advantages", "entropies"))
    Strategy(spec, available_fields=("advantages", "entropies", "micro_batch_ids"))


def test_recomputed_advantages_are_not_a_key_of_token_selection():
    spec = {"tokens": {"preset": "high_entropy", "recompute_advantages": True}}
    with pytest.raises(ConfigError, match=r"tokens\.recompute_advantages: unknown key"):
        Strategy(spec)


def test_each_selector_goes_in_its_own_section():
    with pytest.raises(ConfigError, match=r"select\.actuator: 'top_tokens' keeps tokens.*'tokens'"):
        Strategy({"select": {"scorer": "token_entropy", "actuator": "top_tokens"}})
    with pytest.raises(ConfigError, match=r"preset 'high_entropy' has no select section"):
        Strategy({"select": {"preset": "high_entropy"}})
    with pytest.raises(ConfigError, match=r"tokens\.actuator: 'band' keeps whole responses"):
        Strategy({"tokens": {"scorer": "solve_rate", "actuator": "band"}})


def test_unknown_scope_lists_the_choices():
    with pytest.raises(ConfigError, match="one of 'batch', 'micro_batch'"):
        Strategy({"tokens": {"preset": "high_entropy", "actuator": {"scope": "minibatch"}}})


def test_response_scorer_under_a_token_selector_is_refused():
    with pytest.raises(ConfigError, match="accepts token-level scores"):
        Strategy({"tokens": {"scorer": "reward", "actuator": "top_tokens"}})


def test_batch_checks_entropies_and_micro_batch_ids():
    with pytest.raises(BatchError, match="entropies must have shape"):
        RolloutBatch(
            rewards=torch.zeros(2),
            response_mask=torch.ones(2, 3, dtype=torch.bool),
            group_ids=torch.zeros(2, dtype=torch.int64),
            entropies=torch.zeros(2, 2),
        )
    with pytest.raises(BatchError, match="micro_batch_ids must be >= 0"):
        _batch([[1.0]], [1], micro=[-1])
    with pytest.raises(BatchError, match="micro_batch_ids must be an int64"):
        RolloutBatch(
            rewards=torch.zeros(1),
            response_mask=torch.ones(1, 1, dtype=torch.bool),
            group_ids=torch.zeros(1, dtype=torch.int64),
            micro_batch_ids=torch.zeros(1),
        )
