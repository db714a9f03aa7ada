"""Numeric edge cases of issue 12 against exact (float64 / Python) oracles.

A. constant groups never carry signal and get advantage exactly 0 (group statistics in float64,
   zero variance by exact equality: `segment_moments`);
B. exact ties in ``topk`` go to the lower index;
C. any finite input (|x| up to 3.4e38, tiny values) gives finite weights in every preset;
D. inputs that carry autograd give decisions without gradients.
"""

import math
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.advantages import grpo_advantages_per_response
from dataflex_rl.core.batch import RolloutBatch, from_lists, informative_mask
from dataflex_rl.core.segment import segment_moments
from dataflex_rl.presets import PRESETS
from dataflex_rl.scorers.policy import AdvantageMagnitude
from dataflex_rl.select.top_fraction import TopFraction
from tests.hand_worked import check_hand_worked
from tests.strategies import DOMAINS, random_batch

SELECT_OR_REWEIGHT = [n for n, p in PRESETS.items() if {"select", "reweight"} & set(p.spec)]
#: select presets whose decision carries recomputed advantages
RECOMPUTING = [
    n
    for n in SELECT_OR_REWEIGHT
    if Strategy(n).decide(random_batch(0)).advantages_per_response is not None
]

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")


def test_some_presets_recompute_advantages():
    assert {"maxvar", "gfpo"} <= set(RECOMPUTING)


# ------------------------------------------------------------------ A. constant groups
def test_sixteen_equal_rewards_give_zero_std_and_zero_advantages():
    # float32 arithmetic: mean of 16 x 0.7f is off by an ulp, std ~3e-8 and the recomputed
    # advantage (r - mean) / (std + 1e-6) is about +-0.056; exact rule: std 0, advantage 0
    b = from_lists([0.7] * 16, [0] * 16, advantages=[0.0] * 16)
    assert float(b.group_std[0]) == 0.0 and float(b.group_mean[0]) == float(b.rewards[0])
    for preset in ("maxvar", "gfpo"):
        d = Strategy(preset).decide(b)
        assert (d.advantages_per_response == 0).all()


@given(
    st.floats(-1e3, 1e3, allow_nan=False),
    st.integers(1, 32),
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=8),
    st.booleans(),
)
def test_constant_groups_are_never_informative_and_get_zero_advantage(value, size, other, with_adv):
    # group 0: `size` equal rewards; group 1: arbitrary rewards next to it
    rewards = [value] * size + other
    gids = [0] * size + [1] * len(other)
    adv = [0.0] * size + [1.0] * len(other) if with_adv else None
    b = from_lists(rewards, gids, advantages=adv)
    assert float(b.group_std[0]) == 0.0
    assert float(b.group_mean[0]) == float(b.rewards[0])
    if not with_adv:
        assert not informative_mask(b)[:size].any()
    keep = torch.ones(b.batch_size, dtype=torch.bool)
    for norm in (True, False):
        assert (grpo_advantages_per_response(b, keep, norm)[:size] == 0).all()
    _, std, dev = segment_moments(b.rewards, b.group_ids, 2, keep)
    assert float(std[0]) == 0.0 and (dev[:size] == 0).all()
    for preset in RECOMPUTING:
        d = Strategy(preset).decide(b)
        assert (d.advantages_per_response[:size] == 0).all(), preset
        assert torch.isfinite(d.advantages_per_response).all()


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=2, max_size=32))
def test_group_statistics_match_a_float64_oracle(values):
    b = from_lists(values, [0] * len(values))
    xs = [float(v) for v in b.rewards]
    mean = math.fsum(xs) / len(xs)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    assert float(b.group_mean[0]) == pytest.approx(mean, rel=1e-12, abs=1e-12)
    assert float(b.group_std[0]) == pytest.approx(std, rel=1e-9, abs=1e-12)
    assert (float(b.group_std[0]) == 0.0) == (min(xs) == max(xs))


# ------------------------------------------------------------------ B. ties
def _tied_batch(lengths, a=0.1):
    """One group per row, every valid token with advantage ``a``: all |A| scores tie."""
    B = len(lengths)
    return from_lists([0.0] * B, list(range(B)), lengths, advantages=[a] * B)


def test_topk_breaks_exact_ties_by_index_not_by_rounding():
    lengths = [7, 3, 5, 6, 1, 9]
    b = _tied_batch(lengths)
    # float32 row means of equal tokens differ by rounding (the old tie-break)
    f32 = [float(torch.full((n,), 0.1).sum() / n) for n in lengths]
    assert len(set(f32)) > 1
    scores = AdvantageMagnitude().score(b)
    assert len(set(scores.tolist())) == 1  # exact tie in float64
    keep = TopFraction(fraction=0.5).select(scores, b)
    assert keep.tolist() == [True, True, True, False, False, False]  # round(0.5 * 6) = 3
    d = Strategy("topk").decide(b)
    assert d.keep_mask.tolist() == [True, True, True, False, False, False]


