"""hosts/trl/host.py without TRL: the ``trl:`` section, the refusals before any
run, the controls on TRL's settings, and the records read from a hand-written
``trainer_state.json`` (the TRL runs themselves: tests/hosts_trl/test_trl_compare.py)."""

import json
import sys

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.runner import plan
from dataflex_rl.hosts.trl import host

HOST = host.TrlHost()


def experiment(tmp_path, **trl):
    data = {
        "name": "t",
        "host": "trl",
        "strategies": ["baseline"],
        "seeds": 2,
        "budget": {"steps": 6, "prompts_per_step": 4, "samples_per_prompt": 4},
        "evaluation": {"metric": "sampled", "every": 3, "per_domain": 10, "samples": 2},
        "trl": {"exports": str(tmp_path / "exported"), **trl},
    }
    return data


def test_run_config_maps_budget_and_evaluation_to_grpo_fields(tmp_path):
    exp = parse_experiment(experiment(tmp_path, lr=0.01, grpo={"beta": 0.1}))
    c = HOST.run_config(exp, {})
    g = c["grpo"]
    assert g["max_steps"] == 6 and g["num_generations"] == 4
    # one generation batch of 4 prompts x 4 samples per optimizer step
    assert g["per_device_train_batch_size"] == 16 and g["gradient_accumulation_steps"] == 1
    assert g["eval_strategy"] == "steps" and g["eval_steps"] == 3 and g["save_steps"] == 3
    assert g["num_generations_eval"] == 2
    # 10 problems, 2 samples: 10 prompts (divides 10, 20 completions <= 64) per eval batch
    assert g["per_device_eval_batch_size"] == 20
    assert c["lr"] == 0.01 and g["beta"] == 0.1  # lr: GRPOConfig's learning_rate
    ex = tmp_path / "exported"
    assert c["model"] == str(ex / "tiny") and c["train"] == str(ex / "tasks" / "train.parquet")
    assert c["eval"] == {d: str(ex / "tasks" / "eval" / f"{d}.parquet") for d in exp.domains}
    assert exp.domains == ["math", "logic", "science"]
    assert c["accuracy"] == "correct"  # the first reward's function name


def test_eval_batch_is_whole_groups_dividing_the_problems():
    # 200 problems, 4 samples: at most 16 prompts (64 completions); 10 is the largest
    # divisor of 200 up to 16 -> 40 completions
    assert host._eval_batch(200, 4) == 40
    assert host._eval_batch(7, 16) == 16  # 7 is prime (and 7 x 16 > 64): one prompt
    assert host._eval_batch(12, 5) == 60  # 12 prompts x 5 = 60 <= 64


@pytest.mark.parametrize(
    "trl, match",
    [
        (
            {"grpo": {"max_steps": 3}},
            r"experiment\.trl\.grpo\.max_steps: set by the experiment.*budget\.steps",
        ),
        ({"grpo": {"seed": 3}}, r"trl\.grpo\.seed: set by the experiment.*seeds"),
        ({"dataflex": {"strategy": "x"}}, r"trl\.dataflex\.strategy: set by the experiment"),
        ({"sampling_stream": "a"}, r"experiment\.trl\.sampling_stream"),
        ({"rewards": "x"}, r"experiment\.trl\.rewards"),
        ({"modle": "x"}, r"experiment\.trl\.modle: unknown key\. Did you mean 'model'"),
        ({"rewards": []}, r"trl\.rewards: expected at least one"),
    ],
)
def test_section_errors_name_the_key(tmp_path, trl, match):
    with pytest.raises(ConfigError, match=match):
        parse_experiment(experiment(tmp_path, **trl), "experiment")


def test_engine_section_is_refused_under_trl(tmp_path):
    with pytest.raises(ConfigError, match=r"experiment\.engine: the settings of host 'engine'"):
        parse_experiment({**experiment(tmp_path), "engine": {"policy": "tiny"}}, "experiment")


def test_greedy_metric_is_refused_naming_the_key(tmp_path):
    data = experiment(tmp_path)
    data["evaluation"] = {"metric": "greedy", "per_domain": 10}
    with pytest.raises(ConfigError, match=r"evaluation\.metric: host trl evaluates the sampled"):
        parse_experiment(data, "experiment")


def test_missing_venv_is_refused_before_any_run_naming_the_key(tmp_path):
    exp = parse_experiment(experiment(tmp_path, python=str(tmp_path / "nope" / "python")), "e.yaml")
    with pytest.raises(
        ConfigError,
        match=r"e\.yaml: trl\.python: .*nope/python does not exist.*bash scripts/setup_trl\.sh",
    ):
        HOST.check(exp)
    assert not (tmp_path / "exported").exists()  # refused before anything was written


def test_controls_map_to_trl_settings(tmp_path):
    data = experiment(tmp_path, lr=0.04)
    data["controls"] = ["aa", "no_update", "half_lr", "drop_half"]
    exp = parse_experiment(data)
    arms = {s.label: s for s in exp.strategies}
    assert arms["aa_control"].overrides == {"sampling_stream": 1}
    assert arms["no_update_control"].overrides == {"lr": 0.0}
    assert arms["half_lr_control"].overrides == {"lr": 0.02}
    assert arms["drop_half_control"].overrides == {}
    assert arms["drop_half_control"].spec.to_dict()["select"]["actuator"]["name"] == "random_groups"
    runs = {(r.method, r.seed): r for r in plan(exp, tmp_path / "out")}
    base = runs[("baseline", 0)].config
    assert runs[("aa_control", 0)].config == {**base, "sampling_stream": 1}
    assert runs[("half_lr_control", 1)].config == {**base, "lr": 0.02}
    assert runs[("no_update_control", 0)].config["lr"] == 0.0
    r = runs[("baseline", 0)]
    assert r.host == "trl" and r.identity["host"] == "trl"
    assert r.train_fn == "dataflex_rl.hosts.trl.run:run_training"
    assert r.python.endswith(".venv-trl/bin/python") and r.python.startswith("/")
    assert "tracking" not in r.config


