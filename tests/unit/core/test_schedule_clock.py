"""One clock for every mechanism: ``batch.step`` (issue 12, item 18). A retried step (decide
again for the same step) or a skipped step does not shift a mixer's schedule or its window."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy

DOMAINS = ("a", "b")


def _batch(step: int, shift: float = 0.0):
    # 2 groups per domain, 2 responses each; domain b's rewards rise with the step
    r = [0.0, 1.0, 1.0, 1.0, 0.0, 0.1 * step + shift, 0.0, 1.0]
    return from_lists(
        r,
        [0, 0, 1, 1, 2, 2, 3, 3],
        advantages=[1.0, -1.0] * 4,
        domain_ids=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        domains=DOMAINS,
        step=step,
    )


def _strategy(preset="tscl", every=2, warmup=1):
    return Strategy(
        {"mix": {"preset": preset, "warmup_steps": warmup, "every": every}}, domains=DOMAINS
    )


def _run(steps, preset="tscl"):
    s = _strategy(preset)
    updates, props = [], []
    for step, shift in steps:
        d = s.decide(_batch(step, shift))
        if d.proportions is not None:
            updates.append(step)
            props.append(d.proportions)
    return s, updates, props


@pytest.mark.parametrize("preset", ["tscl", "dump_ucb", "reward_gap"])
def test_a_retried_step_replaces_itself_and_does_not_shift_the_schedule(preset):
    plain, up_plain, p_plain = _run([(s, 0.0) for s in range(6)], preset)
    # step 2 is tried twice: first with other rewards (a failed attempt), then as in `plain`
    retried, up_retry, p_retry = _run(
        [(0, 0), (1, 0), (2, 0.5), (2, 0), (3, 0), (4, 0), (5, 0)], preset
    )
    # updates after steps s with (s + 1 - warmup) % every == 0: s = 0, 2, 4 (warmup 1)
    assert up_plain == [0, 2, 4]
    assert sorted(set(up_retry)) == up_plain  # step 2 updates on each attempt
    torch.testing.assert_close(p_retry[-1], p_plain[-1], rtol=0, atol=0)
    torch.testing.assert_close(retried.state_dict()["drawn"], plain.state_dict()["drawn"])


def test_a_skipped_step_does_not_shift_the_schedule():
    _, updates, _ = _run([(s, 0.0) for s in (0, 1, 3, 4, 5)])
    assert updates == [0, 4]  # 2 was skipped; 4 is still an update step, 3 and 5 are not
    _, updates, _ = _run([(s, 0.0) for s in (0, 1, 2, 4, 6)])
    assert updates == [0, 2, 4, 6]


def test_the_window_counts_steps_a_gap_is_not_a_shift():
    from dataflex_rl.scorers.domain import DomainReward

    sc = DomainReward(window=2)
    sc.observe(_batch(0))
    sc.observe(_batch(3))  # steps 1, 2 skipped: step 0 is outside the window of 2..3
    values, observed = sc.values(2)
    b3 = _batch(3)
    expected_b = float(b3.rewards[4:].mean())
    assert float(values[1]) == pytest.approx(expected_b) and bool(observed.all())
    sc.observe(_batch(3, shift=0.5))  # a retry of step 3 replaces it
    assert float(sc.values(2)[0][1]) == pytest.approx(expected_b + 0.5 / 4)
