"""``compare --until-decided`` (harness/running/until_decided.py) with a stand-in engine and a
stand-in sequential rule: rounds of seeds, stopping, resume, controls, sequential.json and the
report."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running import until_decided
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.until_decided import (
    next_seeds,
    paired_differences,
    run_until_decided,
)
from dataflex_rl.harness.statistics.results import Row

TRAIN = "tests.unit.harness.running.test_until_decided:noisy_train"
#: true effect per method; each seed adds +-0.01 of noise to every method but the baseline
EFFECT = {
    "baseline": 0.0,
    "difffilter": 0.05,
    "maxvar": -0.03,
    "aa_control": 0.0,
    "no_update_control": -0.1,
}


def noisy_train(config, strategy, *, seed, out_dir, resume):
    """Final score = 0.5 + effect + noise(seed) at the last step, 0.5 at step 0."""
    steps = config.steps
    name, out = strategy["name"], Path(out_dir)
    with (out.parents[2] / "calls.log").open("a") as f:
        f.write(f"{name} {seed}\n")
    noise = 0.0 if name == "baseline" else 0.01 * (1 if seed % 2 else -1)
    lines = [
        {
            "kind": "eval",
            "step": s,
            **{
                f"eval/{d}/greedy": 0.5 + (EFFECT[name] + noise if s == steps else 0.0)
                for d in config.tasks.domains
            },
        }
        for s in (0, steps)
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return {"strategy": name, "seed": seed}


@dataclass
class Result:
    verdict: str
    n: int
    low: float
    high: float


def stand_in_rule(decide_at: int | dict = 4, decide_controls: bool = True):
    """Decides a comparison once it has ``decide_at`` pairs (per label, when a mapping; sign of
    the mean), else undecided; records every call."""
    calls = []

    def rule(diffs, *, alpha, margin, bound):
        calls.append({k: v.tolist() for k, v in diffs.items()})
        out = {}
        for k, d in diffs.items():
            m = float(d.mean()) if d.size else 0.0
            at = decide_at.get(k, 99) if isinstance(decide_at, dict) else decide_at
            decided = d.size >= at and (decide_controls or not k.endswith("_control"))
            verdict = ("better" if m > 0 else "worse") if decided else "undecided"
            out[k] = Result(verdict, int(d.size), m - 0.01, m + 0.01)
        return out

    rule.calls = calls
    return rule


def experiment(**patch):
    return parse_experiment(
        {
            "name": "seq",
            "strategies": ["baseline", "difffilter"],
            "seeds": 2,
            "engine": {"tasks": {"domains": ["math", "logic"]}},
            "budget": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
            "evaluation": {"every": 0, "per_domain": 2},
            "statistics": {"n_boot": 200},
            **patch,
        }
    )


@pytest.fixture(autouse=True)
def no_simulation(monkeypatch):
    """The fixed-n design's seed count (a power simulation) is not under test here."""
    monkeypatch.setattr(until_decided, "simulated_seeds_needed", lambda sd, effect, **kw: 9)


def run(tmp_path, exp, rule, **kw):
    lines = []
    res, seq = run_until_decided(
        exp,
        tmp_path,
        train_fn=TRAIN,
        rule=rule,
        workers=1,
        progress=False,
        plots=False,
        echo=lines.append,
        **kw,
    )
    return res, seq, lines


def test_stops_when_every_comparison_is_decided(tmp_path):
    rule = stand_in_rule(decide_at=4)
    res, seq, lines = run(tmp_path, experiment(), rule, max_seeds=10, round_size=2)
    assert [r.seeds for r in seq.rounds] == [[0, 1], [0, 1, 2, 3]]
    assert seq.stopped == "every comparison decided"
    assert lines == [
        "round 1, 2 seeds: difffilter undecided (n=2)",
        "round 2, 4 seeds: difffilter better (n=4)",
    ]
    # diffs in seed order: 0.05 -+ 0.01
    assert rule.calls[-1]["difffilter"] == pytest.approx([0.04, 0.06, 0.04, 0.06])
    # each run ran once: round 2 reused round 1's runs
    ran = (tmp_path / "calls.log").read_text().splitlines()
    assert sorted(ran) == sorted(f"{m} {s}" for m in ("baseline", "difffilter") for s in range(4))
    data = json.loads((tmp_path / "sequential.json").read_text())
    assert data["seeds_used"] == 4 and data["fixed_n"] == 9 and data["seeds_saved"] == 5
    assert data["rounds"][1]["verdicts"]["difffilter"]["verdict"] == "better"
    assert data["pooled_sd"] == pytest.approx(np.std([0.04, 0.06, 0.04, 0.06], ddof=1))
    report = (tmp_path / "report.md").read_text()
    assert "## Sequential comparison (--until-decided)" in report
    assert "| 2 | 4 | better [+4.0, +6.0] |" in report
    assert "needs 9 seeds: 5 seed(s) saved." in report
    assert json.loads((tmp_path / "experiment.json").read_text())["seeds"] == [0, 1, 2, 3]
    assert res.analysis is not None and res.analysis.seeds == ["0", "1", "2", "3"]


