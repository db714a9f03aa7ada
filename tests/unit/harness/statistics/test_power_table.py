"""The MDE without simulating where the answer is known: +inf exactly where the exact test's
floor forbids a verdict, ``power_table.csv`` (the same simulation, run once by
``scripts/power_table.py``) at the report's defaults, the simulation everywhere else."""

import math

import pytest

from dataflex_rl.harness.statistics import power, stats


def simulated(n: int, m: int, p: float = power.TABLE_POWER, sides: int = 2) -> float:
    """Today's simulation itself: the p-quantile of the critical effects (sd = 1)."""
    crit = power.critical_effects(n, m, power.TABLE_ALPHA, sides=sides)
    return float(crit[max(0, math.ceil(p * crit.size) - 1)])


def test_no_verdict_is_the_exact_floor():
    # 2/2^5 = 0.0625 > 0.05 but 2/2^6 = 0.031 <= 0.05; under Holm over 4 (0.0125) 2/2^7 =
    # 0.0156 is still above and 2/2^8 = 0.0078 below
    assert power.no_verdict(5, 1) and not power.no_verdict(6, 1)
    assert power.no_verdict(7, 4) and not power.no_verdict(8, 4)
    assert power.simulated_mde(0.02, 3, m=2) == math.inf
    assert all(math.isinf(simulated(n, 1)) for n in (3, 5))  # what the simulation gives


@pytest.mark.parametrize("sides", [2, 1])
def test_the_table_covers_the_report_defaults(sides):
    table = power.mde_table(sides)
    assert table, f"{power.TABLE_FILES[sides].name} missing or simulated at other settings"
    for m in range(1, power.TABLE_MAX_M + 1):
        ns = sorted(n for mm, n in table if mm == m)
        want = range(stats.seeds_for_verdict(m, sides=sides), power.TABLE_MAX_N + 1)
        assert ns == list(want), m
    # more seeds, smaller MDE, up to the simulation's noise: within 3% two-sided; the
    # one-sided quantile over 2,000 experiments (relative SE near 2%, independent draws per n)
    # within 5%, three SEs of a difference of two
    slack = 1.03 if sides == 2 else 1.05
    for (m, n), v in table.items():
        if (m, n + 1) in table:
            assert table[m, n + 1] < slack * v


@pytest.mark.parametrize(
    "n, m, sides", [(6, 1, 2), (10, 1, 2), (7, 2, 2), (9, 3, 2), (5, 1, 1), (11, 2, 1), (20, 4, 1)]
)
def test_table_entries_are_todays_simulation(n, m, sides):
    got = power.mde_table(sides)[m, n]
    assert got == pytest.approx(simulated(n, m, sides=sides), rel=1e-9)


def test_the_table_is_read_and_the_simulation_runs_off_it(monkeypatch):
    want = power.mde_table()[1, 12] * 0.02
    other = 0.02 * simulated(8, 1, 0.9)
    calls = []
    real = power.critical_effects

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(power, "critical_effects", counted)
    assert power.simulated_mde(0.02, 12) == pytest.approx(want, rel=1e-12)
    assert calls == []  # read, not simulated
    assert power.simulated_mde(0.02, 8, power=0.9) == pytest.approx(other, rel=1e-12)
    assert len(calls) == 1  # another power: simulated


def test_seeds_needed_from_the_table_equals_the_simulated_search(monkeypatch):
    # sd 0.01, a 1.25-point difference: the MDE in sd units must be <= 1.25, which 8 paired
    # seeds give (1.20) and 7 do not (1.35)
    tabled = power.simulated_seeds_needed(0.01, 0.0125)
    monkeypatch.setattr(power, "mde_table", lambda sides=2: {})
    assert power.simulated_seeds_needed(0.01, 0.0125) == tabled == 8
