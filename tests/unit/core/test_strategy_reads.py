"""Signals read lazily: a decision reads and validates only the fields its components declare;
per-response inputs (``response_advantages``, ``response_lengths``) replace [B, T] reads; the
decision's torch thread count is scoped."""

import math
import warnings
from typing import ClassVar

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.base import SCORERS
from dataflex_rl.core.batch import BatchError, RolloutBatch, from_lists, informative_mask
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import intra_op_threads
from dataflex_rl.presets import PRESETS
from tests.strategies import DOMAINS, random_batch

NAN, INF = float("nan"), float("inf")
#: attribute reads that touch no tensor data
METADATA = {"__get__", "is_floating_point", "dim", "size", "__len__"}


class Spy(torch.Tensor):
    """A tensor that records every torch function applied to it."""

    calls: ClassVar[list] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def data_ops() -> list:
    return [c for c in Spy.calls if c not in METADATA]


def _two_groups(olp: torch.Tensor) -> RolloutBatch:
    # group 0: rewards 1, 0 (informative); group 1: 1, 0; every row 4 tokens
    b = from_lists([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], advantages=[1.0, -1.0, 1.0, -1.0])
    return b.replace(old_log_probs=olp)


# ------------------------------------------------------------------ unread fields
def test_a_malformed_unread_field_costs_nothing_and_invalidates_nothing():
    # old_log_probs all NaN: difffilter never reads them, so no row is invalid and no torch
    # function touches their data during the decision
    olp = torch.full((4, 4), NAN).as_subclass(Spy)
    b = _two_groups(olp)
    Spy.calls.clear()
    d = Strategy("difffilter").decide(b)
    assert data_ops() == []
    assert d.keep_mask.tolist() == [True, True, True, True]
    assert d.metrics["dataflex/invalid_responses"] == 0.0
    assert d.weights_per_response.tolist() == [1.0] * 4


def test_a_malformed_read_field_still_makes_its_rows_invalid():
    # ar reads old_log_probs: row 1 has a NaN, row 2 a -inf on a valid token -> both invalid
    olp = torch.full((4, 4), -0.5)
    olp[1, 2], olp[2, 0] = NAN, -INF
    d = Strategy("ar").decide(_two_groups(olp))
    assert d.keep_mask.tolist() == [True, False, False, True]
    assert d.metrics["dataflex/invalid_responses"] == 2.0
    assert (d.weights_per_token[1:3] == 0).all()
    # the batch itself still reports every non-finite field (its own invalid_mask reads all)
    assert _two_groups(olp).invalid_mask.tolist() == [False, True, True, False]


def test_strategy_reads_what_its_components_declare():
    assert Strategy("difffilter").reads == frozenset({"advantages"})
    assert Strategy("topk").reads == frozenset({"advantages"})
    assert Strategy("ar").reads == frozenset({"advantages", "old_log_probs"})


def test_reading_leaves_out_undeclared_fields_and_shares_the_rest():
    olp = torch.full((4, 4), -1.0)
    olp[2, 1] = NAN  # row 2 invalid while old_log_probs are read
    b = _two_groups(olp)
    assert b.active_mask.tolist() == [True, True, False, True]
    v = b.reading({"advantages"})
    assert v.old_log_probs is None and v.advantages is b.advantages and v.rewards is b.rewards
    assert v.active_mask.tolist() == [True] * 4  # without old_log_probs row 2 takes part
    assert v.group_size.tolist() == [2, 2] and b.group_size.tolist() == [2, 1]
    assert b.old_log_probs is olp  # the original is unchanged
    assert b.reading({"advantages", "old_log_probs"}) is b  # nothing left out: itself


# ------------------------------------------------------------------ per-response inputs
def test_per_response_inputs_give_the_token_quantities_without_reading_tokens():
    # rows: 3 tokens adv 0.5, 1 token adv -0.5, 0 tokens (adv NaN: no valid token, fine),
    # 2 tokens adv NaN (invalid)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    spy_adv = torch.zeros(4, 3).as_subclass(Spy)
    spy_mask = mask.as_subclass(Spy)
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        response_mask=spy_mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        advantages=spy_adv,
        response_advantages=torch.tensor([0.5, -0.5, NAN, NAN]),
        response_lengths=torch.tensor([3, 1, 0, 2]),
    )
    Spy.calls.clear()
    assert b.response_length.tolist() == [3, 1, 0, 2]
    assert b.invalid_mask.tolist() == [False, False, False, True]
    assert b.advantage_per_response.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert informative_mask(b).tolist() == [True, True, False, False]
    assert data_ops() == []


