"""`apply_decision` by hand: what it writes into TRL's generation output (no TRL needed).

The loss-level checks (drop == remove on TRL's real `_compute_loss`, per loss_type) are in
tests/hosts_trl/test_trl_loss.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dataflex_rl.core.strategy import Decision
from dataflex_rl.hosts.trl.loss import (
    GLOBAL_TOKEN_LOSSES,
    LOSS_TYPES,
    ROW_LOSSES,
    apply_decision,
    check_loss_type,
)

#: four global rows with 3, 2, 0 and 1 loss tokens (right-padded)
LENGTHS = torch.tensor([3, 2, 0, 1])
TRL_ADV = torch.tensor([1.0, -2.0, 0.5, -1.0])


def _mask(lengths, T):
    return (torch.arange(T)[None, :] < lengths[:, None]).long()


def _out(rows: slice, T: int | None = None) -> dict:
    """One rank's TRL output for ``rows``, padded to its own length T."""
    lengths = LENGTHS[rows]
    T = int(lengths.max()) if T is None else T
    return {
        "advantages": TRL_ADV[rows].clone(),
        "completion_mask": _mask(lengths, T),
        "num_items_in_batch": torch.tensor(6),
    }


def _decision(keep, renormalize=True, token_weights=None, adv=None, weights=None):
    keep = torch.tensor(keep, dtype=torch.bool)
    w = keep.float() if weights is None else torch.tensor(weights)
    return Decision(
        keep_mask=keep,
        weights_per_response=torch.where(LENGTHS > 0, w * keep, 0.0),
        response_mask=_mask(LENGTHS, 3 if token_weights is None else token_weights.shape[1]).bool(),
        advantages_per_response=adv,
        denominator=keep if renormalize else None,
        token_weights=token_weights,
    )


def test_grpo_drop_rescales_the_kept_rows_by_rows_over_kept_rows():
    # keep rows 0, 2, 3; row 2 has no tokens, so R = {0, 3}: c = N / R = 4 / 2 = 2
    out = _out(slice(0, 4))
    m = apply_decision(out, _decision([1, 0, 1, 1]), slice(0, 4), "grpo", LENGTHS)
    assert out["advantages"].tolist() == [2.0, 0.0, 0.0, -2.0]
    assert out["completion_mask"].sum(1).tolist() == [3, 0, 0, 1]
    assert int(out["num_items_in_batch"]) == 3 + 1
    assert m == {
        "dataflex/trl/advantage_scale": 2.0,
        "dataflex/trl/loss_rows_fraction": 0.5,
        "dataflex/trl/loss_tokens": 4.0,
        "dataflex/trl/per_token_advantages": 0.0,
    }


@pytest.mark.parametrize("loss_type", GLOBAL_TOKEN_LOSSES + ("bnpo",))
def test_token_losses_drop_by_mask_and_token_count(loss_type):
    out = _out(slice(0, 4))
    m = apply_decision(out, _decision([1, 0, 1, 1]), slice(0, 4), loss_type, LENGTHS)
    assert out["advantages"].tolist() == [1.0, 0.0, 0.0, -1.0]  # c = 1
    assert out["completion_mask"].sum(1).tolist() == [3, 0, 0, 1]
    assert int(out["num_items_in_batch"]) == 4  # was 6
    assert m["dataflex/trl/advantage_scale"] == 1.0


def test_each_rank_applies_its_slice_of_the_same_decision():
    """Two ranks, their own padded lengths (3 and 1): the same numbers as one process."""
    d = _decision([1, 0, 1, 1])
    r0, r1 = _out(slice(0, 2)), _out(slice(2, 4))
    assert r1["completion_mask"].shape == (2, 1)
    m0 = apply_decision(r0, d, slice(0, 2), "grpo", LENGTHS)
    m1 = apply_decision(r1, d, slice(2, 4), "grpo", LENGTHS)
    assert r0["advantages"].tolist() == [2.0, 0.0] and r1["advantages"].tolist() == [0.0, -2.0]
    assert int(r0["num_items_in_batch"]) == int(r1["num_items_in_batch"]) == 4
    assert m0 == m1


def test_without_renormalize_dropped_rows_count_as_zeros():
    out = _out(slice(0, 4))
    m = apply_decision(
        out, _decision([1, 0, 1, 1], renormalize=False), slice(0, 4), "grpo", LENGTHS
    )
    assert out["advantages"].tolist() == [1.0, 0.0, 0.0, -1.0]
    assert out["completion_mask"].sum(1).tolist() == [3, 2, 0, 1]  # untouched
    assert int(out["num_items_in_batch"]) == 6
    assert m["dataflex/trl/advantage_scale"] == 1.0
    assert m["dataflex/trl/loss_rows_fraction"] == 1.0


