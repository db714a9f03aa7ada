"""harness/statistics/analysis.py: summaries, pairing, Holm families and verdicts on hand-built
rows."""

import math

import numpy as np
import pytest

from dataflex_rl.harness.statistics import power
from dataflex_rl.harness.statistics.analysis import (
    BETTER,
    NO_DIFF,
    TOO_FEW,
    WORSE,
    StatsOptions,
    analyze,
    score_matrices,
)
from dataflex_rl.harness.statistics.results import Row


def rows_from(table: dict, benchmark="b", domain=""):
    """{method: [score per seed]} -> rows (seed i = i-th score; None = missing)."""
    return [
        Row(m, str(i), benchmark, v, domain)
        for m, vals in table.items()
        for i, v in enumerate(vals)
        if v is not None
    ]


def test_three_seeds_can_never_be_a_verdict():
    # every seed +0.1: delta 0.1, bootstrap interval [0.1, 0.1], but exact p = 2/8 = 0.25
    rows = rows_from({"baseline": [0.5, 0.6, 0.7], "a": [0.6, 0.7, 0.8]})
    a = analyze(rows, "baseline")
    c = a.primary.comparisons[0]
    assert c.delta == pytest.approx(0.1)
    assert c.p == pytest.approx(0.25) and c.p_holm == pytest.approx(0.25)
    assert c.verdict == NO_DIFF
    # no interval where no verdict is possible (the bootstrap would say [0.1, 0.1])
    assert not c.verdict_possible and c.p_holm_floor == pytest.approx(0.25)
    assert all(math.isnan(v) for v in (*c.ci, *c.corrected_ci))


def test_verdict_possible_follows_holm_over_the_family():
    # 3 methods at 6 seeds: floor 3 * 2/64 = 0.094 > 0.05: none can be decided, though one
    # method alone could (2/64 = 0.031); at 7 seeds 3 * 2/128 = 0.047 <= 0.05: all can
    base = list(np.linspace(0.4, 0.6, 7))
    table = {"baseline": base, **{m: [b + k * 0.01 for b in base] for k, m in enumerate("xyz")}}
    six = analyze(rows_from({m: v[:6] for m, v in table.items()}), "baseline")
    assert [c.p_holm_floor for c in six.primary.comparisons] == pytest.approx([3 * 2 / 64] * 3)
    assert not any(c.verdict_possible for c in six.primary.comparisons)
    seven = analyze(rows_from(table), "baseline")
    assert all(c.verdict_possible for c in seven.primary.comparisons)
    assert math.isfinite(seven.primary.comparisons[1].corrected_ci[0])


def test_better_and_worse_with_eight_seeds():
    base = np.linspace(0.4, 0.6, 8)
    noise = np.array([0.01, -0.01, 0.005, 0.0, 0.01, -0.005, 0.002, 0.0])
    rows = rows_from(
        {
            "baseline": list(base),
            "up": list(base + 0.05 + noise),
            "down": list(base - 0.05 + noise),
            "same": list(base + noise),
        }
    )
    a = analyze(rows, "baseline")
    by = {c.method: c for c in a.primary.comparisons}
    # all 8 deltas of 'up' positive: p = 2/256; Holm over 3 methods, ties with 'down' -> x3
    assert by["up"].p == pytest.approx(2 / 256)
    assert by["up"].p_holm == pytest.approx(3 * 2 / 256)
    assert by["up"].level == pytest.approx(0.05 / 3)
    assert (by["up"].verdict, by["down"].verdict, by["same"].verdict) == (BETTER, WORSE, NO_DIFF)
    assert by["up"].corrected_ci[0] <= by["up"].ci[0]  # the corrected interval is wider
    # the MDE is the simulated one of the verdict rule (8 seeds, Holm over 3), not the t
    # formula (2.364624 + 0.896030) * sd / sqrt(8), which would be 27% smaller
    sd = np.std(noise, ddof=1)
    assert by["up"].mde == pytest.approx(power.simulated_mde(sd, 8, m=3))
    assert by["up"].mde > (2.364624 + 0.896030) * sd / math.sqrt(8)


