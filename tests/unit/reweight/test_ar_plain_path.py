"""The ar path as it runs -- ``token_prob``'s score, ``ar``'s raw weights, their normalization
(row sums a chunk of rows at a time) and the `Decision` writing them into a host buffer --
equals the plain torch formulas (the test oracle), on random batches: NaN, inf and positive
log-probs, garbage on padding tokens, holes in masks, padding rows, rows without tokens;
in one chunk, and in chunks of 3 rows. The oracle for any faster ar path."""

import pytest
import torch

import dataflex_rl.core.rowops as rowops
from dataflex_rl import Strategy
from dataflex_rl.core.batch import RolloutBatch, informative_mask
from dataflex_rl.reweight.token import ProbabilityAware
from dataflex_rl.scorers.policy import TokenProb


@pytest.fixture(params=["one chunk", "chunks of 3 rows"])
def layout(request, monkeypatch):
    """(B, T) of the batch; the second case runs with chunks of 3 rows (a ragged last one)."""
    if request.param == "one chunk":
        return 37, 50
    monkeypatch.setattr(rowops, "CHUNK_ELEMS", 3 * 257)
    return 301, 257


def _batch(B: int, T: int, seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    prefix = torch.arange(T)[None, :] < lengths[:, None]
    holes = torch.rand(B, T, generator=g) < torch.rand(B, 1, generator=g)
    mask = torch.where(torch.rand(B, 1, generator=g) < 0.5, prefix, holes)
    lp = -torch.empty(B, T).exponential_(3.0, generator=g)
    lp[torch.rand(B, T, generator=g) < 0.01] = 0.3  # positive: rounding in the host, p = 1
    garbage = torch.tensor([float("nan"), float("inf"), -float("inf"), 50.0])
    pick = torch.randint(0, 4, (B, T), generator=g)
    lp = torch.where(mask | (torch.rand(B, T, generator=g) < 0.5), lp, garbage[pick])
    for k, bad in enumerate((float("nan"), float("inf"), -float("inf"))):
        row = 3 + k  # a non-finite log-prob on a valid token: the row is invalid
        mask[row, 0] = True
        lp[row, 0] = bad
    adv = torch.randn(B, generator=g) * (torch.rand(B, generator=g) < 0.8)  # some zero
    rewards = (torch.rand(B, generator=g) < 0.5).float()
    rewards[7] = float("nan")
    padding = torch.zeros(B, dtype=torch.bool)
    padding[-3:] = True
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=torch.arange(B) // 5,
        advantages=torch.where(mask, adv[:, None], float("nan")),
        old_log_probs=lp,
        is_padding=padding,
    )


def _plain(b: RolloutBatch, alpha: float):
    """The oracle: token probabilities, raw weights and final token weights (float64 mean 1
    over the valid tokens of the informative kept rows, 1 on other kept rows' tokens)."""
    tokens = b.response_mask & b.active_mask[:, None]
    p = torch.where(tokens, torch.exp(b.old_log_probs).clamp(max=1.0), 0.0)
    raw = alpha * p + (1 - alpha)
    kept = b.active_mask & (b.response_length > 0)
    norm = kept & informative_mask(b)
    mean = raw.double()[b.response_mask & norm[:, None]].mean()
    w = torch.where(norm[:, None], raw.double() / mean, 1.0)
    w = torch.where(b.response_mask & kept[:, None], w, 0.0)
    return p, raw, norm, w


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_ar_equals_the_plain_formulas(layout, alpha):
    B, T = layout
    b = _batch(B, T, seed=B + int(10 * alpha))
    assert len(list(rowops.row_chunks(B, T))) == (1 if B < 100 else 101)
    assert b.invalid_mask[3:6].all() and b.invalid_mask[7]
    p_plain, raw_plain, norm, w_plain = _plain(b, alpha)
    assert norm.sum() > B // 3  # the oracle's set is not degenerate

    p = TokenProb().score(b)
    assert torch.equal(p, p_plain)  # bit for bit
    raw = ProbabilityAware(alpha=alpha).raw_weights(p, b, norm)
    torch.testing.assert_close(raw, raw_plain, rtol=1e-6, atol=0.0)

    d = Strategy({"reweight": {"preset": "ar", "actuator": {"alpha": alpha}}}).decide(b)
    out = torch.full((B, T), 7.0)  # a host buffer holding last step's values
    assert d.write_weights_per_token(out) is out
    torch.testing.assert_close(out.double(), w_plain, rtol=1e-6, atol=1e-6)
    assert torch.equal(d.weights_per_token, out)
    per_row = w_plain.sum(1) / b.response_length.clamp(min=1)
    torch.testing.assert_close(d.weights_per_response.double(), per_row, rtol=1e-6, atol=1e-6)
    if alpha < 1:  # weights vary with p: a weight-1 implementation fails
        assert float(out[norm].max() - out[norm & (b.response_length > 0)].min()) > 0.1


def test_ar_hand_worked_weights():
    # alpha 0.5: p = 1, 0.5 -> raw 1, 0.75; mean 0.875 -> 8/7, 6/7; padding token 0
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0]),
        response_mask=torch.tensor([[True, True, False], [False, False, False]]),
        group_ids=torch.tensor([0, 0]),
        advantages=torch.ones(2, 3),
        old_log_probs=torch.log(torch.tensor([[1.0, 0.5, 0.25], [1.0, 1.0, 1.0]])),
    )
    w = Strategy("ar").decide(b).write_weights_per_token(torch.full((2, 3), 7.0))
    expected = torch.tensor([[8 / 7, 6 / 7, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(w, expected, rtol=0.0, atol=1e-6)
