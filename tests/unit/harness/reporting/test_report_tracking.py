"""Harness reports and the runs of ``compare`` on the experiment trackers: the summary table
as metrics, one tracker run per strategy × seed grouped by the experiment, tracking left out of
a run's identity."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import pytest

from dataflex_rl.core.config import validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting.report import ReportInputs, report_metrics, write_report
from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.runner import plan
from dataflex_rl.tracking import STATE_FILE, TrackingConfig
from tests import trackers
from tests.unit.harness.reporting.test_report import constant_gain_rows, run_cli

FAKE = "tests.unit.harness.fake_engine:run_training"


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    trackers.offline_env(monkeypatch, tmp_path)


def experiment(**patch):
    return parse_experiment(
        {
            "name": "tr",
            "seeds": 2,
            "strategies": ["baseline", "difffilter"],
            "engine": {"tasks": {"domains": ["math", "logic"]}},
            "budget": {"steps": 2, "prompts_per_step": 4, "samples_per_prompt": 2},
            "evaluation": {"every": 1, "per_domain": 5},
            "statistics": {"n_boot": 200},
            **patch,
        }
    )


def test_report_metrics_hold_the_summary_table():
    from dataflex_rl.harness.statistics.analysis import analyze

    a = analyze(constant_gain_rows(8), "baseline")
    m = report_metrics(a)
    # every seed +5 points on both benchmarks: Δ = 0.05 with a degenerate interval; exact
    # p = 2/2^8, one method so Holm changes nothing; decided (better)
    assert m["report/average/up/delta"] == pytest.approx(0.05)
    assert m["report/average/up/delta_low"] == pytest.approx(0.05)
    assert m["report/average/up/delta_high"] == pytest.approx(0.05)
    assert m["report/average/up/p_holm"] == pytest.approx(2 / 2**8)
    assert m["report/average/up/verdict"] == 1.0 and m["report/average/up/decided"] == 1.0
    assert m["report/math/baseline/mean"] == pytest.approx(0.4 + 0.01 * 3.5)
    assert "report/average/baseline/delta" not in m  # the baseline is not compared
    assert all(isinstance(v, float) for v in m.values())
    few = report_metrics(analyze(constant_gain_rows(3), "baseline"))
    assert few["report/average/up/decided"] == 0.0 and few["report/average/up/verdict"] == 0.0


def test_a_report_logs_its_table_and_files_and_adds_a_step_per_seed_count(tmp_path):
    pytest.importorskip("tensorboard")
    tracking = TrackingConfig(backends=["tensorboard"])
    inputs = ReportInputs("t", "baseline", tracking=tracking, params={"experiment": "t"})
    write_report(constant_gain_rows(3), tmp_path, inputs)
    write_report(constant_gain_rows(8), tmp_path, inputs)
    got = trackers.tensorboard_scalars(tmp_path / "tensorboard")
    # steps are the seeds analyzed: 3 seeds undecided, 8 decided
    assert got["report/average/up/decided"] == {3: 0.0, 8: 1.0}
    assert got["report/average/up/delta"][8] == pytest.approx(0.05)
    acc = trackers.tensorboard_accumulator(tmp_path / "tensorboard")
    assert {"plots/forest", "plots/learning_curves"} <= set(acc.Tags()["images"])
    assert json.loads((tmp_path / STATE_FILE).read_text())["logged"] == {"report": 8}


def test_every_run_is_a_tracker_run_named_for_strategy_and_seed_in_the_experiment_group(tmp_path):
    exp = experiment(tracking={"backends": ["mlflow"], "project": "p"})
    runs = plan(exp, tmp_path)
    t = runs[0].config["tracking"]
    assert t["run_name"] == "baseline-seed0" and t["group"] == "tr"
    assert t["mlflow"]["tracking_uri"] == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    named = plan(experiment(tracking={"run_name": "x", "group": "g"}), tmp_path)
    assert named[3].config["tracking"]["run_name"] == "x-difffilter-seed1"
    assert named[3].config["tracking"]["group"] == "g"
    # where a run is tracked is not part of what it computes
    assert [r.fingerprint for r in runs] == [r.fingerprint for r in plan(experiment(), tmp_path)]


def test_the_engine_section_cannot_set_tracking():
    with pytest.raises(ConfigError, match=r"experiment\.engine\.tracking: set by the experiment"):
        experiment(engine={"tracking": {"backends": ["wandb"]}})
    with pytest.raises(ConfigError, match=r"experiment\.tracking\.backends\[0\]: must be one of"):
        experiment(tracking={"backends": ["neptune"]})


def test_compare_logs_its_report_to_mlflow_and_wandb(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    exp = experiment(tracking={"backends": ["mlflow", "wandb"], "project": "p"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # SQLAlchemy's, inside MLflow
        run_compare(exp, tmp_path, workers=1, progress=False, plots=False, train_fn=FAKE)
        state = json.loads((tmp_path / STATE_FILE).read_text())
        client = trackers.mlflow_client(state["mlflow"]["tracking_uri"])
        report = client.get_run(state["mlflow"]["run_id"])
        decided = client.get_metric_history(report.info.run_id, "report/average/difffilter/decided")
    assert report.info.run_name == "report" and report.data.tags["group"] == "tr"
    assert report.data.params["baseline"] == "baseline"
    assert report.data.params["budget.steps"] == "2"
    assert [(m.step, m.value) for m in decided] == [(2, 0.0)]  # 2 seeds decide nothing
    rows = trackers.wandb_history(tmp_path, state["wandb"]["id"])
    assert rows[0][0] == 2 and "report/average/difffilter/delta" in rows[0][1]
    delta = rows[0][1]["report/average/difffilter/delta"]
    assert math.isfinite(delta) and delta > 0  # the stand-in engine's difffilter gains


def test_report_cli_tracks_with_track(tmp_path):
    pytest.importorskip("tensorboard")
    path = tmp_path / "r.csv"
    lines = ["method,seed,benchmark,score"] + [
        f"{r.method},{r.seed},{r.benchmark},{r.score}" for r in constant_gain_rows(4) if r.step
    ]
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "rep"
    argv = ["report", "--from-csv", str(path), "--out", str(out), "--no-plots", "--n-boot", "200"]
    assert run_cli([*argv, "--track", "tensorboard"]) == 0
    got = trackers.tensorboard_scalars(out / "tensorboard")
    assert got["report/average/up/delta"] == {4: pytest.approx(0.05)}


def test_run_tracking_keeps_the_user_store(tmp_path):
    from dataflex_rl.harness.running.runner import run_tracking

    base = validate(TrackingConfig, {"mlflow": {"tracking_uri": "http://h:5000"}}, "t")
    t = run_tracking(base, tmp_path, "a-seed0", "exp")
    assert t["mlflow"]["tracking_uri"] == "http://h:5000"
    assert dataclasses.asdict(base)["run_name"] is None  # the experiment's own is untouched
