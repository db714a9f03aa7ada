"""benchmarks/async_staleness.py: the figures of a hand-made run folder, their pooling over
seeds, the cost ratios and the verdict families by hand, each arm's staleness as its own
engine setting, and the whole script on 1 seed x 2 steps through the harness."""

import csv
import json
import math

import pandas as pd
import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics.results import Row
from dataflex_rl.hosts.host import METRICS_FILE
from tests.benchmarks import load

ab = load("async_staleness")

D = "dataflex/async/domain/"


def _step(cost, stale, tl, gl, ts, gs, shares, targets, starved, dropped=None, requeued=None):
    r = {
        "engine/generation_cost_tokens": cost,
        "dataflex/async/staleness_mean": stale[0],
        "dataflex/async/staleness_max": stale[1],
        "dataflex/async/trained_length": tl,
        "dataflex/async/trained_solve_rate": ts,
        "engine/async_is_weight_mean": 0.9,
    }
    if gl is not None:  # a step that generated nothing logs no generated_*
        r["dataflex/async/generated_length"] = gl
        r["dataflex/async/generated_solve_rate"] = gs
    for d in shares:
        r[D + f"{d}/share_total"] = shares[d]
        r[D + f"{d}/target"] = targets[d]
        r[D + f"{d}/starved_steps"] = starved[d]
        r[D + f"{d}/trained"] = 1.0
    if dropped is not None:
        r["dataflex/admission/dropped"] = dropped
        r["dataflex/admission/requeued"] = requeued
        r["dataflex/admission/paused_domains"] = 0.0
    return r


