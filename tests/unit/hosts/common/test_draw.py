"""`draw_batch`: one quota -> draw -> metrics path for every host. Every batch is full: when
the rounds run out, skipped candidates fill it (``max_draw_rounds``, one meaning on every
host); whether the host audits (the engine) is the one difference, and an audited prompt is
never one of the fillers."""

import copy

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.draw import draw_batch
from dataflex_rl.hosts.common.sampler import DomainSampler

DOMAINS = ("a", "b")
NEVER_EXPLORE = {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}
#: the same, auditing every skipped prompt of the plain batch (u < 1 always)
AUDIT_ALL = {"actuator": {**NEVER_EXPLORE["actuator"], "audit": 1.0}}
P = "dataflex/prerollout/"


def _key(d, i):
    return f"{DOMAINS[d]}{i}"


def _solved(strategy, keys):
    """Every key's last group was all-correct: the policy skips them all."""
    n = len(keys)
    strategy.history.update(
        from_lists(
            [1.0] * 2 * n,
            [g for g in range(n) for _ in range(2)],
            prompt_keys=tuple(k for k in keys for _ in range(2)),
        )
    )


def _draw(sampler, strategy, n, factor=1.0, rounds=2, props=(0.5, 0.5), audit=None):
    return draw_batch(
        sampler,
        _key,
        torch.tensor(props, dtype=torch.float64),
        n,
        strategy,
        0,
        torch.Generator().manual_seed(0),
        factor,
        rounds,
        audit=audit,
    )


def _orders(sampler):
    """Each domain's first-epoch order: the items the sampler draws, in turn."""
    return [sampler._order(d).tolist() for d in range(len(sampler.pool_sizes))]


def test_without_prerollout_the_quota_is_taken_as_it_is():
    # 0.7 / 0.3 of 5: floors 3, 1; the larger remainder (0.5 of a) gets the fifth
    s = DomainSampler([6, 4], DOMAINS, seed=2)
    plain = copy.deepcopy(s).sample(torch.tensor([0.7, 0.3], dtype=torch.float64), 5)
    drawn, m = _draw(s, Strategy("baseline", domains=DOMAINS), 5, props=(0.7, 0.3))
    assert drawn == plain[0] and [d for d, _ in drawn] == [0, 0, 0, 0, 1]
    assert m["dataflex/mix/domain/a/actual"] == pytest.approx(0.8)
    assert m["dataflex/mix/domain/a/target"] == pytest.approx(0.7)
    assert "dataflex/sampler/shortfall" not in m


def test_when_the_rounds_run_out_skipped_candidates_fill_the_batch():
    # quotas 2 + 2. Every prompt of a is skippable. Round 1 draws a's first 2 (skipped) and
    # b's first 2 (kept); round 2 draws a's next 2 (skipped); then the first 2 skipped of a
    # in draw order, round 1's, fill the batch: it is the plain batch, nothing was saved.
    # A batch left short (the engine before issue 30) holds b's 2 only.
    s = DomainSampler([6, 8], DOMAINS, seed=1)
    a, b = _orders(s)
    st = Strategy({"prerollout": NEVER_EXPLORE}, domains=DOMAINS)
    _solved(st, [_key(0, i) for i in range(6)])
    drawn, m = _draw(s, st, 4)
    assert drawn == [(0, a[0]), (0, a[1]), (1, b[0]), (1, b[1])]
    assert m[P + "forced"] == 2.0 and m[P + "rounds"] == 2.0 and m[P + "candidates"] == 6.0
    assert m[P + "candidates_skipped"] == 4.0
    assert m[P + "skipped"] == 0.0 and m[P + "replacements"] == 0.0
    assert m["dataflex/mix/domain/a/actual"] == 0.5 == m["dataflex/mix/domain/b/actual"]


def test_audited_prompts_are_never_the_fillers():
    # as above, the host auditing every skipped prompt of the plain batch (the engine): a's
    # round-1 candidates are audited (generated apart, not trained on), so round 2's fill the
    # batch; they are not in the plain batch: 2 skipped, 2 replacements
    s = DomainSampler([6, 8], DOMAINS, seed=1)
    a, b = _orders(s)
    st = Strategy({"prerollout": AUDIT_ALL}, domains=DOMAINS)
    _solved(st, [_key(0, i) for i in range(6)])
    audit: list = []
    drawn, m = _draw(s, st, 4, audit=audit)
    assert audit == [(0, a[0]), (0, a[1])]
    assert sorted(drawn) == [(0, a[2]), (0, a[3]), (1, b[0]), (1, b[1])]
    assert m[P + "audited"] == 2.0 and m[P + "forced"] == 2.0
    assert m[P + "skipped"] == 2.0 and m[P + "replacements"] == 2.0


def test_the_batch_is_the_same_with_or_without_the_audit_while_the_rounds_suffice():
    # half of a is skippable; with 2 candidates per slot the rounds always fill the batch: the
    # audit only adds prompts generated apart (engine runs that never run out are unchanged)
    s = DomainSampler([10, 10], DOMAINS, seed=4)
    plain_st = Strategy({"prerollout": NEVER_EXPLORE}, domains=DOMAINS)
    audit_st = Strategy({"prerollout": AUDIT_ALL}, domains=DOMAINS)
    for st in (plain_st, audit_st):
        _solved(st, [_key(0, i) for i in range(0, 10, 2)])
    audit: list = []
    x, mx = _draw(copy.deepcopy(s), plain_st, 6, factor=2.0, rounds=8)
    y, my = _draw(copy.deepcopy(s), audit_st, 6, factor=2.0, rounds=8, audit=audit)
    assert x == y and len(x) == 6 and mx[P + "forced"] == 0.0
    assert audit and not set(audit) & set(y) and my.pop(P + "audited") == len(audit)
    assert mx == my
