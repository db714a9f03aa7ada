"""Reweighting through the strategy equals a plain-loop oracle: mean 1 over the informative
set, finite and >= 0, 0 on dropped/padding rows; GRPO recompute equals the loop oracle."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from tests.hand_worked import check_hand_worked
from tests.numerics import grpo_advantages
from tests.property import oracles
from tests.strategies import permute_groups, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")


def _raw(name, params, b, rs, i):
    """Raw weight of row i (response level), from the documented formulas."""
    if name == "band_weight":
        st_ = oracles.group_stats(b)
        g = rs[i]["g"]
        rate = st_["successes"][g] / st_["size"][g]
        return params["inside"] if params["low"] <= rate <= params["high"] else 1.0
    s = _adv_mag(rs[i])
    if name == "softmax":
        return s / params["temperature"]  # log-weight; exponentiated below
    return (abs(s) + params["eps"]) ** params["alpha"]


def _adv_mag(row):
    vals = [abs(v) for m, v in zip(row["mask"], row["adv"]) if m]
    return sum(vals) / len(vals) if vals else 0.0


RESPONSE_SPECS = {
    "softmax": {"temperature": 1.0},
    "per": {"alpha": 0.6, "eps": 0.01},
    "band_weight": {"low": 0.2, "high": 0.8, "inside": 2.0},
}


@given(
    rollout_batches(),
    st.sampled_from(sorted(RESPONSE_SPECS)),
    st.sampled_from(["informative", "active"]),
)
def test_response_weights_equal_the_loop_oracle(b, name, normalize):
    params = RESPONSE_SPECS[name]
    preset = {"softmax": "softmax", "per": "per", "band_weight": "diffband"}[name]
    d = Strategy({"reweight": {"preset": preset, "normalize": normalize}}).decide(b)
    rs = oracles.rows(b)
    act = [oracles.active(r) for r in rs]
    info = oracles.informative(b)
    # the normalization set: rows with tokens only (a response without tokens is never in it)
    norm = [
        i
        for i in range(len(rs))
        if rs[i]["length"] > 0 and (info[i] if normalize == "informative" else act[i])
    ]
    raw = {i: _raw(name, params, b, rs, i) for i in norm}
    if name == "softmax" and norm:
        top = max(raw.values())
        raw = {i: math.exp(v - top) for i, v in raw.items()}
    mean = sum(raw.values()) / len(norm) if norm else 0.0
    expected = [
        (raw[i] / mean if mean > 0 else 1.0) if i in raw else (1.0 if act[i] else 0.0)
        for i in range(len(rs))
    ]
    w = d.weights_per_response
    has_tokens = [r["length"] > 0 for r in rs]
    expected = [e if t else 0.0 for e, t in zip(expected, has_tokens)]  # no token, no weight
    assert w.tolist() == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert torch.isfinite(d.weights_per_token).all() and (d.weights_per_token >= 0).all()
    assert (d.weights_per_token[~d.loss_mask] == 0).all()
    if norm:
        # mean 1 over the normalization set, whichever it is
        assert float(w[norm].double().mean()) == pytest.approx(1.0, rel=1e-5)


@given(rollout_batches(), st.sampled_from([0.0, 0.3, 1.0]))
def test_ar_token_weights_equal_the_loop_oracle(b, alpha):
    d = Strategy({"reweight": {"preset": "ar", "actuator": {"alpha": alpha}}}).decide(b)
    rs = oracles.rows(b)
    info = oracles.informative(b)
    toks = [(i, t) for i, r in enumerate(rs) if info[i] for t, m in enumerate(r["mask"]) if m]
    raw = {(i, t): alpha * math.exp(min(rs[i]["lp"][t], 0.0)) + (1 - alpha) for i, t in toks}
    mean = sum(raw.values()) / len(raw) if raw else 0.0
    w = d.weights_per_token
    for i, r in enumerate(rs):
        for t, m in enumerate(r["mask"]):
            if not (m and oracles.active(r)):
                assert float(w[i, t]) == 0.0
            elif (i, t) in raw and mean > 0:
                assert float(w[i, t]) == pytest.approx(raw[(i, t)] / mean, rel=1e-4)
            else:
                assert float(w[i, t]) == 1.0
    if raw and mean > 0:
        assert float(w[[i for i, _ in toks], [t for _, t in toks]].mean()) == pytest.approx(
            1.0, rel=1e-5
        )


@given(rollout_batches(), st.booleans(), st.data())
def test_grpo_recompute_equals_the_loop_oracle(b, norm_by_std, data):
    keep = torch.tensor(
        data.draw(st.lists(st.booleans(), min_size=b.batch_size, max_size=b.batch_size)),
        dtype=torch.bool,
    )
    adv = grpo_advantages(b, keep, norm_by_std)
    expected = oracles.grpo_advantages(b, keep.tolist(), norm_by_std)
    for i, r in enumerate(oracles.rows(b)):
        for t, m in enumerate(r["mask"]):
            assert float(adv[i, t]) == pytest.approx(expected[i] if m else 0.0, rel=1e-4, abs=1e-4)


@given(rollout_batches(), st.sampled_from(["softmax", "per", "diffband", "ar"]), st.data())
def test_permuting_groups_permutes_the_weights(b, preset, data):
    check_hand_worked(preset)  # weight 1 everywhere permutes too
    perm = data.draw(st.permutations(range(b.num_groups)))
    pb, rows = permute_groups(b, perm)
    w = Strategy(preset).decide(b).weights_per_token
    pw = Strategy(preset).decide(pb).weights_per_token
    assert torch.allclose(pw, w[rows], rtol=1e-5, atol=1e-6)


@settings(max_examples=300)
@given(rollout_batches(reward_kind="tied"), st.booleans())
def test_maxrl_weights_equal_the_loop_oracle(b, grpo):
    # rewards from a few dyadic values (0, .25, .5, 1, 2: the means are exact), the batch's
    # random advantages (sign mismatches, zeros) or GRPO's; the oracle: per row, the target
    # (r - mean) / mean (0 where mean <= 0) over the mean advantage of its valid tokens, 0
    # when negative, 1 where that advantage is 0; 0 for inactive rows and rows without tokens
    check_hand_worked("maxrl")  # weight 1 everywhere fails there
    if grpo:  # the host's GRPO advantages over the rows that are active without them
        b = b.replace(advantages=None)
        b = b.replace(advantages=grpo_advantages(b, b.active_mask))
    d = Strategy("maxrl").decide(b)
    rs = oracles.rows(b)
    stats = oracles.group_stats(b)
    expected, target = [], []
    for r in rs:
        m = stats["mean"][r["g"]]
        t = (r["r"] - m) / m if m > 0 else 0.0
        a = oracles.mean_adv(r) if oracles.active(r) else 0.0
        target.append(t)
        if not oracles.active(r) or r["length"] == 0:
            expected.append(0.0)
        elif a == 0:
            expected.append(1.0)
        else:
            expected.append(max(t / a, 0.0))
    w = d.weights_per_response
    assert w.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert d.keep_mask.tolist() == [oracles.active(r) for r in rs]
    if grpo:  # the advantage each response trains with is MaxRL's (rows with tokens)
        eff = (w.double() * b.advantage_per_response.double()).tolist()
        trained = [oracles.active(r) and r["length"] > 0 for r in rs]
        want = [t if k else 0.0 for t, k in zip(target, trained)]
        assert eff == pytest.approx(want, rel=1e-5, abs=1e-6)