def _write(path, steps):
    """``steps``: [(step, metrics)] written as train lines (a step may repeat: the last wins,
    as after a resume), then an eval line."""
    lines = [{"kind": "train", "step": s, **m} for s, m in steps]
    lines.append({"kind": "eval", "step": len(steps), "eval/mean/sampled": 0.3})
    path.mkdir(parents=True, exist_ok=True)
    (path / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_run_figures_by_hand(tmp_path):
    t = {"math": 0.25, "logic": 0.75}
    _write(
        tmp_path,
        [
            # step 1 is written twice: the first record is a run's before its resume
            (0, _step(500.0, (0.0, 0), 6.0, 7.0, 0.5, 0.25, {"math": 0.5, "logic": 0.5}, t,
                      {"math": 0, "logic": 0}, 4.0, 4.0)),
            (1, _step(999.0, (9.0, 9), 99.0, 99.0, 0.0, 0.0, {"math": 0.0, "logic": 1.0}, t,
                      {"math": 9, "logic": 9}, 99.0, 99.0)),
            (1, _step(100.0, (2.0, 3), 4.0, None, 0.25, None, {"math": 0.25, "logic": 0.75}, t,
                      {"math": 2, "logic": 0}, 0.0, 1.0)),
            (2, _step(100.0, (4.0, 5), 5.0, 6.0, 0.75, 0.5, {"math": 0.2, "logic": 0.8}, t,
                      {"math": 0, "logic": 1}, 2.0, 0.0)),
        ],
    )  # fmt: skip
    f = ab.run_figures(tmp_path)
    assert (f["steps"], f["cost"]) == (3, 700.0)
    assert f["staleness_mean"] == pytest.approx(2.0)  # (0 + 2 + 4) / 3
    assert f["staleness_max"] == 5
    assert f["trained_length"] == pytest.approx(5.0)  # (6 + 4 + 5) / 3
    assert f["generated_length"] == pytest.approx(6.5)  # steps 0 and 2 generated
    assert f["trained_solve_rate"] == pytest.approx(0.5)
    assert f["generated_solve_rate"] == pytest.approx(0.375)
    assert f["is_weight_mean"] == pytest.approx(0.9)
    assert f["dropped"] == 6.0 and f["requeued_last"] == 0.0
    # the last step's shares and targets, the largest starvation of each domain
    assert f["shares"] == {"math": 0.2, "logic": 0.8}
    assert f["targets"] == t
    assert f["starved"] == {"math": 2.0, "logic": 1.0}


def test_run_figures_of_a_synchronous_run_have_no_async_figures(tmp_path):
    _write(tmp_path, [(0, {"engine/generation_cost_tokens": 800.0})])
    f = ab.run_figures(tmp_path)
    assert (f["steps"], f["cost"]) == (1, 800.0)
    assert math.isnan(f["staleness_mean"]) and math.isnan(f["staleness_max"])
    assert math.isnan(f["dropped"]) and f["shares"] == {} and f["starved"] == {}


def _fig(steps, cost, shares, targets, starved, dropped=math.nan, **means):
    f = {
        "steps": steps,
        "cost": cost,
        "staleness_max": 4.0,
        "dropped": dropped,
        "requeued_last": 0.0,
        "shares": shares,
        "targets": targets,
        "starved": starved,
    }
    f.update({k: means.get(k, math.nan) for k in ab.STEP_MEANS})
    return f


def test_pooled_shares_gaps_and_starvation_by_hand():
    t = {"math": 0.25, "logic": 0.5, "science": 0.25}
    a = _fig(
        60, 56_100, {"math": 0.23, "logic": 0.52, "science": 0.25}, t,
        {"math": 1, "logic": 0, "science": 3}, 10.0, trained_length=5.0, generated_length=6.0,
    )  # fmt: skip
    b = _fig(
        70, 55_000, {"math": 0.26, "logic": 0.44, "science": 0.30}, t,
        {"math": 7, "logic": 1, "science": 0}, 30.0, trained_length=6.0, generated_length=7.0,
    )  # fmt: skip
    p = ab.pooled([a, b], tokens=56_000)
    assert p["steps_mean"] == 65 and p["cost_mean"] == 55_550
    assert p["steps_capped"] == 1  # b stopped at the step cap before 56,000 tokens
    assert p["trained_length"] == 5.5 and p["generated_length"] == 6.5
    assert p["dropped_per_run"] == 20.0
    assert p["domains"] == ["math", "logic", "science"]
    assert p["share_math"] == pytest.approx(0.245) and p["target_logic"] == 0.5
    # gaps in points: math 2 and 1, logic 2 and 6, science 0 and 5
    assert p["gap_math"] == pytest.approx(2.0)
    assert p["gap_logic"] == pytest.approx(6.0)
    assert p["gap_science"] == pytest.approx(5.0)
    assert p["max_gap_points"] == pytest.approx(6.0)
    assert p["starved_max"] == 7
    assert ab.pooled([], 1) == {}
    sync = ab.pooled([_fig(70, 56_000, {}, {}, {})], tokens=56_000)
    assert sync["steps_capped"] == 0 and math.isnan(sync["max_gap_points"])
    assert math.isnan(sync["dropped_per_run"])


def test_cost_rows_by_hand():
    # steady from step 2: k=0 seed 0 steps cost 1.0 each, seed 1 2.0 each; k=4 1.1 and 2.0;
    # the first two steps: k=0 1.0 / 2.0, k=4 3.0 / 4.0
    cpu = {
        (0, 0): [1.0, 1.0, 1.0, 1.0],
        (0, 1): [2.0, 2.0, 2.0, 2.0],
        (4, 0): [3.0, 3.0, 1.1, 1.1],
        (4, 1): [4.0, 4.0, 2.0, 2.0],
    }
    wall = {key: [2 * x for x in xs] for key, xs in cpu.items()}
    rows = ab.cost_rows(cpu, wall, [0, 4], steady_from=2, load=(1.5, 2.5))
    assert [r["k"] for r in rows] == [0, 4]
    r0, r4 = rows
    assert r0["steady_cpu_ms"] == pytest.approx(1500) and r0["ratio"] == 1.0
    assert r4["steady_cpu_ms"] == pytest.approx(1550)
    assert r4["ratio"] == pytest.approx(3.1 / 3.0)  # pooled: (1.1 + 1.1 + 2 + 2) / (6)
    assert (r4["ratio_seed_min"], r4["ratio_seed_max"]) == pytest.approx((1.0, 1.1))
    assert r4["first_cpu_ms"] == pytest.approx(3500)
    assert r4["first_ratio"] == pytest.approx(3.5 / 1.5)
    assert r4["wall_ratio"] == pytest.approx(3.1 / 3.0)
    assert r4["seeds"] == "0 1" and r4["steps"] == 4 and r4["load_after"] == 2.5


def _rows(method, scores):
    return [Row(method, str(s), "math", v, "math", 10) for s, v in enumerate(scores)]


def test_family_verdicts_compare_within_each_family_only():
    # 8 seeds; per strategy s: k0 the reference, k1 = k0 + 0.10 on every seed (better),
    # k2 = k0 (no difference); the baseline family at k0 compares dapo with baseline
    base = [0.20, 0.25, 0.30, 0.22, 0.28, 0.26, 0.24, 0.21]
    noise = [0.001, -0.002, 0.0, 0.003, -0.001, 0.002, -0.003, 0.0]
    rows = []
    for s, shift in (("baseline", 0.0), ("dapo", 0.05)):
        k0 = [b + shift for b in base]
        rows += _rows(f"{s}-k0", k0)
        rows += _rows(f"{s}-k1", [x + 0.10 + e for x, e in zip(k0, noise, strict=True)])
        rows += _rows(f"{s}-k2", [x + e for x, e in zip(k0, noise, strict=True)])
    from dataflex_rl.harness.statistics.analysis import StatsOptions

    members = {f"{s}-k{k}": (s, f"k{k}") for s in ("baseline", "dapo") for k in (0, 1, 2)}
    v = ab.family_verdicts(rows, members, "k0", StatsOptions())
    assert set(v) == {"baseline-k1", "baseline-k2", "dapo-k1", "dapo-k2"}
    assert v["dapo-k1"]["verdict"] == "better" and v["dapo-k1"]["delta"] == pytest.approx(10.0)
    assert v["baseline-k2"]["verdict"] == "no detectable difference"
    assert v["baseline-k2"]["delta"] == pytest.approx(0.0, abs=1e-9)
    by_k = {f"{s}-k{k}": (f"k{k}", s) for s in ("baseline", "dapo") for k in (0, 1, 2)}
    w = ab.family_verdicts(rows, by_k, "baseline", StatsOptions())
    assert set(w) == {"dapo-k0", "dapo-k1", "dapo-k2"}
    assert w["dapo-k0"]["delta"] == pytest.approx(5.0) and w["dapo-k0"]["verdict"] == "better"
    # Holm over 1 comparison per family: p = 2 / 2^8
    assert w["dapo-k0"]["p_holm"] == pytest.approx(2 / 256)
    # a family whose reference has no runs is left out; two seeds allow no verdict
    assert ab.family_verdicts(rows, {"dapo-k1": ("x", "k1")}, "k0", StatsOptions()) == {}
    few = [r for r in rows if r.seed in ("0", "1")]
    c = ab.family_verdicts(few, members, "k0", StatsOptions())["dapo-k1"]
    assert c["verdict"].startswith("not enough paired seeds (2; needs")
    assert not c["verdict_possible"]


def test_holm_across_every_family_by_hand():
    # raw p 0.01, 0.04, 0.03 and one row without the comparison: Holm over the 3 gives
    # 3 x 0.01 = 0.03, then max(0.03, 2 x 0.03) = 0.06 twice (the 0.04 one: max(0.06, 0.04))
    rows = [
        {"strategy": "dapo", "k": 1, "vs_k0_p": 0.01},
        {"strategy": "dapo", "k": 2, "vs_k0_p": 0.04},
        {"strategy": "dapo", "k": 4, "vs_k0_p": 0.03},
        {"strategy": "dapo", "k": 0},
    ]
    ab.holm_across(rows, "vs_k0_")
    assert [r.get("vs_k0_p_holm_all") for r in rows] == pytest.approx([0.03, 0.06, 0.06, None])
    ab.holm_across(rows, "vs_baseline_")  # no such comparison: nothing written
    assert not any("vs_baseline_p_holm_all" in r for r in rows)
    line = ab._smallest_across(rows, "vs_k0_", "against k = 0")
    assert line == "against k = 0 (3 comparisons): smallest raw p dapo at k = 1, 0.010, " + (
        "Holm over all 3 0.030"
    )


def test_arms_carry_their_staleness_as_engine_overrides(tmp_path):
    arms, k_of = ab.arms_of(["baseline", "dapo"], [0, 4], ["grid", "admission"], 4, 2)
    labels = [lab for lab, _ in arms]
    assert labels == ["baseline-k0", "dapo-k0", "baseline-k4", "dapo-k4", "drop-k4", "pace-k4"]
    assert k_of == {lab: (0 if lab.endswith("k0") else 4) for lab in labels}
    drop = dict(arms)["drop-k4"]
    assert drop["admission"] == {"max_staleness": 2, "past": "drop"}
    base = {
        "name": "quick",
        "strategies": ["baseline", "difffilter"],
        "seeds": 2,
        "controls": ["aa"],
        "engine": {"policy": "tiny", "asynchronous": {"staleness": 1}},
        "budget": {"steps": 200, "prompts_per_step": 16},
        "evaluation": {"metric": "sampled", "every": 100, "samples": 4},
    }
    data = ab.experiment_data(base, "x", arms, [0, 1, 2], 56_000, 210, per_domain=20)
    assert data["baseline"] == "baseline-k0" and "controls" not in data
    assert data["budget"] == {"steps": 210, "prompts_per_step": 16, "generated_tokens": 56_000}
    assert data["evaluation"] == {"metric": "sampled", "every": 0, "samples": 4, "per_domain": 20}
    assert data["engine"] == {"policy": "tiny", "threads": 1}
    assert base["engine"]["asynchronous"] == {"staleness": 1}  # the file's data is unchanged
    exp = ab.build_experiment(data, k_of, tmp_path)
    from dataflex_rl.harness.running.runner import plan

    runs = {(r.method, r.seed): r for r in plan(exp, tmp_path)}
    assert len(runs) == 18
    assert runs["dapo-k4", 1].config["asynchronous"]["staleness"] == 4
    assert runs["baseline-k0", 1].config["asynchronous"]["staleness"] == 0
    assert runs["pace-k4", 0].strategy["admission"]["past"] == "pace"
    assert runs["baseline-k4", 0].fingerprint != runs["baseline-k0", 0].fingerprint
    only = ab.arms_of(["baseline"], [0, 1], ["admission"], 1, 0)[0]
    assert [lab for lab, _ in only] == ["baseline-k1", "drop-k1", "pace-k1"]


def test_unknown_strategies_are_refused_before_any_run():
    assert ab.check_strategies(["dapo", "baseline", "dapo"]) == ["baseline", "dapo"]
    with pytest.raises(ConfigError, match="unknown strategy preset 'nope'"):
        ab.check_strategies(["nope"])


def test_the_script_end_to_end(tmp_path, capsys):
    # 1 seed x at most 2 steps: baseline and dapo at k 0 and 1, admission at k = 1 (6 engine
    # runs through the harness), and the cost part (2 trainers x 3 steps)
    argv = ["--seeds", "0", "--ks", "0", "1", "--strategies", "baseline", "dapo"]
    argv += ["--tokens", "1500", "--max-steps", "2", "--per-domain", "5"]
    argv += ["--admission-k", "1", "--max-staleness", "0", "--cost-seeds", "0"]
    argv += ["--cost-steps", "3", "--workers", "1", "--out", str(tmp_path), "--no-progress"]
    assert ab.main(argv) == 0
    grid = pd.read_csv(tmp_path / "async_staleness_grid.csv")
    assert list(grid["label"]) == ["baseline-k0", "dapo-k0", "baseline-k1", "dapo-k1"]
    assert (grid["runs"] == 1).all() and grid["failed"].isna().all()
    assert (grid["steps_mean"] <= 2).all()
    assert grid.loc[2, "staleness_max"] >= 0 and math.isnan(grid.loc[0, "staleness_mean"])
    assert grid.loc[3, "vs_k0_verdict"].startswith("not enough paired seeds (1; needs")
    assert grid.loc[1, "vs_baseline_verdict"].startswith("not enough paired seeds (1; needs")
    assert grid.loc[0, "vs_k0_verdict"] == "(reference)"
    with open(tmp_path / "async_staleness_admission.csv") as f:
        adm = list(csv.DictReader(f))
    assert [r["arm"] for r in adm] == ["none", "drop", "pace"]
    assert {"share_math", "target_logic", "gap_science"} <= set(adm[0])
    assert adm[0]["label"] == "baseline-k1" and adm[1]["max_staleness"] == "0"
    assert 0 <= float(adm[2]["trained_length"]) <= 10
    cost = pd.read_csv(tmp_path / "async_staleness_cost.csv")
    assert list(cost["k"]) == [0, 1] and cost.loc[0, "ratio"] == 1.0
    assert cost.loc[1, "steady_from"] == 2 and cost.loc[1, "ratio"] > 0
    out = capsys.readouterr().out
    assert "| dapo | 1 | 1 |" in out and "| drop (max_staleness 0) | 1 |" in out
    assert (tmp_path / "async_staleness.md").read_text().startswith("# Data strategies under")
    assert (tmp_path / "equal_tokens-1500" / "report.md").exists()
    # a rerun reuses the finished runs
    assert ab.main([*argv, "--parts", "grid"]) == 0
    assert "4 done (4 reused)" in (tmp_path / "async_staleness.md").read_text()
