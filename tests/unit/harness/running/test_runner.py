"""harness/running/runner.py and compare.py with a stand-in engine
(tests/unit/harness/fake_engine.py): pairing, failures, resume, proportions. The real engine runs in
tests/integration."""

import csv
import json
from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.runner import execute_run, plan

FAKE = "tests.unit.harness.fake_engine:run_training"


def experiment(steps=4, **patch):
    return parse_experiment(
        {
            "name": "t",
            "seeds": 2,
            "strategies": [
                "baseline",
                "difffilter",
                "dump_ucb",
                {"label": "broken", "strategy": "baseline"},
            ],
            "engine": {"tasks": {"domains": ["math", "logic", "science"]}},
            "budget": {"steps": steps, "prompts_per_step": 4, "samples_per_prompt": 2},
            "evaluation": {"every": 2, "per_domain": 5},
            "statistics": {"n_boot": 500},
            **patch,
        }
    )


def calls(out: Path) -> list[str]:
    return (out / "calls.log").read_text().splitlines()


def test_plan_is_seed_major_and_paired(tmp_path):
    runs = plan(experiment(), tmp_path)
    assert [(r.method, r.seed) for r in runs[:4]] == [
        ("baseline", 0),
        ("difffilter", 0),
        ("dump_ucb", 0),
        ("broken", 0),
    ]
    # one engine config for all; each run is its own tracker run
    assert all(r.identity["config"] == runs[0].identity["config"] for r in runs)
    assert [r.config["tracking"]["run_name"] for r in runs[:2]] == [
        "baseline-seed0",
        "difffilter-seed0",
    ]
    assert runs[0].out_dir == str(tmp_path / "runs" / "baseline" / "seed0")
    assert len({r.fingerprint for r in runs}) == len(runs)
    assert [r.mixes for r in runs[:3]] == [False, False, True]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    first = run_compare(experiment(), out, workers=2, progress=False, plots=False, train_fn=FAKE)
    return out, first


def test_compare_writes_results_and_report(compared):
    out, res = compared
    assert res.runs == 8 and len(res.execution.done) == 6 and res.execution.skipped == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    # 3 finished strategies × 2 seeds × 3 domains × checkpoints 0, 2, 4
    assert len(rows) == 54
    assert {r["step"] for r in rows} == {"0", "2", "4"}
    final = {
        (r["method"], r["seed"], r["benchmark"]): float(r["score"])
        for r in rows
        if r["step"] == "4"
    }
    assert final[("difffilter", "1", "math")] == pytest.approx(0.40 + 0.01 + 0.05)
    props = list(csv.DictReader((out / "proportions.csv").open()))
    assert {r["method"] for r in props} == {"dump_ucb"} and len(props) == 2 * 4 * 3
    report = (out / "report.md").read_text()
    assert "pairing check passed" in report


def test_a_failed_run_is_reported_and_the_others_finish(compared):
    out, res = compared
    failed = res.execution.failed
    assert [(f["method"], f["seed"]) for f in failed] == [("broken", 0), ("broken", 1)]
    assert failed[0]["error"] == "ValueError: broken on purpose"
    assert "fake_engine.py" in failed[0]["traceback"]
    err = json.loads((out / "runs" / "broken" / "seed0" / "error.json").read_text())
    assert err["error"] == "ValueError: broken on purpose"
    report = (out / "report.md").read_text()
    assert "## Failed runs" in report and "`ValueError: broken on purpose`" in report


def test_resume_skips_finished_runs(compared):
    out, _ = compared
    before = calls(out)
    again = run_compare(experiment(), out, workers=2, progress=False, plots=False, train_fn=FAKE)
    new = calls(out)[len(before) :]
    assert sorted(new) == ["broken 0 False", "broken 1 False"]  # only the failed ones rerun
    assert again.execution.skipped == 6
    assert len(list(csv.DictReader((out / "results.csv").open()))) == 54


def test_changed_configuration_is_not_silently_reused(compared):
    out, _ = compared
    with pytest.raises(
        ConfigError,
        match=r"finished with a different configuration "
        r"\(config\.steps, steps changed\)",
    ):
        run_compare(experiment(steps=6), out, workers=1, progress=False, plots=False, train_fn=FAKE)
    # nothing was overwritten: the recorded experiment is still the finished one
    assert json.loads((out / "experiment.json").read_text())["budget"]["steps"] == 4


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    run = plan(experiment(), tmp_path, FAKE)[0]
    d = Path(run.out_dir)
    d.mkdir(parents=True)
    (d / "checkpoints" / "step-00000002").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"fingerprint": run.fingerprint}))
    assert execute_run(run)["status"] == "done"
    assert calls(tmp_path) == ["baseline 0 True"]
    assert json.loads((d / "done.json").read_text())["resumed"] is True


