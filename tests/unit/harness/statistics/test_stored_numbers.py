"""What `analyze` stores for a report (the numbers reporting only formats): pooled SD and MDE
per summary, what the seed count allows, ranks, aggregates, learning curves, mixers' traces
and the other accuracy's means. Hand-worked values."""

import math

import numpy as np
import pytest

from dataflex_rl.harness.statistics import power
from dataflex_rl.harness.statistics.analysis import StatsOptions, analyze
from dataflex_rl.harness.statistics.curves import learning_curves, proportion_traces, token_curves
from dataflex_rl.harness.statistics.results import Row

OPTS = StatsOptions(n_boot=500)


def paired(diffs: dict[str, list[float]], base=0.5, extra=None):
    """Rows of one benchmark: the baseline at ``base + 0.01 s`` and each method at the
    baseline plus its diff of seed s."""
    seeds = len(next(iter(diffs.values())))
    rows = [Row("baseline", str(s), "b", base + 0.01 * s, extra=extra or {}) for s in range(seeds)]
    for m, d in diffs.items():
        rows += [
            Row(m, str(s), "b", base + 0.01 * s + d[s], extra=extra or {}) for s in range(seeds)
        ]
    return rows


def test_pooled_sd_and_mde_of_a_summary():
    # 8 seeds alternating mean ± d: sd = d·sqrt(8/7); a (d = 0.01) and b (d = 0.02) pool to
    # sqrt((0.01² + 0.02²)/2 · 8/7) = 0.016903; "same" (every run the baseline's, sd 0) says
    # nothing about noise and is left out of the pool, not of the Holm family (m = 3)
    rows = paired(
        {
            "a": [0.03, 0.01] * 4,
            "b": [0.04, 0.0] * 4,
            "same": [0.0] * 8,
        }
    )
    s = analyze(rows, "baseline", OPTS).primary
    assert s.pooled_sd == pytest.approx(0.016903, abs=1e-6)
    assert s.mde == pytest.approx(power.simulated_mde(0.016903085, 8, m=3))
    assert 0 < s.mde < math.inf


def test_seed_advice_at_three_seeds_and_the_seeds_a_point_needs():
    rows = paired({"a": [0.002, 0.0, 0.001], "b": [0.001, 0.002, 0.0]})
    plain = analyze(rows, "baseline", OPTS).advice
    # 2/2^3 = 0.25; one comparison needs 2/2^n <= 0.05: n = 6; the best of 2, <= 0.025: n = 7
    assert (plain.n, plain.m, plain.p_floor) == (3, 2, 0.25)
    assert (plain.min_seeds, plain.min_seeds_family) == (6, 7)
    assert plain.effect is None and plain.seeds_needed is None  # not asked: no simulation
    asked = analyze(rows, "baseline", OPTS, seeds_needed=True).advice
    # paired SD 0.001 (each a permutation of 0, 1, 2 thousandths): a point (0.01) is 10 SDs,
    # found already at the fewest seeds that can decide among 2
    assert asked.effect == 0.01 and asked.seeds_needed == 7


def test_no_point_is_asked_about_scores_outside_zero_one():
    rows = [Row(r.method, r.seed, r.benchmark, r.score * 100) for r in paired({"a": [1, 2, 3]})]
    a = analyze(rows, "baseline", OPTS, seeds_needed=True)
    assert not a.fractions and a.advice.effect is None and a.advice.seeds_needed is None