def test_invalid_rows_leave_every_denominator():
    # row 3's reward is NaN: never kept; without renormalize R = the 3 valid rows, c = 4 / 3
    out = _out(slice(0, 4))
    invalid = torch.tensor([False, False, False, True])
    m = apply_decision(
        out, _decision([1, 1, 1, 0], renormalize=False), slice(0, 4), "dr_grpo", LENGTHS, invalid
    )
    assert out["completion_mask"].sum(1).tolist() == [3, 2, 0, 0]
    assert int(out["num_items_in_batch"]) == 5
    assert m["dataflex/trl/advantage_scale"] == pytest.approx(4 / 3)
    assert out["advantages"].tolist() == pytest.approx([4 / 3, -8 / 3, 0.0, 0.0])


def test_weights_multiply_and_recomputed_advantages_replace_trl_ones():
    adv = torch.tensor([0.5, 0.5, 0.5, -0.5])
    d = _decision([1, 1, 1, 1], adv=adv, weights=[2.0, 0.5, 1.0, 1.5], renormalize=True)
    out = _out(slice(0, 4))
    m = apply_decision(out, d, slice(0, 4), "luspo", LENGTHS)
    # R = rows with tokens {0, 1, 3}: c = 4 / 3; row 2 has weight 0
    c = 4 / 3
    assert m["dataflex/trl/advantage_scale"] == pytest.approx(c)
    assert out["advantages"].tolist() == pytest.approx([0.5 * 2 * c, 0.5 * 0.5 * c, 0.0, -0.75 * c])


def test_token_weights_follow_the_ranks_own_padding():
    # the decision's T' = 4 columns; rank 0 pads to 3, rank 1 to 5 (TRL's pad_to_multiple_of)
    tw = torch.tensor(
        [[1.0, 2.0, 3.0, 0.0], [4.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]]
    )
    d = _decision([1, 1, 1, 1], token_weights=tw, renormalize=False)
    r0, r1 = _out(slice(0, 2)), _out(slice(2, 4), T=5)
    apply_decision(r0, d, slice(0, 2), "dapo", LENGTHS)
    m = apply_decision(r1, d, slice(2, 4), "dapo", LENGTHS)
    assert m["dataflex/trl/per_token_advantages"] == 1.0
    assert r0["advantages"].tolist() == [[1.0, 2.0, 3.0], [-8.0, -10.0, 0.0]]
    assert r1["advantages"].tolist() == [[0.0] * 5, [-6.0, 0.0, 0.0, 0.0, 0.0]]


def test_everything_dropped_gives_zero_weights_and_no_division_by_zero():
    out = _out(slice(0, 4))
    out["advantages"][1] = float("nan")  # never multiplied into the loss
    m = apply_decision(out, _decision([0, 0, 0, 0]), slice(0, 4), "grpo", LENGTHS)
    assert out["advantages"].tolist() == [0.0] * 4
    assert int(out["completion_mask"].sum()) == 0 and int(out["num_items_in_batch"]) == 0
    assert m["dataflex/trl/advantage_scale"] == 1.0
    assert m["dataflex/trl/loss_rows_fraction"] == 0.0


def _selected_then_tokens(renormalize_tokens=False):
    # select keeps rows 0, 1, 3; the token selection keeps token 0 of row 0 and of row 3 and
    # none of row 1's, so row 1 is dropped from keep_mask but not from select's rows
    token_keep = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    keep = torch.tensor([True, False, False, True])
    return Decision(
        keep_mask=keep,
        weights_per_response=keep.float(),
        response_mask=_mask(LENGTHS, 3).bool(),
        token_keep_mask=token_keep,
        # select's rows, or the kept tokens (tokens.renormalize)
        denominator=token_keep if renormalize_tokens else torch.tensor([True, True, False, True]),
    )


def test_token_selection_after_select_keeps_selects_rows_in_the_denominators():
    # R = select's rows with tokens: 0, 1, 3 (row 1 stays, weight 0): c = 4 / 3, tokens
    # 3 + 2 + 1; by keep_mask alone R would be rows 0, 3 (c = 2, 4 tokens)
    out = _out(slice(0, 4))
    m = apply_decision(out, _selected_then_tokens(), slice(0, 4), "grpo", LENGTHS)
    assert m["dataflex/trl/advantage_scale"] == pytest.approx(4 / 3)
    assert m["dataflex/trl/loss_tokens"] == 6.0 and int(out["num_items_in_batch"]) == 6
    assert out["completion_mask"].sum(1).tolist() == [3, 2, 0, 1]
    c = 4 / 3
    assert torch.allclose(
        out["advantages"], torch.tensor([[c, 0, 0], [0, 0, 0], [0, 0, 0], [-c, 0, 0]])
    )


