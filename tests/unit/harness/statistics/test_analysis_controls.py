"""Controls (own Holm family, out of the rankings) and the pairing correlation in `analyze`."""

import math

import numpy as np
import pytest

from dataflex_rl.harness.statistics import stats
from dataflex_rl.harness.statistics.analysis import (
    NO_DIFF,
    TOO_FEW,
    WORSE,
    StatsOptions,
    analyze,
    pearson,
)
from dataflex_rl.harness.statistics.results import Row

OPTS = StatsOptions(n_boot=2000)


def rows_from(table: dict, benchmark="b"):
    return [
        Row(m, str(i), benchmark, v)
        for m, vals in table.items()
        for i, v in enumerate(vals)
        if v is not None
    ]


def eight_seed_table():
    base = np.linspace(0.4, 0.6, 8)
    noise = np.array([0.01, -0.01, 0.005, 0.0, 0.01, -0.005, 0.002, 0.0])
    return {
        "baseline": list(base),
        "up": list(base + 0.05 + noise),
        "aa": list(base + noise[::-1]),
        "harm": list(base - 0.05 + noise),
    }


def test_controls_do_not_weaken_the_real_family():
    t = eight_seed_table()
    alone = analyze(rows_from({"baseline": t["baseline"], "up": t["up"]}), "baseline", OPTS)
    both = analyze(rows_from(t), "baseline", OPTS, controls={"aa": "same", "harm": "worse"})
    c1, c2 = alone.primary.comparisons[0], both.primary.comparisons[0]
    # 'up' alone in its family: p = 2/256, Holm x1, level 0.05 -- with or without controls
    assert [c.method for c in both.primary.comparisons] == ["up"]
    assert (c2.p_holm, c2.level, c2.corrected_ci) == (c1.p_holm, c1.level, c1.corrected_ci)
    assert c2.p_holm == pytest.approx(2 / 256)
    # the controls: each a family of one; harm has all 8 deltas negative, p = 2/256, Holm x1
    ctrl = {c.method: c for c in both.primary.controls}
    assert ctrl["harm"].p_holm == pytest.approx(2 / 256) and ctrl["harm"].level == 0.05
    assert (ctrl["aa"].verdict, ctrl["harm"].verdict) == (NO_DIFF, WORSE)
    assert ctrl["aa"].control_passed and ctrl["harm"].control_passed
    assert c2.control_passed is None


def test_controls_are_out_of_methods_and_rankings():
    a = analyze(
        rows_from(eight_seed_table()), "baseline", OPTS, controls={"aa": "same", "harm": "worse"}
    )
    assert a.methods == ["baseline", "up"] and a.controls == {"aa": "same", "harm": "worse"}
    assert [m.method for m in a.primary.methods] == ["baseline", "up"]
    assert [m.method for m in a.primary.control_methods] == ["aa", "harm"]


def test_a_failed_control_is_reported_as_failed():
    # the "A/A" arm is really the improved one, the harm arm is marked "same": both fail
    a = analyze(
        rows_from(eight_seed_table()), "baseline", OPTS, controls={"up": "same", "harm": "same"}
    )
    assert all(c.control_passed is False for c in a.primary.controls)


def test_too_few_seeds_leave_a_control_unchecked():
    a = analyze(
        rows_from({"baseline": [0.5, 0.6], "aa": [0.5, None]}),
        "baseline",
        OPTS,
        controls={"aa": "same"},
    )
    c = a.primary.controls[0]
    assert c.verdict == TOO_FEW and c.control_passed is None


@pytest.mark.parametrize(
    "controls, match",
    [
        ({"nope": "same"}, "has no results"),
        ({"up": "better"}, "required outcome"),
        ({"baseline": "same"}, "is the baseline"),
    ],
)
def test_bad_controls_are_errors(controls, match):
    with pytest.raises(ValueError, match=match):
        analyze(rows_from(eight_seed_table()), "baseline", OPTS, controls=controls)


def test_pairing_correlation():
    t = eight_seed_table()
    # method = baseline + constant: perfectly correlated
    c = analyze(
        rows_from({"baseline": t["baseline"], "up": [v + 0.1 for v in t["baseline"]]}),
        "baseline",
        OPTS,
    ).primary.comparisons[0]
    assert c.corr == pytest.approx(1.0)
    x, y = np.array([0.1, 0.4, 0.2, 0.3]), np.array([0.2, 0.1, 0.4, 0.3])
    # hand: centred x = [-.15, .15, -.05, .05], y = [-.05, -.15, .15, .05]; sum xy =
    # .0075 - .0225 - .0075 + .0025 = -.02; sum x^2 = sum y^2 = .05 -> r = -0.4
    assert pearson(x, y) == pytest.approx(-0.4)
    # fewer than 3 pairs or a constant side: undefined
    assert math.isnan(pearson(x[:2], y[:2])) and math.isnan(pearson(x, np.ones(4)))


