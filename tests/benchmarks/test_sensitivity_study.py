"""benchmarks/sensitivity_study.py (behind benchmarks/sensitivity.py): gains over the warm start,
issue 11's targets, controls' seeds needed, CPU-minutes per decided verdict. Hand-worked numbers, no
engine."""

import json
import math

import pytest

from dataflex_rl.harness.running.runner import Execution
from dataflex_rl.harness.statistics import power
from dataflex_rl.harness.statistics.results import Row
from tests.benchmarks import load

sens = load("sensitivity_study")

DATA = {
    "name": "t",
    "strategies": ["difffilter", "baseline", "maxvar"],
    "seeds": 2,
    "engine": {"tasks": {"domains": ["math", "logic"]}},
    "budget": {"steps": 40, "prompts_per_step": 4, "samples_per_prompt": 2},
    "evaluation": {"every": 0, "per_domain": 5},
    "statistics": {"n_boot": 1000},
    "controls": [{"drop_half": {"fraction": 0.25}}],
}


def rows(method, start_end):
    """Rows of ``method``: {(seed, domain): (step-0 score, final score)}, with a middle
    checkpoint at step 5 that must not count as either end."""
    out = []
    for (seed, d), (first, last) in start_end.items():
        out += [
            Row(method, seed, d, first, d, 0),
            Row(method, seed, d, 0.99, d, 5),
            Row(method, seed, d, last, d, 10),
        ]
    return out


GAINS = rows(
    "b",
    {
        ("0", "math"): (0.20, 0.30),
        ("1", "math"): (0.25, 0.31),
        ("2", "math"): (0.20, 0.28),
        ("0", "logic"): (0.50, 0.54),
        ("1", "logic"): (0.50, 0.50),
        ("2", "logic"): (0.40, 0.48),
    },
)


def test_gain_table_by_hand():
    # math +0.10, +0.06, +0.08: mean 0.08, SD sqrt((0.02² + 0.02² + 0) / 2) = 0.02, min 0.06
    # logic +0.04, 0, +0.08: mean 0.04, SD 0.04, min 0
    # average per seed 0.07, 0.03, 0.08: mean 0.06, SD sqrt((0.01² + 0.03² + 0.02²) / 2)
    table = sens.gain_table(GAINS + rows("other", {("0", "math"): (0.0, 1.0)}), "b")
    by = {g.summary: g for g in table}
    assert [g.summary for g in table] == ["math", "logic", "average"]
    assert (by["math"].n, by["math"].mean, by["math"].sd, by["math"].min) == pytest.approx(
        (3, 0.08, 0.02, 0.06)
    )
    assert (by["logic"].mean, by["logic"].sd, by["logic"].min) == pytest.approx(
        (0.04, 0.04, 0.0), abs=1e-12
    )
    sd = math.sqrt((0.01**2 + 0.03**2 + 0.02**2) / 2)
    assert (by["average"].mean, by["average"].sd, by["average"].min) == pytest.approx(
        (0.06, sd, 0.03)
    )
    assert by["average"].sd_over_gain == pytest.approx(sd / 0.06)  # 0.441


def test_a_seed_lacking_a_domain_is_left_out_of_the_average():
    partial = GAINS + rows("b", {("3", "math"): (0.0, 0.5)})
    by = {g.summary: g for g in sens.gain_table(partial, "b")}
    assert by["math"].n == 4 and by["average"].n == 3
    assert by["average"].mean == pytest.approx(0.06)


def test_gain_checks_by_hand():
    # average +6 points < 8: FAIL; worst domain logic +4 ≥ 3: PASS;
    # SD 2.65 points > 6/3 = 2: FAIL
    checks = sens.gain_checks(sens.gain_table(GAINS, "b"))
    assert [c.passed for c in checks] == [False, True, False]
    assert checks[1].value == pytest.approx(0.04)
    assert checks[2].bound == pytest.approx(0.02)


def test_sd_target_is_not_measured_without_a_gain():
    flat = rows("b", {("0", "math"): (0.5, 0.5), ("1", "math"): (0.5, 0.5)})
    checks = sens.gain_checks(sens.gain_table(flat, "b"))
    assert [c.passed for c in checks] == [False, False, None]


def test_checks_at_the_bounds_and_without_values():
    # mean of 100 and 140 CPU-seconds is 120: exactly the ceiling
    assert [c.passed for c in sens.cost_checks([100.0, 140.0], 200)] == [True, True]
    assert [c.passed for c in sens.cost_checks([130.0], 201)] == [False, False]
    assert sens.cost_checks([], 10)[0].passed is None
    assert sens.Check("x", math.nan, 1.0, True).passed is None


def test_cpu_minutes_per_verdict_and_decided_verdicts():
    def c(label, outcome, verdict):
        return sens.ControlResult(label, outcome, 6, -0.1, 0.01, 0.5, verdict, None, None, None)

    controls = [
        c("aa_control", "same", "no detectable difference"),
        c("no_update_control", "worse", "worse"),
        c("half_lr_control", "worse", "no detectable difference"),
        c("drop_half_control", "worse", "worse"),
    ]
    assert sens.decided_verdicts(controls) == 2  # the A/A's non-verdict does not count
    assert sens.cpu_minutes_per_verdict(360.0, 2) == 3.0  # 6 CPU-minutes / 2
    assert sens.cpu_minutes_per_verdict(360.0, 0) == math.inf