def test_pairing_uses_only_shared_seeds():
    rows = rows_from({"baseline": [0.5, 0.6, None, 0.4], "a": [0.55, None, 0.9, 0.45]})
    c = analyze(rows, "baseline").primary.comparisons[0]
    assert c.n_pairs == 2 and c.delta == pytest.approx(0.05)


def test_one_pair_is_too_few():
    rows = rows_from({"baseline": [0.5, 0.6], "a": [0.55, None]})
    c = analyze(rows, "baseline").primary.comparisons[0]
    assert c.verdict == TOO_FEW and c.delta == pytest.approx(0.05) and math.isnan(c.p)


def test_average_is_the_mean_over_domains_each_weighing_the_same():
    # domain m has two benchmarks (0.2, 0.4 -> 0.3), domain l one (0.9): average (0.3 + 0.9) / 2
    rows = [
        Row("baseline", "0", "m1", 0.2, "m"),
        Row("baseline", "0", "m2", 0.4, "m"),
        Row("baseline", "0", "l1", 0.9, "l"),
    ]
    methods, seeds, mats, _ = score_matrices(rows)
    # 'l' has one benchmark (l1): no separate summary
    assert list(mats) == ["m1", "m2", "l1", "m", "average"]
    assert mats["m"][1][0, 0] == pytest.approx(0.3)
    assert mats["average"][1][0, 0] == pytest.approx(0.6)


def test_no_domains_average_over_benchmarks_and_missing_benchmark_is_noted():
    rows = [
        Row("baseline", "0", "x", 0.2),
        Row("baseline", "0", "y", 0.4),
        Row("baseline", "1", "x", 0.3),
    ]
    _, _, mats, notes = score_matrices(rows)
    assert set(mats) == {"x", "y", "average"}
    avg = mats["average"][1][0]
    assert avg[0] == pytest.approx(0.3) and math.isnan(avg[1])
    assert "left out of the average" in notes[-1]


def test_final_score_is_the_last_checkpoint():
    rows = [
        Row("baseline", "0", "b", 0.1, step=0),
        Row("baseline", "0", "b", 0.7, step=100),
        Row("baseline", "0", "b", 0.4, step=50),
    ]
    _, _, mats, _ = score_matrices(rows)
    assert mats["b"][1][0, 0] == 0.7


def test_ranking_and_tau_between_summaries():
    # math ranks a > b > c, logic reverses it; the average (equal means) ties all
    rows = []
    for s in range(3):
        for m, (math_s, logic_s) in {
            "baseline": (0.3, 0.3),
            "a": (0.5, 0.1),
            "b": (0.4, 0.2),
        }.items():
            rows += [Row(m, str(s), "math", math_s), Row(m, str(s), "logic", logic_s)]
    a = analyze(rows, "baseline")
    names = [s.name for s in a.summaries]
    assert names == ["math", "logic", "average"]
    assert a.tau[0, 1] == pytest.approx(-1.0)
    assert a.tau[0, 0] == pytest.approx(1.0)
    assert math.isnan(a.tau[0, 2])  # the average is constant


def test_results_do_not_depend_on_the_other_methods():
    base = [0.5, 0.52, 0.49, 0.51, 0.5]
    up = [0.53, 0.56, 0.5, 0.55, 0.52]
    one = analyze(rows_from({"baseline": base, "up": up}), "baseline", StatsOptions(n_boot=2000))
    two = analyze(
        rows_from({"baseline": base, "zz": [0.4] * 5, "up": up}),
        "baseline",
        StatsOptions(n_boot=2000),
    )
    c1 = one.primary.comparisons[0]
    c2 = next(c for c in two.primary.comparisons if c.method == "up")
    assert c1.ci == c2.ci and c1.p == c2.p


def test_baseline_first_and_unknown_baseline_is_an_error():
    rows = rows_from({"a": [0.1, 0.2], "baseline": [0.1, 0.2]})
    assert analyze(rows, "baseline").methods == ["baseline", "a"]
    with pytest.raises(ValueError, match="baseline 'nope' has no results"):
        analyze(rows, "nope")
