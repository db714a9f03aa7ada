"""GRPO loss pieces with hand-worked numbers (arithmetic in the comments) and a loop oracle."""

from __future__ import annotations

import math

import pytest
import torch

from dataflex_rl.hosts.engine.loss import kl_k3, masked_token_mean, policy_loss, response_log_probs
from dataflex_rl.hosts.engine.sampler import sample_groups


def _loss(adv, log_ratio, weights=None, mask=None, num_tokens=None, **kw):
    """The per-token loss weighed by ``weights`` and token-meaned over ``mask`` (what
    `Decision.aggregate` does with it), and the metrics."""
    lp = torch.tensor([log_ratio], dtype=torch.float32)
    old = torch.zeros_like(lp)
    a = torch.tensor([adv], dtype=torch.float32)
    m = torch.ones_like(lp, dtype=torch.bool) if mask is None else torch.tensor([mask])
    per_token, metrics = policy_loss(lp, old, a, m, **kw)
    if weights is not None:
        per_token = per_token * torch.tensor([weights], dtype=torch.float32)
    return masked_token_mean(per_token, m, num_tokens), metrics


@pytest.mark.parametrize(
    "adv, ratio, expected",
    [
        # A = 1, ratio 2: max(-1 * 2, -1 * clip(2, .8, 1.2) = -1.2) = -1.2
        (1.0, 2.0, -1.2),
        # A = 1, ratio 0.5: max(-0.5, -0.8) = -0.5 (the pessimistic side is unclipped)
        (1.0, 0.5, -0.5),
        # A = -1, ratio 2: max(2, 1.2) = 2; dual clip min(2, 3) = 2
        (-1.0, 2.0, 2.0),
        # A = -1, ratio 5: max(5, 1.2) = 5; dual clip min(5, 1 * 3) = 3
        (-1.0, 5.0, 3.0),
        # A = -1, ratio 0.5: max(0.5, 0.8) = 0.8
        (-1.0, 0.5, 0.8),
    ],
)
def test_policy_loss_clip_and_dual_clip(adv, ratio, expected):
    loss, _ = _loss([adv], [math.log(ratio)])
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_policy_loss_is_per_token():
    # tokens: A = [1, 1, -1], ratio 1 -> per-token losses [-1, -1, 1] whatever the mask
    # (the decision weighs and averages them: Decision.aggregate)
    lp = torch.zeros(1, 3)
    per_token, _ = policy_loss(
        lp, lp, torch.tensor([[1.0, 1.0, -1.0]]), torch.tensor([[True, True, False]])
    )
    assert per_token.tolist() == [[-1.0, -1.0, 1.0]]


def test_masked_token_mean_num_tokens_sets_the_denominator():
    # two tokens with loss -1 each, but the batch had 8 tokens: -2 / 8
    loss, _ = _loss([1.0, 1.0], [0.0, 0.0], num_tokens=8)
    assert float(loss) == pytest.approx(-0.25)


def test_policy_loss_gradient_is_minus_the_advantage_at_ratio_one():
    # d/d logp of -A exp(logp - old) at ratio 1 is -A
    lp = torch.zeros(1, 2, requires_grad=True)
    per_token, _ = policy_loss(
        lp, torch.zeros(1, 2), torch.tensor([[2.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool)
    )
    per_token.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-2.0, 1.0]]))


def test_policy_loss_metrics_count_clipped_tokens():
    # ratio 2 with A=1 is clipped, ratio 1 is not -> clip fraction 1/2
    _, m = _loss([1.0, 1.0], [math.log(2.0), 0.0])
    assert m["clip_fraction"] == pytest.approx(0.5)


def test_kl_k3():
    # equal log-probs: exp(0) - 0 - 1 = 0
    assert float(kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0]))) == 0.0
    # ref - logp = log 2: 2 - log 2 - 1 = 0.30685
    v = kl_k3(torch.tensor([0.0]), torch.tensor([math.log(2.0)]))
    assert float(v) == pytest.approx(1 - math.log(2.0))
    # clamped to 10 for a huge gap
    assert float(kl_k3(torch.tensor([0.0]), torch.tensor([30.0]))) == 10.0


def test_masked_token_mean_empty_mask_is_zero_with_graph():
    x = torch.ones(2, 3, requires_grad=True)
    v = masked_token_mean(x, torch.zeros(2, 3, dtype=torch.bool))
    v.backward()
    assert float(v.detach()) == 0.0 and float(x.grad.abs().sum()) == 0.0


def test_response_log_probs_match_sampler_log_probs(small_policy, char_tokenizer):
    tok = char_tokenizer
    prompts = [[tok.bos_id] + tok.encode("1+2="), [tok.bos_id] + tok.encode("10+20+3=")]
    r = sample_groups(
        small_policy.model,
        prompts,
        3,
        6,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        temperature=0.7,
        generator=torch.Generator().manual_seed(1),
    )
    with torch.no_grad():
        lp = response_log_probs(
            small_policy.model,
            r.prompt_ids[r.prompt_index],
            r.prompt_mask[r.prompt_index],
            r.response_ids,
            r.response_mask,
            temperature=0.7,
        )
    torch.testing.assert_close(lp, r.old_log_probs, atol=1e-5, rtol=0)
    assert float(lp[~r.response_mask].abs().sum()) == 0.0