def test_stops_at_max_seeds_with_a_short_last_round(tmp_path):
    res, seq, lines = run(
        tmp_path, experiment(), stand_in_rule(decide_at=99), max_seeds=3, round_size=2
    )
    assert [len(r.seeds) for r in seq.rounds] == [2, 3]
    assert seq.stopped == "--max-seeds 3 reached" and seq.seeds == [0, 1, 2]
    assert all("undecided" in line for line in lines)


def test_controls_run_every_round_but_do_not_keep_the_loop_going(tmp_path):
    rule = stand_in_rule(decide_at=2, decide_controls=False)
    exp = experiment(controls=["aa", "no_update"])
    res, seq, lines = run(tmp_path, exp, rule, max_seeds=8)
    assert len(seq.rounds) == 1 and seq.stopped == "every comparison decided"
    assert seq.comparisons == ["difffilter"]
    assert seq.controls == ["aa_control", "no_update_control"]
    # two families: the strategies', then the controls'
    assert [sorted(c) for c in rule.calls] == [["difffilter"], ["aa_control", "no_update_control"]]
    assert lines == [
        "round 1, 2 seeds: difffilter better (n=2); controls: aa_control "
        "undecided (n=2), no_update_control undecided (n=2)"
    ]


def test_later_rounds_run_only_the_baseline_undecided_arms_and_controls(tmp_path):
    # difffilter is decided with 2 pairs (round 1), maxvar with 6 (round 3); aa runs every round
    rule = stand_in_rule(decide_at={"difffilter": 2, "maxvar": 6}, decide_controls=False)
    exp = experiment(strategies=["baseline", "difffilter", "maxvar"], controls=["aa"])
    res, seq, lines = run(tmp_path, exp, rule, max_seeds=10, round_size=2)
    assert [len(r.seeds) for r in seq.rounds] == [2, 4, 6]
    assert seq.decided_at == {"difffilter": 1, "maxvar": 3}
    ran = sorted((tmp_path / "calls.log").read_text().splitlines())
    expected = [f"{m} {s}" for m in ("baseline", "maxvar", "aa_control") for s in range(6)]
    assert ran == sorted(expected + ["difffilter 0", "difffilter 1"])
    # the decided comparison keeps its verdict (from 2 pairs) and is not given to the rule again
    # with more pairs: the rule sees difffilter's 2 differences in every round
    assert [len(c["difffilter"]) for c in rule.calls if "difffilter" in c] == [2, 2, 2]
    assert seq.rounds[-1].verdicts["difffilter"] == seq.rounds[0].verdicts["difffilter"]
    assert lines[1] == (
        "round 2, 4 seeds: difffilter better (n=2, stopped at round 1), maxvar undecided (n=4); "
        "controls: aa_control undecided (n=4)"
    )
    # 4 arms x 6 seeds had every round run every arm; difffilter ran 2 of its 6
    assert (seq.runs_used, seq.runs_all_arms) == (20, 24)
    assert seq.seeds_of["difffilter"] == [0, 1] and seq.seeds_of["aa_control"] == list(range(6))
    data = json.loads((tmp_path / "sequential.json").read_text())
    assert data["decided_at"] == {"difffilter": 1, "maxvar": 3} and data["runs_used"] == 20
    report = (tmp_path / "report.md").read_text()
    assert (
        "Decided, then given no more seeds: difffilter at round 1 (2 seeds), maxvar at " in report
    )
    assert "Runs: 20, against 24 had every round run every arm: 4 saved." in report
    # one section, in the report (before its provenance), the same in report.html: rounds 2 and
    # 3 say difffilter stopped at round 1, round 3 that maxvar was decided then
    assert report.count("## Sequential comparison (--until-decided)") == 1
    assert report.index("## Verdicts") < report.index("## Sequential") < report.index("## How")
    assert report.count("| better, stopped at round 1 |") == 2
    page = (tmp_path / "report.html").read_text()
    seq_html = page.split('<section id="sequential">')[1].split("</section>")[0]
    assert seq_html.startswith("<h2>Sequential comparison (--until-decided)</h2>")
    assert seq_html.count("<td>better, stopped at round 1</td>") == 2
    assert "difffilter at round 1 (2 seeds), maxvar at round 3 (6 seeds)" in seq_html
    assert "Runs: 20, against 24 had every round run every arm: 4 saved." in seq_html
    # results.csv holds exactly the runs that ran (difffilter: seeds 0 and 1 only)
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert sorted({r["seed"] for r in rows if r["method"] == "difffilter"}) == ["0", "1"]
    assert sorted({r["seed"] for r in rows if r["method"] == "maxvar"}, key=int) == [
        str(s) for s in range(6)
    ]