def test_topk_by_group_ties_go_to_the_lower_group_id():
    # group means of |A|: g0 = g1 = g2 = 0.1 (groups of sizes 3, 4, 1), g3 = 0.3; keep g3, g0
    rewards = [0.0] * 9
    gids = [0, 0, 0, 1, 1, 1, 1, 2, 3]
    b = from_lists(rewards, gids, advantages=[0.1] * 8 + [0.3])
    s = AdvantageMagnitude().score(b)
    keep = TopFraction(fraction=0.5, by_group=True).select(s, b)  # round(0.5 * 4) = 2 groups
    assert keep.tolist() == [True] * 3 + [False] * 4 + [False, True]


@given(
    st.lists(
        st.tuples(st.sampled_from([0.1, 0.3, 0.7]), st.integers(1, 9)), min_size=1, max_size=24
    ),
    st.sampled_from([0.25, 0.5, 0.75]),
)
def test_topk_keeps_the_highest_scores_lowest_index_first(rows, fraction):
    values = [v for v, _ in rows]
    b = from_lists(
        [0.0] * len(rows), list(range(len(rows))), [n for _, n in rows], advantages=values
    )
    keep = TopFraction(fraction=fraction).select(AdvantageMagnitude().score(b), b)
    a32 = [float(torch.tensor(v, dtype=torch.float32)) for v in values]
    k = math.floor(fraction * len(rows) + 0.5)
    order = sorted(range(len(rows)), key=lambda i: (-a32[i], i))  # the exact oracle
    assert keep.tolist() == [i in set(order[:k]) for i in range(len(rows))]


# ------------------------------------------------------------------ C. extreme finite values
EXTREME = st.one_of(
    st.sampled_from([3e38, -3e38, 3.4e38, -3.4e38, 1e-38, -1e-45, 1e-30, 0.0, 1.0, -1.0]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


@st.composite
def extreme_batches(draw):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    gids = [g for g, n in enumerate(sizes) for _ in range(n)]
    B = len(gids)
    T = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]

    def flat():
        values = draw(st.lists(EXTREME, min_size=B * T, max_size=B * T))
        return torch.tensor(values, dtype=torch.float32).reshape(B, T)

    rewards = torch.tensor(draw(st.lists(EXTREME, min_size=B, max_size=B)), dtype=torch.float32)
    adv = flat()
    if draw(st.booleans()):  # GRPO-like: one advantage per response
        adv = adv[:, :1].expand(B, T).contiguous()
    olp = flat()
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=torch.tensor(gids, dtype=torch.int64),
        domains=DOMAINS,
        domain_ids=torch.tensor([g % 3 for g in gids], dtype=torch.int64),
        advantages=torch.where(mask, adv, 0.0),
        old_log_probs=torch.where(mask, olp, 0.0),
        prompt_keys=tuple(f"p{g}" for g in gids),
        entropies=torch.where(mask, flat().abs(), 0.0),
    )


@given(extreme_batches(), st.sampled_from(SELECT_OR_REWEIGHT))
def test_any_finite_input_gives_finite_weights(b, preset):
    check_hand_worked(preset)  # keep-all / weight-1 is finite too
    assert not b.invalid_mask.any()  # every input is finite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = Strategy(preset, domains=DOMAINS).decide(b)
    assert torch.isfinite(d.weights_per_response).all() and (d.weights_per_response >= 0).all()
    assert torch.isfinite(d.weights_per_token).all() and (d.weights_per_token >= 0).all()
    if d.advantages_per_response is not None:
        assert torch.isfinite(d.advantages_per_response).all()
    assert all(math.isfinite(v) for v in d.metrics.values()), d.metrics


def test_per_with_huge_advantages_is_finite():
    # (|A| + 0.01) ** 0.6 for |A| = 3e38 is ~1.4e23 each: mean 1 gives weights 1, not inf / inf
    b = from_lists([0.0, 1.0, 0.0, 1.0], [0, 0, 1, 1], advantages=[-3e38, 3e38, -3e38, 3e38])
    d = Strategy("per").decide(b)
    assert torch.allclose(d.weights_per_response, torch.ones(4))


# ------------------------------------------------------------------ D. autograd inputs
@pytest.mark.parametrize("preset", list(PRESETS))
def test_decisions_never_carry_gradients(preset):
    check_hand_worked(preset)
    b = random_batch(3)
    b = b.replace(
        **{
            name: getattr(b, name).clone().requires_grad_(True)
            for name in ("rewards", "advantages", "old_log_probs", "entropies")
        }
    )
    s = Strategy(preset, domains=DOMAINS)
    for step in range(12):  # past the mixers' warm-up
        d = s.decide(b.replace(step=step))
    outs = [
        d.keep_mask,
        d.weights_per_response,
        d.weights_per_token,
        d.loss_mask,
        d.advantages_per_response,
        d.advantages,
        d.proportions,
        d.token_weights,
        d.token_keep_mask,
    ]
    for t in outs:
        if t is not None:
            assert not t.requires_grad and t.grad_fn is None
    assert b.rewards.grad is None