def test_ranks_aggregates_and_other_means():
    rows = []
    for s in range(3):
        for bench, base in (("x", 0.2), ("y", 0.6)):
            for m, gain in (("baseline", 0.0), ("up", 0.1), ("down", -0.1)):
                rows.append(Row(m, str(s), bench, base + gain, extra={"greedy": base}))
    a = analyze(rows, "baseline", OPTS)
    # per summary (x, y, average): up first, baseline second, down last
    assert a.methods == ["baseline", "up", "down"]
    assert a.ranks.tolist() == [[2, 1, 3]] * 3
    iqm = {g.method: g.iqm for g in a.aggregates}
    # IQM of up's 6 run × benchmark scores {0.3 ×3, 0.7 ×3}: one trimmed each side, mean of
    # 0.3, 0.3, 0.7, 0.7 = 0.5; down's: 0.1, 0.1, 0.5, 0.5 -> 0.3
    assert iqm == pytest.approx({"baseline": 0.4, "up": 0.5, "down": 0.3})
    assert set(a.profiles.curves) == {"baseline", "up", "down"}
    # greedy is the same 0.2 / 0.6 for every method: its average is 0.4
    assert a.extra_means["greedy"]["average"] == pytest.approx(
        {"baseline": 0.4, "up": 0.4, "down": 0.4}
    )


def test_learning_curves_mean_and_se_over_seeds():
    rows = [
        Row("m", "0", "x", 0.2, step=0),
        Row("m", "1", "x", 0.4, step=0),
        Row("m", "0", "y", 0.6, step=0),
        Row("m", "1", "y", 0.8, step=0),
        Row("m", "0", "x", 0.5, step=10),  # seed 1 lacks step 10 on x: not in the average
    ]
    c = learning_curves(rows, ["m"])
    assert list(c) == ["x", "y", "average"]
    # step 0 on x: mean 0.3, SE = sd/√2 = 0.1414/1.414 = 0.1; step 10: one seed, SE 0
    assert c["x"]["m"].steps == [0, 10]
    assert c["x"]["m"].mean == pytest.approx([0.3, 0.5])
    assert c["x"]["m"].se == pytest.approx([0.1, 0.0])
    # the average per run is (x + y)/2: 0.4 and 0.6 at step 0; step 10 has no full run
    assert c["average"]["m"].steps == [0] and c["average"]["m"].mean == pytest.approx([0.5])
    assert learning_curves([Row("m", "0", "x", 0.2)], ["m"]) == {}


def test_token_curves_interpolate_each_run_onto_common_costs():
    def run(m, seed, points):
        return [
            Row(m, seed, "x", score, step=i, extra={"generated_tokens": tokens})
            for i, (tokens, score) in enumerate(points)
        ]

    rows = (
        run("a", "0", [(0, 0.2), (100, 0.4)])
        + run("a", "1", [(0, 0.2), (120, 0.5)])
        + run("b", "0", [(0, 0.2), (60, 0.3), (90, 0.6)])
        + run("b", "1", [(0, 0.4), (200, 0.4)])
    )
    c = token_curves(rows, ["a", "b"], points=3)
    # common costs: from the latest first checkpoint (0) to the earliest last one (90)
    assert list(c) == ["x"] and c["x"]["a"].steps == [0, 45, 90]
    # a: seed 0 at 45 -> .2 + .2 * .45 = .29, at 90 -> .38; seed 1 at 45 -> .2 + .3 * .375
    # = .3125, at 90 -> .425
    assert c["x"]["a"].mean == pytest.approx([0.2, (0.29 + 0.3125) / 2, (0.38 + 0.425) / 2])
    # b: seed 0 at 45 -> .2 + .1 * .75 = .275, at 90 -> .6; seed 1 flat .4
    assert c["x"]["b"].mean == pytest.approx([0.3, (0.275 + 0.4) / 2, 0.5])
    assert c["x"]["b"].se == pytest.approx([0.1, 0.0625, 0.1])  # |y0 - y1| / 2
    assert token_curves([Row("m", "0", "x", 0.2, step=0)], ["m"]) == {}  # no costs


def test_proportion_traces_mean_over_seeds():
    rows = [
        {"method": "mix", "seed": "0", "step": 0, "domain": "d", "target": 0.2, "actual": 0.1},
        {"method": "mix", "seed": "1", "step": 0, "domain": "d", "target": 0.4, "actual": np.nan},
    ]
    t = proportion_traces(rows)["mix"]["d"]
    assert t.steps == [0] and t.target == pytest.approx([0.3]) and t.actual == pytest.approx([0.1])