def test_only_controls_are_the_comparisons(tmp_path):
    exp = experiment(strategies=["baseline"], controls=["no_update"])
    res, seq, lines = run(tmp_path, exp, stand_in_rule(decide_at=2), max_seeds=6)
    assert seq.comparisons == ["no_update_control"] and seq.controls == []
    assert (
        len(seq.seeds) == 2 and seq.rounds[-1].verdicts["no_update_control"]["verdict"] == "worse"
    )


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match=r"--max-seeds 1: below the experiment's 2 seeds"):
        run(tmp_path, experiment(), stand_in_rule(), max_seeds=1)
    with pytest.raises(ConfigError, match=r"--round: must be >= 1"):
        run(tmp_path, experiment(), stand_in_rule(), max_seeds=4, round_size=0)
    with pytest.raises(ConfigError, match=r"--margin: must be > 0"):
        run(tmp_path, experiment(), stand_in_rule(), max_seeds=4, margin=0.0)


def test_next_seeds_and_paired_differences():
    assert next_seeds([0, 5, 2], 3) == [1, 3, 4]
    assert next_seeds([], 2) == [0, 1]
    rows = [
        Row(m, s, d, v, d, 1)
        for m, s, d, v in [
            ("baseline", "3", "math", 0.5),
            ("baseline", "3", "logic", 0.3),
            ("baseline", "0", "math", 0.4),
            ("baseline", "0", "logic", 0.4),
            ("x", "3", "math", 0.7),
            ("x", "3", "logic", 0.5),
            ("x", "0", "math", 0.4),
            ("x", "0", "logic", 0.2),
        ]
    ]
    d = paired_differences(rows, "baseline", ["x", "missing"], [3, 0])
    # seed 3: (0.7 + 0.5) / 2 - (0.5 + 0.3) / 2 = 0.2; seed 0: 0.3 - 0.4 = -0.1
    assert d["x"] == pytest.approx([0.2, -0.1]) and d["missing"].size == 0


def test_cli_until_decided(tmp_path, monkeypatch, capsys):
    from dataflex_rl.harness.running.compare import run_compare
    from tests.unit.harness.running.test_control_arms import run_cli

    monkeypatch.setattr(until_decided, "sequential_verdicts", stand_in_rule(decide_at=2))
    monkeypatch.setattr(
        until_decided, "run_compare", lambda *a, train_fn, **k: run_compare(*a, train_fn=TRAIN, **k)
    )  # the command line always runs the real engine
    path = tmp_path / "e.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "seq",
                "strategies": ["baseline", "difffilter"],
                "seeds": 2,
                "engine": {"tasks": {"domains": ["math", "logic"]}},
                "budget": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
                "evaluation": {"every": 0, "per_domain": 2},
                "statistics": {"n_boot": 200},
            }
        )
    )
    assert (
        run_cli(
            [
                "compare",
                str(path),
                "--out",
                str(tmp_path / "o"),
                "--no-progress",
                "--no-plots",
                "--until-decided",
                "--max-seeds",
                "6",
                "--round",
                "2",
                "--margin",
                "0.01",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "round 1, 2 seeds: difffilter better (n=2)" in out
    assert "stopped: every comparison decided after 2 seeds (a fixed-n design needs 9)" in out
    assert json.loads((tmp_path / "o" / "sequential.json").read_text())["margin"] == 0.01


def test_the_real_rule_fits_the_loop():
    rule = until_decided.sequential_verdicts
    v = until_decided._verdicts(
        rule, {"x": np.full(8, -0.1) + np.linspace(0, 0.01, 8), "y": np.zeros(0)}, 0.05, 0.02
    )
    assert set(v) == {"x", "y"} and v["y"] == {
        "verdict": "undecided",
        "n": 0,
        "low": -1.0,
        "high": 1.0,
    }
    assert v["x"]["n"] == 8 and v["x"]["verdict"] == "worse" and v["x"]["high"] < 0
