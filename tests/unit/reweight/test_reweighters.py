"""Reweighters, hand-worked, through `Strategy.decide` (which normalizes them to mean 1)."""

import math

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import RolloutBatch, from_lists
from dataflex_rl.reweight.response import BandWeight, Priority, Softmax
from dataflex_rl.reweight.token import ProbabilityAware

NAN = float("nan")


def _resp_weights(strategy, batch):
    d = strategy.decide(batch)
    return d.weights_per_response, d


def test_softmax_weights_hand_worked():
    # |A| = a, a + ln 2, a + ln 3 with T = 1 -> softmax proportional to 1 : 2 : 3;
    # mean 1 over the 3 informative rows -> 0.5, 1.0, 1.5 (the offset a cancels)
    a = 0.1
    b = from_lists([1.0, 0.0, 1.0], [0, 0, 0], advantages=[a, -(a + math.log(2)), a + math.log(3)])
    w, _ = _resp_weights(Strategy("softmax"), b)
    assert w.tolist() == pytest.approx([0.5, 1.0, 1.5], rel=1e-5)


def test_softmax_temperature():
    # T = 2: exp(s / 2) with s = 0.1 + {0, 2 ln 2}: ratio 1 : 2 -> weights 2/3, 4/3
    b = from_lists([1.0, 0.0], [0, 0], advantages=[0.1, -(0.1 + 2 * math.log(2))])
    s = Strategy({"reweight": {"preset": "softmax", "actuator": {"temperature": 2.0}}})
    w, _ = _resp_weights(s, b)
    assert w.tolist() == pytest.approx([2 / 3, 4 / 3], rel=1e-5)


def test_non_informative_rows_keep_weight_1_and_are_outside_the_normalization():
    # rows 0, 1 informative (|A| .1, .1 + ln 3 -> 1 : 3 -> .5, 1.5); row 2 has A = 0 -> weight 1
    # row 3 NaN reward and row 4 padding -> weight 0
    b = from_lists(
        [1.0, 0.0, 1.0, NAN, 1.0],
        [0, 0, 1, 0, 0],
        advantages=[0.1, -(0.1 + math.log(3)), 0.0, 5.0, 5.0],
        is_padding=torch.tensor([False, False, False, False, True]),
    )
    w, d = _resp_weights(Strategy("softmax"), b)
    assert w.tolist() == pytest.approx([0.5, 1.5, 1.0, 0.0, 0.0], rel=1e-5)
    assert d.metrics["dataflex/reweight/normalization_set"] == 2.0
    assert d.metrics["dataflex/reweight/normalize_informative"] == 1.0


def test_normalize_over_active_rows():
    # normalize: active -> the A=0 row joins the set: |A| = .1, .1 + ln 3, 0 gives raw
    # weights in the ratio e^.1 : 3 e^.1 : 1, divided by their mean over the 3 rows
    b = from_lists([1.0, 0.0, 1.0], [0, 0, 1], advantages=[0.1, -(0.1 + math.log(3)), 0.0])
    s = Strategy({"reweight": {"preset": "softmax", "normalize": "active"}})
    w, _ = _resp_weights(s, b)
    raw = torch.tensor([math.exp(0.1), 3 * math.exp(0.1), 1.0])
    assert w.tolist() == pytest.approx((raw / raw.mean()).tolist(), rel=1e-5)


def test_per_hand_worked():
    # alpha .5, eps .01: |A| = .99, 3.99 -> (1)^.5 = 1, (4)^.5 = 2 -> mean 1.5 -> 2/3, 4/3
    b = from_lists([1.0, 0.0], [0, 0], advantages=[0.99, -3.99])
    s = Strategy({"reweight": {"preset": "per", "actuator": {"alpha": 0.5}}})
    w, _ = _resp_weights(s, b)
    assert w.tolist() == pytest.approx([2 / 3, 4 / 3], rel=1e-5)
    # alpha 0 -> uniform
    s = Strategy({"reweight": {"preset": "per", "actuator": {"alpha": 0.0}}})
    assert _resp_weights(s, b)[0].tolist() == pytest.approx([1.0, 1.0])


def test_diffband_hand_worked():
    # group A: G=5 with 2 correct (solve rate .4, inside [.2, .8]) -> raw 2 for 5 rows
    # group B: G=10 with 1 correct (.1, outside) -> raw 1 for 10 rows
    # all 15 rows informative (rewards differ in both groups); mean raw = (10 + 10) / 15 = 4/3
    # -> 2 / (4/3) = 1.5 inside, 1 / (4/3) = .75 outside; check: (5*1.5 + 10*.75) / 15 = 1
    b = from_lists([1, 1, 0, 0, 0] + [1] + [0] * 9, [0] * 5 + [1] * 10)
    w, _ = _resp_weights(Strategy("diffband"), b)
    assert w.tolist() == pytest.approx([1.5] * 5 + [0.75] * 10)
    assert float(w.mean()) == pytest.approx(1.0)


def test_band_weight_bounds_are_inclusive():
    raw = BandWeight(low=0.2, high=0.8, inside=3.0).raw_weights(
        torch.tensor([0.1, 0.2, 0.5, 0.8, 0.9], dtype=torch.float64), None, None
    )
    assert raw.tolist() == [1.0, 3.0, 3.0, 3.0, 1.0]