def test_response_lengths_are_checked_against_the_mask_when_the_mask_is_read():
    b = from_lists([1.0, 0.0], [0, 0], [3, 1])
    # no per-token field to validate: the mask is not read, the host vouches for the lengths
    vouched = b.replace(response_lengths=torch.tensor([3, 2]))
    assert vouched.response_length.tolist() == [3, 2]
    # old log-probs are validated over the mask, and the lengths with them
    olp = torch.zeros(2, 3)
    with pytest.raises(
        BatchError,
        match="response_lengths disagrees with response_mask: "
        "row 1 has length 2 but 1 valid tokens",
    ):
        b.replace(response_lengths=torch.tensor([3, 2]), old_log_probs=olp)
    ok = b.replace(response_lengths=torch.tensor([3, 1]), old_log_probs=olp)
    assert ok.response_length.tolist() == [3, 1]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"response_advantages": torch.zeros(3)}, "response_advantages must be a float tensor"),
        (
            {"response_advantages": torch.zeros(2, dtype=torch.int64)},
            "response_advantages must be a float tensor",
        ),
        (
            {"response_lengths": torch.zeros(2, dtype=torch.int32)},
            "response_lengths must be an int64 tensor",
        ),
        ({"response_lengths": torch.tensor([1, 5])}, r"response_lengths must lie in 0\.\.T=4"),
    ],
)
def test_per_response_inputs_shape_errors_name_the_field(kw, match):
    with pytest.raises(BatchError, match=match):
        from_lists([1.0, 0.0], [0, 0], **kw)


def _per_response(b: RolloutBatch) -> RolloutBatch:
    """``b`` with its (row-constant) advantages and lengths also given per response."""
    n = b.response_mask.sum(1)
    first = torch.where(n > 0, b.advantages[:, 0], torch.full_like(b.rewards, NAN))
    return b.replace(response_advantages=first, response_lengths=n)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_per_response_inputs_decide_like_token_inputs(preset):
    # random_batch: advantages constant over each row's valid tokens, NaN on padding tokens
    a, b = Strategy(preset, domains=DOMAINS), Strategy(preset, domains=DOMAINS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, seed in enumerate((0, 1, 2, 3, 4, 5, 6, 7)):
            tok = random_batch(seed, step=step)
            da, db = a.decide(tok), b.decide(_per_response(tok))
            assert torch.equal(da.keep_mask, db.keep_mask)
            torch.testing.assert_close(da.weights_per_token, db.weights_per_token)
            for x, y in ((da.advantages, db.advantages), (da.proportions, db.proportions)):
                assert (x is None) == (y is None)
                if x is not None:
                    torch.testing.assert_close(x, y)
            ma = {k: v for k, v in da.metrics.items() if k != "dataflex/time_ms"}
            mb = {k: v for k, v in db.metrics.items() if k != "dataflex/time_ms"}
            assert ma.keys() == mb.keys()
            assert all(math.isclose(ma[k], mb[k], rel_tol=1e-5, abs_tol=1e-6) for k in ma), {
                k: (ma[k], mb[k])
                for k in ma
                if not math.isclose(ma[k], mb[k], rel_tol=1e-5, abs_tol=1e-6)
            }


def test_host_with_only_response_advantages_satisfies_advantage_scorers():
    s = Strategy(
        "topk", available_fields=("rewards", "response_mask", "group_ids", "response_advantages")
    )
    b = from_lists([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], [2, 2, 1, 3])
    b = b.replace(response_advantages=torch.tensor([0.2, -2.0, 0.0, 1.0]))
    assert s.decide(b).keep_mask.tolist() == [False, True, False, True]


# ------------------------------------------------------------------ threads
def test_decide_runs_with_its_thread_count_and_restores_the_callers(monkeypatch):
    seen = []
    real_set = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real_set(n)))
    prev = torch.get_num_threads()
    real_set(2)
    try:
        Strategy("difffilter").decide(random_batch(0))
        assert seen == [1, 2] and torch.get_num_threads() == 2
        seen.clear()
        Strategy("difffilter", threads=None).decide(random_batch(0))
        assert seen == [] and torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), intra_op_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("restored even on error")
        assert torch.get_num_threads() == 2
    finally:
        real_set(prev)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_threads_must_be_a_positive_int_or_none(bad):
    with pytest.raises(ConfigError, match="threads: must be an int >= 1 or None"):
        Strategy("difffilter", threads=bad)


