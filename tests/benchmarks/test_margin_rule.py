"""benchmarks/margin_rule.py with fewer experiments: the margin verdicts' false acceptance at
the margin stays at most α, and the rule does accept when the methods are equal."""

import numpy as np

from dataflex_rl.harness.statistics.analysis import INFERIOR, NONINFERIOR
from dataflex_rl.harness.statistics.sequential import EQUIVALENT
from tests.benchmarks import load

mr = load("margin_rule")
REPS = 300
#: three standard errors of a rate of 0.05 over REPS experiments
SLACK = 3 * (0.05 * 0.95 / REPS) ** 0.5


def test_false_acceptance_at_the_margin_is_at_most_alpha():
    non_inferior, equivalent = mr.false_acceptance(8, 2, REPS)
    assert non_inferior <= 0.05 + SLACK
    assert equivalent <= 0.05 + SLACK


def test_the_rule_answers_away_from_the_margin():
    # halfway to the margin, Δ = -M/2: called non-inferior far more often than α (a shift of
    # the differences by -M instead of +M would call it so almost never)
    v = mr.margin_verdicts(8, 2, -0.5, reps=REPS)
    assert np.isin(v, [NONINFERIOR, EQUIVALENT]).mean() > 0.2
    # twice the margin below: inferior, never non-inferior
    v = mr.margin_verdicts(8, 2, -2.0, reps=REPS)
    assert (v == INFERIOR).mean() > 0.5 and not np.isin(v, [NONINFERIOR, EQUIVALENT]).any()


def test_the_planned_seeds_give_the_stated_power():
    n, rate = mr.power_at_planned_seeds(1, 1.0, REPS)
    assert n == 9 and rate >= 0.8 - 3 * (0.8 * 0.2 / REPS) ** 0.5