def test_sensitivity_experiment_is_the_baseline_and_every_control():
    exp, m = sens.sensitivity_experiment(DATA, seeds=6, steps=3)
    # the file's own control first, with its parameters; the others added once each
    assert exp.labels == [
        "baseline",
        "drop_half_control",
        "aa_control",
        "no_update_control",
        "half_lr_control",
    ]
    assert m == 2  # difffilter and maxvar against the baseline
    assert exp.seeds == tuple(range(6)) and exp.budget.steps == 3
    assert exp.budget.prompts_per_step == 4
    assert {c.name: c.params for c in exp.controls}["drop_half"] == {"fraction": 0.25}
    kept, _ = sens.sensitivity_experiment(DATA)
    assert kept.seeds == (0, 1) and kept.budget.steps == 40


def _run(method, seed, finals, cpu=30.0):
    """A finished run as `runner.execute` returns it: step 0 at 0.5 on both domains."""
    evals = [
        {"step": 0, "math/greedy": 0.5, "logic/greedy": 0.5},
        {"step": 40, **{f"{d}/greedy": v for d, v in finals.items()}},
    ]
    return {
        "status": "done",
        "method": method,
        "seed": seed,
        "evals": evals,
        "summary": {"cpu_seconds": cpu},
    }


def test_measure_on_hand_made_runs():
    exp, m = sens.sensitivity_experiment(DATA, seeds=6)
    results = []
    for s in range(6):
        base = {"math": 0.60 + 0.01 * s, "logic": 0.55 + 0.01 * s}
        sign = 1 if s % 2 == 0 else -1
        results += [
            _run("baseline", s, base),
            # A/A: ±1 point around the baseline, summing to 0: p = 1
            _run("aa_control", s, {d: v + 0.01 * sign for d, v in base.items()}),
            # no update: stays at 0.5, below the baseline on every seed: worse at 6 seeds
            _run("no_update_control", s, {"math": 0.5, "logic": 0.5}),
            # half_lr: -1 / +2 points alternately: no detectable difference (must be worse)
            _run(
                "half_lr_control",
                s,
                {d: v + (-0.01 if sign > 0 else 0.02) for d, v in base.items()},
            ),
            # drop_half: 5 to 5.5 points below on every seed: worse
            _run("drop_half_control", s, {d: v - 0.05 - 0.001 * s for d, v in base.items()}),
        ]
    report = sens.measure(exp, Execution(results), m)
    assert list(report["metrics"]) == ["greedy"]  # no sampled accuracy in these runs
    ctrl = {c.label: c for c in report["metrics"]["greedy"]["controls"]}
    order = ["aa_control", "no_update_control", "half_lr_control", "drop_half_control"]
    assert [ctrl[k].verdict for k in order] == [
        "no detectable difference",
        "worse",
        "no detectable difference",
        "worse",
    ]
    assert [ctrl[k].passed for k in order] == [True, True, False, True]
    assert [ctrl[k].status for k in order] == ["passed", "passed", "FAILED", "passed"]
    # the same arms at their first 3 seeds: no verdict possible (2/2^3 > 0.05), none passes
    # or fails; a control alone needs 6 seeds (2/2^6 = 0.031 <= 0.05 < 2/2^5)
    three = sens.measure(exp, Execution([r for r in results if r["seed"] < 3]), m)
    statuses = {c.status for c in three["metrics"]["greedy"]["controls"]}
    assert statuses == {"untested (3 seeds: no verdict possible; needs 6)"}
    assert {c.passed for c in three["metrics"]["greedy"]["controls"]} == {None}
    assert ctrl["aa_control"].seeds_needed is None and ctrl["aa_control"].note == "A/A"
    # mean +0.5 points: no harm to detect, so no seeds-needed figure
    assert ctrl["half_lr_control"].seeds_needed is None
    assert ctrl["half_lr_control"].note == "no harm seen"
    drop = ctrl["drop_half_control"]
    assert drop.delta == pytest.approx(-0.0525)
    assert drop.seeds_needed == power.simulated_seeds_needed(drop.sd, 0.0525, m=1)
    assert drop.seeds_needed_family == power.simulated_seeds_needed(drop.sd, 0.0525, m=2)
    # 30 runs × 30 CPU-seconds = 15 CPU-minutes, 2 harms called worse: 7.5 per verdict
    assert report["cpu_seconds_total"] == 900.0 and report["decided"] == 2
    assert report["cpu_minutes_per_verdict"] == pytest.approx(7.5)
    # the baseline gains 0.60 + 0.01 s - 0.5 (math) and 0.55 + 0.01 s - 0.5 (logic)
    avg = report["metrics"]["greedy"]["gains"][-1]
    assert avg.mean == pytest.approx(0.075 + 0.025)
    json.dumps(sens.to_json(report))  # every value is JSON data