# ------------------------------------------------------------------ token level
def test_token_prob_and_validity_of_old_log_probs_hand_worked():
    # row 0: p = e^-1, e^-2 (NaN on the padding token: ignored); row 1: +0.5 -> clamped to p 1;
    # row 2: -inf on a valid token -> invalid (p 0); row 3: no valid token
    lp = torch.tensor([[-1.0, -2.0, NAN], [0.5, -1.0, 0.0], [-INF, -1.0, -1.0], [NAN, NAN, NAN]])
    b = RolloutBatch(
        rewards=torch.zeros(4),
        group_ids=torch.zeros(4, dtype=torch.int64),
        response_mask=torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1], [0, 0, 0]]),
        old_log_probs=lp,
    )
    assert b.invalid_mask.tolist() == [False, False, True, False]
    p = SCORERS.get("token_prob")().score(b)
    e1, e2 = math.exp(-1), math.exp(-2)
    expected = [[e1, e2, 0.0], [1.0, e1, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    torch.testing.assert_close(p, torch.tensor(expected))


def test_ar_token_weights_equal_a_per_token_loop():
    # the oracle: mean m of raw = 0.5 p + 0.5 over the valid tokens of informative kept rows;
    # weight raw / m there, 1 on the valid tokens of other kept rows, 0 elsewhere
    for seed in range(6):
        b = random_batch(seed)
        d = Strategy("ar").decide(b)
        v = b.reading({"advantages", "old_log_probs"})
        keep = v.active_mask & (v.response_length > 0)
        norm = keep & informative_mask(v)
        raw, tokens = {}, []
        for i in range(v.batch_size):
            for t in range(v.response_mask.shape[1]):
                if v.response_mask[i, t] and keep[i]:
                    p = min(math.exp(float(v.old_log_probs[i, t])), 1.0)
                    raw[i, t] = 0.5 * p + 0.5
                    if norm[i]:
                        tokens.append(raw[i, t])
        m = sum(tokens) / len(tokens)
        want = torch.zeros(v.response_mask.shape)
        for (i, t), r in raw.items():
            want[i, t] = r / m if norm[i] else 1.0
        torch.testing.assert_close(d.weights_per_token, want)
        assert bool((want != 1).any())  # weight-1 everywhere would fail
        buf = torch.full(want.shape, 7.0)
        assert torch.equal(
            Strategy("ar").decide(b).write_weights_per_token(buf), d.weights_per_token
        )


def test_ar_hand_worked_from_sums():
    # alpha 0.5: raw = 0.5 p + 0.5. Rows (one group, rewards 1, 0, so both informative):
    # row 0: p = 1, 1 -> raw 1, 1; row 1: p = e^-1 on its one valid token -> raw 0.684;
    # mean over the 3 tokens m = (2 + 0.5 e^-1 + 0.5) / 3; weights raw / m
    lp = torch.tensor([[0.0, 0.0], [-1.0, NAN]])
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        response_mask=torch.tensor([[1, 1], [1, 0]]),
        old_log_probs=lp,
        advantages=torch.tensor([[1.0, 1.0], [-1.0, 0.0]]),
    )
    d = Strategy("ar").decide(b)
    m = (2 + 0.5 * math.exp(-1) + 0.5) / 3
    expected = torch.tensor([[1 / m, 1 / m], [(0.5 * math.exp(-1) + 0.5) / m, 0.0]])
    torch.testing.assert_close(d.weights_per_token, expected)
    torch.testing.assert_close(
        d.weights_per_response, torch.tensor([1 / m, (0.5 * math.exp(-1) + 0.5) / m])
    )