def test_a_harm_is_detectable_at_six_seeds_beside_an_aa_control():
    # 6 seeds, harm 2 points below the baseline on every seed: exact p = 2/64 = 0.031 <= 0.05;
    # pooled with the A/A arm in one Holm family it would be 0.0625 and never "worse"
    base = [0.50, 0.52, 0.48, 0.51, 0.49, 0.50]
    table = {
        "baseline": base,
        "aa": [b + d for b, d in zip(base, [0.01, -0.01, 0.02, -0.02, 0, 0.01])],
        "harm": [b - 0.02 - 0.001 * i for i, b in enumerate(base)],
    }
    a = analyze(rows_from(table), "baseline", OPTS, controls={"aa": "same", "harm": "worse"})
    ctrl = {c.method: c for c in a.primary.controls}
    assert ctrl["harm"].p == pytest.approx(2 / 64) and ctrl["harm"].verdict == WORSE
    assert ctrl["harm"].control_passed and ctrl["aa"].control_passed
    # at 5 seeds the exact test cannot reach 0.05 (2/32): the harm control is untested
    five = analyze(
        rows_from({k: v[:5] for k, v in table.items()}),
        "baseline",
        OPTS,
        controls={"aa": "same", "harm": "worse"},
    )
    assert {c.method: c for c in five.primary.controls}["harm"].control_passed is None


def test_at_three_seeds_both_controls_are_untested_and_say_how_many_seeds_they_need():
    # 3 seeds: the exact test's floor is 2/2^3 = 0.25 > 0.05, so the A/A arm's "no detectable
    # difference" is no pass and the planted harm (5 points below on every seed) no failure.
    # A control is a family of one: 2/2^6 = 0.031 <= 0.05 < 2/2^5 = 0.0625, it needs 6
    t = {k: v[:3] for k, v in eight_seed_table().items()}
    a = analyze(rows_from(t), "baseline", OPTS, controls={"aa": "same", "harm": "worse"})
    ctrl = {c.method: c for c in a.primary.controls}
    assert (ctrl["aa"].verdict, ctrl["harm"].verdict) == (NO_DIFF, NO_DIFF)
    assert ctrl["aa"].control_passed is None and ctrl["harm"].control_passed is None
    assert ctrl["aa"].seeds_for_verdict == ctrl["harm"].seeds_for_verdict == 6
    want = "untested (3 seeds: no verdict possible; needs 6)"
    assert ctrl["aa"].control_status == ctrl["harm"].control_status == want
    # the real family of one ('up') needs 6 too; at 8 seeds the same arms pass
    assert a.primary.comparisons[0].seeds_for_verdict == 6
    eight = analyze(
        rows_from(eight_seed_table()), "baseline", OPTS, {"aa": "same", "harm": "worse"}
    )
    assert [c.control_status for c in eight.primary.controls] == ["passed", "passed"]
    wrong = analyze(rows_from(eight_seed_table()), "baseline", OPTS, {"up": "same"})
    assert wrong.primary.controls[0].control_status == "FAILED"
    assert eight.primary.comparisons[0].control_status == ""


def test_seeds_for_verdict_follows_the_holm_floor():
    # one comparison: 2/2^6 = 0.031 <= 0.05 < 2/2^5 = 0.0625 -> 6; three under Holm: the floor
    # is 3 · 2/2^n, 3 · 2/2^7 = 0.047 <= 0.05 < 3 · 2/2^6 = 0.094 -> 7; twelve: 12 · 2/2^9 =
    # 0.047 -> 9; at α = 0.01 one needs 8 (2/2^8 = 0.0078 <= 0.01 < 2/2^7 = 0.0156)
    assert [stats.seeds_for_verdict(m) for m in (1, 2, 3, 12)] == [6, 7, 7, 9]
    assert stats.seeds_for_verdict(1, alpha=0.01) == 8
    # exact up to 16 pairs (2/2^16 = 3.1e-5 > 1e-5); above, random sign flips whose floor is
    # 1/(1 + n_perm) = 0.0099: no seed count reaches α = 1e-5
    assert stats.seeds_for_verdict(1, alpha=1e-5, n_perm=100) is None
    a = analyze(
        rows_from({k: v[:3] for k, v in eight_seed_table().items()}), "baseline", OPTS
    )  # baseline + up, aa, harm as real methods: Holm over 3
    assert {c.seeds_for_verdict for c in a.primary.comparisons} == {7}