def test_half_lr_without_a_learning_rate_halves_trls_default(tmp_path):
    data = experiment(tmp_path)
    data["controls"] = ["half_lr"]
    arm = parse_experiment(data).strategies[-1]
    assert arm.overrides == {"lr": host.TRL_DEFAULT_LR / 2}


def test_own_train_fn_is_the_runs(tmp_path):
    exp = parse_experiment({**experiment(tmp_path), "train_fn": "my_module:train"})
    assert {r.train_fn for r in plan(exp, tmp_path)} == {"my_module:train"}


# ------------------------------------------------------------------ the log reader
def entry(step, domain, mean, **extra):
    return {
        f"eval_{domain}_loss": 0.01,
        f"eval_{domain}_runtime": 0.2,
        "eval_rewards/correct/mean": mean,
        "eval_rewards/correct/std": 0.5,
        "step": step,
        **extra,
    }


MIX = "dataflex/mix/domain/{}/{}"


def test_records_from_a_hand_written_trainer_state(tmp_path):
    history = [
        entry(0, "math", 0.25),
        entry(0, "logic", 0.5),
        {
            "loss": 0.1,
            "rewards/correct/mean": 0.9,  # a training mean: not an evaluation
            MIX.format("math", "target"): 0.4,
            MIX.format("math", "actual"): 0.375,
            MIX.format("logic", "target"): 0.6,
            MIX.format("logic", "actual"): 0.625,
            "step": 1,
        },
        entry(2, "math", 0.5),
        entry(2, "logic", 0.75),
        entry(2, "logic", 0.625),  # re-evaluated at the resumed checkpoint's step: the later
        entry(3, "math", None),  # every reward None: no value
        {"train_runtime": 3.0, "step": 3},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    config = {"eval": {"math": "m.parquet", "logic": "l.parquet"}, "accuracy": "correct"}
    evals, props = HOST.read_records(tmp_path, config, mixes=True)
    assert evals == [
        {"step": 0, "math/sampled": 0.25, "logic/sampled": 0.5},
        {"step": 2, "math/sampled": 0.5, "logic/sampled": 0.625},
    ]
    assert props == [
        {"step": 0, "domain": "math", "target": 0.4, "actual": 0.375},
        {"step": 0, "domain": "logic", "target": 0.6, "actual": 0.625},
    ]
    assert HOST.read_records(tmp_path, config, mixes=False)[1] == []


def test_records_fall_back_to_the_newest_finished_checkpoint(tmp_path):
    for step, mean in ((2, 0.5), (4, 0.75)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "trainer_state.json").write_text(
            json.dumps({"log_history": [entry(0, "math", 0.25), entry(step, "math", mean)]})
        )
    (tmp_path / "checkpoint-6").mkdir()  # cut before its trainer_state.json: not finished
    config = {"eval": {"math": "m"}, "accuracy": "correct"}
    assert HOST.has_checkpoint(tmp_path)
    assert host.newest_checkpoint(tmp_path).endswith("checkpoint-4")
    evals, _ = HOST.read_records(tmp_path, config, mixes=False)
    assert evals == [{"step": 0, "math/sampled": 0.25}, {"step": 4, "math/sampled": 0.75}]


def test_an_evaluation_without_the_accuracy_reward_is_an_error(tmp_path):
    history = [{"eval_math_loss": 0.0, "eval_rewards/other/mean": 1.0, "step": 0}]
    with pytest.raises(KeyError, match="eval_rewards/correct/mean"):
        host.records_from_history(history, ["math"], "correct")


def test_no_trainer_state_is_an_error(tmp_path):
    assert not HOST.has_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no trainer_state.json"):
        HOST.read_records(tmp_path, {"eval": {"math": "m"}, "accuracy": "correct"}, False)


def test_python_is_absolute(tmp_path):
    exp = parse_experiment(experiment(tmp_path, python=sys.executable))
    assert HOST.python(exp) == sys.executable


@pytest.mark.parametrize(
    "override, message",
    [
        ("host=vrl", "override host=vrl: must be one of 'engine', 'trl', 'verl'"),
        ("trl.sampling_stream=x", "trl.sampling_stream"),
        ("trl.python=/no/such/python", "trl.python: /no/such/python does not exist"),
        ("budget.steps=0", "override budget.steps=0: host 'trl' trains at least 1 step"),
    ],
)
def test_compare_refuses_before_any_run(tmp_path, capsys, override, message):
    from dataflex_rl.cli import main

    exp = tmp_path / "exp.yaml"
    exp.write_text(json.dumps(experiment(tmp_path)))  # JSON is YAML
    out = tmp_path / "out"
    assert main(["compare", str(exp), override, "--out", str(out), "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not (out / "runs").exists() and not (tmp_path / "exported").exists()


def test_compare_refuses_the_experiments_tracking_naming_trls_own(tmp_path, capsys):
    from dataflex_rl.cli import main

    exp = tmp_path / "exp.yaml"
    exp.write_text(json.dumps({**experiment(tmp_path), "tracking": {"backends": ["mlflow"]}}))
    out = tmp_path / "out"
    assert main(["compare", str(exp), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "exp.yaml: tracking: the experiment's trackers follow engine runs" in err
    assert "set trl.grpo: report_to, logging_dir and run_name" in err
    assert not out.exists() and not (tmp_path / "exported").exists()  # nothing written
