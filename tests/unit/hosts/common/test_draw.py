"""`draw_batch`: one quota -> draw -> metrics path for every host; ``exact`` is the one
difference (verl/TRL fill the batch, the engine lets it stay short)."""

import copy

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.draw import draw_batch
from dataflex_rl.hosts.common.sampler import DomainSampler

DOMAINS = ("a", "b")
NEVER_EXPLORE = {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}


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


def _draw(sampler, strategy, n, exact, factor=1.0, rounds=2, props=(0.5, 0.5)):
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
        exact=exact,
    )


@pytest.mark.parametrize("exact", [True, False])
def test_without_prerollout_the_quota_is_taken_as_it_is(exact):
    # 0.7 / 0.3 of 5: floors 3, 1; the larger remainder (0.5 of a) gets the fifth
    s = DomainSampler([6, 4], DOMAINS, seed=2)
    plain = copy.deepcopy(s).sample(torch.tensor([0.7, 0.3], dtype=torch.float64), 5)
    drawn, m = _draw(s, Strategy("baseline", domains=DOMAINS), 5, exact, props=(0.7, 0.3))
    assert drawn == plain[0] and [d for d, _ in drawn] == [0, 0, 0, 0, 1]
    assert m["dataflex/mix/domain/a/actual"] == pytest.approx(0.8)
    assert m["dataflex/mix/domain/a/target"] == pytest.approx(0.7)
    assert ("dataflex/sampler/shortfall" in m) is not exact


def test_hosts_differ_only_when_the_rounds_run_out():
    # everything in domain a is skippable: two rounds of candidates cannot fill its quota of 2
    s = DomainSampler([3, 8], DOMAINS, seed=1)
    st = Strategy({"prerollout": NEVER_EXPLORE}, domains=DOMAINS)
    _solved(st, [_key(0, i) for i in range(3)])
    short, ms = _draw(copy.deepcopy(s), st, 4, exact=False)
    full, mf = _draw(copy.deepcopy(s), st, 4, exact=True)
    assert [d for d, _ in short] == [1, 1]  # engine: b's 2, none of a's
    assert ms["dataflex/sampler/shortfall"] == 2.0 and ms["dataflex/prerollout/forced"] == 0
    assert sorted(d for d, _ in full) == [0, 0, 1, 1]  # verl/TRL: a's 2 forced in
    assert mf["dataflex/prerollout/forced"] == 2.0 and "dataflex/sampler/shortfall" not in mf
    assert set(short) < set(full)  # the same kept candidates; exact adds the forced ones
    assert ms["dataflex/mix/domain/b/actual"] == 1.0 and mf["dataflex/mix/domain/b/actual"] == 0.5


def test_hosts_agree_when_the_policy_keeps_enough():
    s = DomainSampler([10, 10], DOMAINS, seed=4)
    st = Strategy({"prerollout": NEVER_EXPLORE}, domains=DOMAINS)
    _solved(st, [_key(0, i) for i in range(0, 10, 2)])  # half of a is skippable
    a, ma = _draw(copy.deepcopy(s), st, 6, exact=False, factor=2.0, rounds=8)
    b, mb = _draw(copy.deepcopy(s), st, 6, exact=True, factor=2.0, rounds=8)
    assert a == b and len(a) == 6 and ma["dataflex/sampler/shortfall"] == 0.0
    assert {k: v for k, v in ma.items() if k != "dataflex/sampler/shortfall"} == mb
