"""``dataflex-rl compare`` end to end on the real engine: a tiny matrix, then a resume.

The policy is the shipped warm-started tiny model (non-zero accuracies, so the trackers' copies
are compared on real numbers; compared on the sampled accuracy, which the trackers must read back
by the runs' metric tag) trained for 2 steps, so the test checks the plumbing — pairing,
files, statistics, the three trackers (their copies read back by `report --from-tracker` give
the same rows and statistics), resume — not learning.
"""

import csv
import json

import pytest

from tests import trackers
from tests.harness_cli import run_cli

pytest.importorskip("transformers")


def test_compare_then_resume(tmp_path, capsys, monkeypatch):
    for module in ("mlflow", "tensorboard", "wandb"):
        pytest.importorskip(module)
    trackers.offline_env(monkeypatch, tmp_path)
    exp = tmp_path / "tiny.yaml"
    exp.write_text("""\
name: tiny
strategies: [baseline, dump_ucb]
seeds: 2
engine: {policy: tiny}
budget: {steps: 2, prompts_per_step: 3, samples_per_prompt: 2}
evaluation: {metric: sampled, samples: 1, every: 1, per_domain: 4}
statistics: {n_boot: 500}
tracking: {backends: [tensorboard, wandb, mlflow]}
""")
    out = tmp_path / "out"
    assert run_cli(["compare", str(exp), "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    # 2 strategies × 2 seeds × 3 domains × checkpoints 0, 1, 2
    assert len(rows) == 36
    assert {(r["method"], r["seed"]) for r in rows} == {
        (m, s) for m in ("baseline", "dump_ucb") for s in ("0", "1")
    }
    props = list(csv.DictReader((out / "proportions.csv").open()))
    assert {r["method"] for r in props} == {"dump_ucb"}
    report = (out / "report.md").read_text()
    assert "pairing check passed" in report
    assert "With 2 seeds the exact sign-flip test cannot give p below 0.5" in report
    for f in (
        "statistics.csv",
        "plots/forest.png",
        "plots/learning_curves.png",
        "plots/proportions.png",
        "experiment.json",
    ):
        assert (out / f).is_file(), f
    # every run and the report are MLflow runs in one database, grouped by the experiment
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out.resolve() / 'mlflow.db'}")
    found = client.search_runs([client.get_experiment_by_name("dataflex-rl").experiment_id])
    assert sorted(r.info.run_name for r in found) == [
        "baseline-seed0",
        "baseline-seed1",
        "dump_ucb-seed0",
        "dump_ucb-seed1",
        "report",
    ]
    assert {r.data.tags["group"] for r in found} == {"tiny"}
    assert {r.info.status for r in found} == {"FINISHED"}
    run = next(r for r in found if r.info.run_name == "dump_ucb-seed1")
    assert run.data.params["seed"] == "1" and run.data.tags["strategy"] == "dump_ucb"
    metrics = [json.loads(x) for x in (out / "runs/dump_ucb/seed1/metrics.jsonl").open()]
    greedy = client.get_metric_history(run.info.run_id, "eval/mean/greedy")
    assert [(m.step, m.value) for m in greedy] == [
        (r["step"], pytest.approx(r["eval/mean/greedy"])) for r in metrics if r["kind"] == "eval"
    ]
    # each tracker's copy holds every row of results.csv (every run, domain and checkpoint)
    # and gives the compare's own statistics (`report --from-tracker`)
    from dataflex_rl.harness.statistics.tracked import TrackerQuery, read_tracker

    want = {
        (r["method"], r["seed"], r["benchmark"], int(r["step"]), float(r["score"])) for r in rows
    }
    for source in (
        f"mlflow:sqlite:///{out.resolve() / 'mlflow.db'}",
        f"tensorboard:{out}",
        f"wandb:{out}",
    ):
        got = read_tracker(TrackerQuery(source)).rows
        assert {(r.method, r.seed, r.benchmark, r.step, r.score) for r in got} == want
        assert len(got) == len(want) == 36
        dest = tmp_path / source.partition(":")[0]
        argv = ["report", "--from-tracker", source, "--out", str(dest), "--n-boot", "500"]
        assert run_cli([*argv, "--no-plots"]) == 0
        trackers.same_statistics(dest / "statistics.csv", out / "statistics.csv")
        assert "skipped 1 run(s) (no matching metric)" in (dest / "report.md").read_text()
    done = out / "runs" / "baseline" / "seed0" / "done.json"
    stamp = done.stat().st_mtime_ns
    capsys.readouterr()

    # the same command again: everything is skipped, the report is rebuilt
    assert run_cli(["compare", str(exp), "--out", str(out), "--no-progress", "--no-plots"]) == 0
    assert "4 finished (4 skipped as already done), 0 failed" in capsys.readouterr().out
    assert done.stat().st_mtime_ns == stamp
    assert json.loads(done.read_text())["status"] == "done"


def test_compare_at_equal_generation_cost(tmp_path):
    exp = tmp_path / "cost.yaml"
    exp.write_text("""\
name: cost
strategies: [baseline, difffilter]
seeds: 2
engine: {policy: tiny}
# each run stops once it has generated 150 tokens (steps: at most 50)
budget: {steps: 50, generated_tokens: 150, prompts_per_step: 3, samples_per_prompt: 2}
evaluation: {every: 1, per_domain: 4}
statistics: {n_boot: 500}
""")
    out = tmp_path / "out"
    assert run_cli(["compare", str(exp), "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    for run in sorted((out / "runs").glob("*/seed*")):
        train = [json.loads(x) for x in (run / "metrics.jsonl").open() if '"kind": "train"' in x]
        totals = [r["engine/generation_cost_tokens_total"] for r in train]
        assert totals[-1] >= 150 and (len(totals) == 1 or totals[-2] < 150), run
    rows = list(csv.DictReader((out / "results.csv").open()))
    # every checkpoint's cost is in results.csv: 0 at step 0, the run's total at its end
    assert {float(r["generated_tokens"]) for r in rows if r["step"] == "0"} == {0.0}
    last = {}
    for r in rows:
        key = (r["method"], r["seed"])
        if int(r["step"]) >= int(last.get(key, r)["step"]):
            last[key] = r
    assert len(last) == 4 and all(float(r["generated_tokens"]) >= 150 for r in last.values())
    report = (out / "report.md").read_text()
    assert "each run stopped at 150 generated tokens" in report
    assert "## Accuracy against generated tokens" in report
    assert (out / "plots" / "accuracy_vs_tokens.png").is_file()
