"""The per-step pre-rollout accounting that both hosts report, on hand-worked numbers."""

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.hosts.common.accounting import (
    first_per_domain,
    generation_metrics,
    intake_metrics,
    plain_batch,
)

P = "dataflex/prerollout/"


def test_first_per_domain_and_plain_batch():
    dom = torch.tensor([0, 1, 0, 0, 1, 2])
    ok = torch.tensor([False, True, True, True, True, True])
    quota = torch.tensor([1, 2, 0])
    assert first_per_domain(dom, ok, quota).tolist() == [False, True, True, False, True, False]
    assert plain_batch(dom, quota).tolist() == [True, True, False, False, True, False]
    assert (
        first_per_domain(
            torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.bool), quota
        ).tolist()
        == []
    )


def test_intake_metrics_count_against_the_plain_batch():
    h = PromptHistory()
    h.update(
        from_lists(
            [1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1], [2, 4, 5, 5], prompt_keys=("a", "a", "b", "b")
        )
    )
    keys = ["a", "b", "new", "c", "d"]
    plain = torch.tensor([True, True, True, False, False])
    generated = torch.tensor([False, True, False, True, True])
    m = intake_metrics(h, keys, plain, generated)
    # a and new skipped (a saves its 6 tokens, new has no history); c and d replace them
    assert m == {
        P + "skipped": 2.0,
        P + "skipped_first": 1.0,  # new
        P + "skipped_revisit": 1.0,  # a
        P + "replacements": 2.0,
        P + "tokens_saved_est": 6.0,
    }
    assert intake_metrics(None, keys, plain, generated)[P + "tokens_saved_est"] == 0.0


def test_generation_metrics_by_hand():
    # group 0 all-correct (zero variance), group 1 mixed, group 2 padding only
    b = from_lists(
        [1.0, 1.0, 1.0, 0.0, 0.5],
        [0, 0, 1, 1, 2],
        [3, 5, 2, 10, 7],
        is_padding=torch.tensor([False, False, False, False, True]),
    )
    m = generation_metrics(b, tokens_saved=30.0, generate_seconds=2.0)
    assert m[P + "zero_variance_through"] == 0.5
    assert m[P + "seconds_saved_est"] == pytest.approx(30.0 * 2.0 / 20.0)  # 20 real tokens
    assert P + "seconds_saved_est" not in generation_metrics(b, None, 2.0)
    assert P + "seconds_saved_est" not in generation_metrics(b, 30.0, None)
    empty = from_lists([0.5], [0], [4], is_padding=torch.tensor([True]))
    assert generation_metrics(empty, 10.0, 1.0) == {
        P + "zero_variance_through": 0.0,
        P + "seconds_saved_est": 0.0,
    }