def test_renormalized_tokens_are_refused_on_trl():
    with pytest.raises(ValueError, match="drops_tokens: TRL's completion_mask"):
        apply_decision(_out(slice(0, 4)), _selected_then_tokens(True), slice(0, 4), "grpo", LENGTHS)


def test_unknown_loss_type_lists_the_supported_ones():
    with pytest.raises(ValueError, match="loss_type: 'ppo'.*supported: bnpo, cispo, dapo"):
        check_loss_type("ppo")
    with pytest.raises(ValueError, match="loss_type"):
        apply_decision(_out(slice(0, 4)), _decision([1] * 4), slice(0, 4), "sum", LENGTHS)
    assert set(LOSS_TYPES) == {
        "grpo",
        "bnpo",
        "dr_grpo",
        "dapo",
        "cispo",
        "sapo",
        "luspo",
        "vespo",
    }


def test_misaligned_inputs_name_the_field():
    d = _decision([1] * 4)
    with pytest.raises(ValueError, match="lengths: 3 rows"):
        apply_decision(_out(slice(0, 4)), d, slice(0, 4), "grpo", LENGTHS[:3])
    with pytest.raises(ValueError, match="must have the 2 rows"):
        apply_decision(_out(slice(0, 4)), d, slice(0, 2), "grpo", LENGTHS)
    with pytest.raises(ValueError, match="differ from this rank's loss tokens"):
        apply_decision(_out(slice(2, 4)), d, slice(0, 2), "grpo", LENGTHS)
    with pytest.raises(ValueError, match="contiguous"):
        apply_decision(_out(slice(0, 4)), d, slice(0, 4, 2), "grpo", LENGTHS)


@given(
    n_ranks=st.sampled_from([1, 2, 4]),
    per_rank=st.integers(1, 4),
    data=st.data(),
    loss_type=st.sampled_from(LOSS_TYPES),
    renormalize=st.booleans(),
)
def test_rank_slices_agree_with_one_process(n_ranks, per_rank, data, loss_type, renormalize):
    """Applied rank by rank, each with its own padding: the same advantages and masks as on
    the whole batch, the same token count everywhere; row losses keep Σ_R c = N."""
    N = n_ranks * per_rank
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, 5), min_size=N, max_size=N)))
    keep = torch.tensor(data.draw(st.lists(st.booleans(), min_size=N, max_size=N)))
    w = torch.tensor(data.draw(st.lists(st.floats(0.0, 3.0, width=32), min_size=N, max_size=N)))
    adv = torch.tensor(data.draw(st.lists(st.floats(-2, 2, width=32), min_size=N, max_size=N)))
    d = Decision(
        keep_mask=keep,
        weights_per_response=torch.where(keep & (lengths > 0), w, 0.0),
        response_mask=_mask(lengths, 5).bool(),
        denominator=keep if renormalize else None,
    )

    def run(rows, T):
        out = {
            "advantages": adv[rows].clone(),
            "completion_mask": _mask(lengths[rows], T),
            "num_items_in_batch": torch.tensor(0),
        }
        return out, apply_decision(out, d, rows, loss_type, lengths)

    whole, m_whole = run(slice(0, N), 5 + n_ranks)
    for p in range(n_ranks):
        rows = slice(p * per_rank, (p + 1) * per_rank)
        T = int(lengths[rows].max()) + p  # each rank pads to its own length
        part, m = run(rows, T)
        assert m == m_whole
        assert torch.equal(part["advantages"], whole["advantages"][rows])
        assert torch.equal(part["completion_mask"], whole["completion_mask"][rows, :T])
        assert int(part["num_items_in_batch"]) == int(whole["num_items_in_batch"])
    stays = whole["completion_mask"].any(1) if renormalize else torch.ones(N, dtype=torch.bool)
    c = m_whole["dataflex/trl/advantage_scale"]
    if loss_type in ROW_LOSSES and bool(stays.any()):
        assert math.isclose(c * int(stays.sum()), N)
    assert torch.all(whole["advantages"][~(keep & (lengths > 0))] == 0)