def test_checkpoint_of_another_configuration_starts_over(tmp_path):
    run = plan(experiment(), tmp_path, FAKE)[0]
    d = Path(run.out_dir)
    d.mkdir(parents=True)
    (d / "checkpoints" / "step-00000002").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"fingerprint": "other"}))
    assert execute_run(run)["status"] == "done"
    assert calls(tmp_path) == ["baseline 0 False"] and not (d / "checkpoints").exists()


def test_leftovers_without_checkpoint_start_over(tmp_path):
    run = plan(experiment(), tmp_path, FAKE)[1]
    d = Path(run.out_dir)
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text('{"kind": "train", "step": 0}\n')
    (d / "stale.txt").write_text("x")
    assert execute_run(run)["status"] == "done"
    assert calls(tmp_path) == ["difffilter 0 False"] and not (d / "stale.txt").exists()


def test_unimportable_engine_is_a_failure_not_a_crash(tmp_path):
    run = plan(experiment(), tmp_path, "no_such_module:run")[0]
    res = execute_run(run)
    assert res["status"] == "failed" and "cannot import module 'no_such_module'" in res["error"]


def test_a_dead_worker_is_retried_once_then_reported(tmp_path):
    exp = experiment(
        strategies=[
            "baseline",
            {"label": "crash", "strategy": "baseline"},
            {"label": "noisy", "strategy": "baseline"},
        ],
        seeds=[0],
    )
    res = run_compare(exp, tmp_path, workers=1, progress=False, plots=False, train_fn=FAKE)
    assert {r["method"] for r in res.execution.done} == {"baseline", "noisy"}
    (crash,) = res.execution.failed
    assert crash["method"] == "crash" and crash["error"].startswith("BrokenProcessPool")
    assert calls(tmp_path).count("crash 0 False") == 2  # tried twice
    noisy = json.loads((tmp_path / "runs" / "noisy" / "seed0" / "done.json").read_text())
    assert noisy["warnings"] == ["2× UserWarning: step N: something odd"]


def test_a_run_crosses_to_its_process_whole_and_under_its_former_field_name(tmp_path):
    import dataclasses

    from dataflex_rl.harness.running.runner import RunSpec, launch_of

    exp = parse_experiment(
        {
            "name": "t",
            "seeds": 1,
            "strategies": ["baseline"],
            "controls": ["half_lr"],
            "engine": {"tasks": {"domains": ["math"]}, "optim": {"lr": 0.5}},
            "budget": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
        }
    )
    arm = plan(exp, tmp_path, FAKE)[-1]
    assert arm.overrides == {"optim": {"lr": 0.25}}
    fields = json.loads(launch_of(arm).stdin)  # what the worker reads on stdin
    assert RunSpec(**fields) == dataclasses.replace(arm, out_dir=str(Path(arm.out_dir).resolve()))


def test_a_dependency_warning_every_run_repeats_is_one_line_per_package():
    from types import SimpleNamespace

    from dataflex_rl.harness.running.compare import _warning_lines
    from dataflex_rl.harness.running.runner import warning_package

    site = "/venv/lib/python3.11/site-packages"
    assert warning_package(f"{site}/transformers/modeling_utils.py") == "transformers"
    assert warning_package("/work/src/dataflex_rl/engine/trainer.py") == "dataflex_rl"
    gc = ["FutureWarning: `use_reentrant` will change", "FutureWarning: cache renamed"]

    def run(method, seed, extra=()):
        warnings = [f"2× {m}" for m in gc] + [f"1× {m}" for m in extra]
        packages = ["transformers"] * len(gc) + ["dataflex_rl"] * len(extra)
        return {"method": method, "seed": seed, "warnings": warnings, "warning_packages": packages}

    ex = SimpleNamespace(done=[run("a", 0), run("a", 1), run("b", 0, ["UserWarning: odd"])])
    assert _warning_lines(ex) == [
        # 2 distinct messages, twice each in 3 runs: one line, not six
        "warnings from transformers in every run: 2 distinct, 12 in all (first: FutureWarning: "
        "`use_reentrant` will change; each run's done.json has them all)",
        "warning in 1 run(s) (b/seed0): UserWarning: odd",
    ]