def test_ar_token_weights_hand_worked():
    # alpha .5: w_t = .5 p_t + .5. Row 0 p = 1, .5 -> 1, .75; row 1 p = .25 -> .625
    # (its second token is padding). Mean over the 3 valid tokens = 2.375 / 3
    lp = torch.log(torch.tensor([[1.0, 0.5], [0.25, 1.0]]))
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        response_mask=torch.tensor([[1, 1], [1, 0]]),
        old_log_probs=lp,
        advantages=torch.tensor([[1.0, 1.0], [-1.0, 0.0]]),
    )
    d = Strategy("ar").decide(b)
    mean = 2.375 / 3
    expected = torch.tensor([[1.0 / mean, 0.75 / mean], [0.625 / mean, 0.0]])
    assert torch.allclose(d.weights_per_token, expected, rtol=1e-5)
    assert float(d.weights_per_token[d.loss_mask].mean()) == pytest.approx(1.0)


@pytest.mark.parametrize("write_into", [False, True])
def test_ar_weights_with_odd_log_probs_equal_the_formula(write_into):
    # valid tokens with a log-prob > 0 (p clamped to 1), one whose exp underflows to 0, a
    # tiny positive one (exp rounds to 1); row 2 has -inf on a valid token (invalid row),
    # row 3 garbage (NaN, 50.0) on its padding tokens; weights alpha * p + 1 - alpha, mean 1
    lp = torch.tensor(
        [
            [0.7, -0.5, -200.0, 1e-9],
            [-1.0, -2.0, -0.1, -0.3],
            [-float("inf"), -1.0, -1.0, -1.0],
            [-0.2, -0.4, float("nan"), 50.0],
        ]
    )
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        group_ids=torch.tensor([0, 0, 0, 0]),
        response_mask=mask,
        old_log_probs=lp,
        advantages=torch.tensor([[1.0] * 4, [-1.0] * 4, [1.0] * 4, [-1.0] * 4]),
    )
    d = Strategy("ar").decide(b)
    assert b.reading(["old_log_probs", "advantages"]).invalid_mask.tolist() == [
        False,
        False,
        True,
        False,
    ]
    raw = {  # 0.5 * exp(min(x, 0)) + 0.5 on the valid tokens of the active rows
        (i, t): 0.5 * math.exp(min(float(lp[i, t]), 0.0)) + 0.5
        for i in (0, 1, 3)
        for t in range(4)
        if mask[i, t]
    }
    mean = sum(raw.values()) / len(raw)
    expected = torch.zeros(4, 4)
    for (i, t), v in raw.items():
        expected[i, t] = v / mean
    if write_into:
        out = torch.full((4, 4), 7.0)
        got = d.write_weights_per_token(out)
        assert got.data_ptr() == out.data_ptr()
    else:
        got = d.weights_per_token
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)


def test_raw_weights_are_finite_and_non_negative_for_extreme_scores():
    norm = torch.tensor([True, True, True])
    s = torch.tensor([0.0, 1e4, -1e4], dtype=torch.float64)
    for rw in (Softmax(temperature=0.01), Priority(alpha=2.0), BandWeight()):
        raw = rw.raw_weights(s, None, norm)
        assert torch.isfinite(raw).all() and (raw >= 0).all(), type(rw).__name__
    # softmax: s / T = 0, 1e6, -1e6, shifted by the top 1e6: exp(-1e6), exp(0), exp(-2e6)
    assert Softmax(temperature=0.01).raw_weights(s, None, norm).tolist() == [0.0, 1.0, 0.0]
    # per: exp(2 (log(|s| + .01) - log(1e4 + .01))) = ((|s| + .01) / (1e4 + .01)) ** 2
    got = Priority(alpha=2.0).raw_weights(s, None, norm).tolist()
    assert got == pytest.approx([(0.01 / (1e4 + 0.01)) ** 2, 1.0, 1.0], rel=1e-9)
    raw = ProbabilityAware(alpha=1.0).raw_weights(torch.tensor([[0.0, 1.0]]), None, norm)
    assert raw.tolist() == [[0.0, 1.0]]


def test_every_kept_row_informative_set_empty_gives_weight_1():
    # all advantages 0 -> empty normalization set -> no division by zero: weights 1
    b = from_lists([1.0, 1.0], [0, 0], advantages=[0.0, 0.0])
    w, d = _resp_weights(Strategy("per"), b)
    assert w.tolist() == [1.0, 1.0]
    assert all(math.isfinite(v) for v in d.metrics.values())


def test_huge_raw_weights_do_not_overflow_float32():
    # per with alpha 10: (1e4 + .01)^10 ~ 1e40 overflows float32 (max 3.4e38). Normalizing
    # first: w = 2 r_i / (r_0 + r_1) with r_0 / r_1 = ((1e3 + .01) / (1e4 + .01))^10 ~ 1e-10
    b = from_lists([1.0, 0.0], [0, 0], advantages=[1e3, -1e4])
    s = Strategy({"reweight": {"preset": "per", "actuator": {"alpha": 10.0}}})
    w, d = _resp_weights(s, b)
    ratio = ((1e3 + 0.01) / (1e4 + 0.01)) ** 10
    assert torch.isfinite(d.weights_per_token).all()
    assert w.tolist() == pytest.approx([2 * ratio / (1 + ratio), 2 / (1 + ratio)], rel=1e-5)
