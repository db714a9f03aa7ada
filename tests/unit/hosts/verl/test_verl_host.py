"""An experiment with ``host: verl``: its section, its controls, and the refusals made before
any run starts (no verl needed: the harness never imports it)."""

import sys
from pathlib import Path

import pytest
import yaml

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.experiment import load_experiment, parse_experiment
from dataflex_rl.harness.running.runner import plan

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "experiments" / "verl_qwen0.5b_grpo.yaml"


def experiment(tmp_path, **verl):
    for name in ("train.parquet", "val.parquet"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "model").mkdir(exist_ok=True)
    data = {
        "name": "v",
        "host": "verl",
        "strategies": ["baseline", "difffilter"],
        "seeds": 2,
        "budget": {"steps": 30, "prompts_per_step": 8, "samples_per_prompt": 4},
        "evaluation": {"metric": "sampled", "samples": 3, "every": 10},
        "verl": {
            "model": "model",
            "train_files": "train.parquet",
            "val_files": "val.parquet",
            "lr": 4e-6,
            **verl,
        },
    }
    return data


def test_the_shipped_verl_example_parses_with_its_controls():
    exp = load_experiment(EXAMPLE)
    assert exp.host == "verl" and exp.labels[-2:] == ["aa_control", "drop_half_control"]
    runs = {r.method: r for r in plan(exp, "/tmp/out") if r.seed == 0}
    assert runs["aa_control"].config["sampling_stream"] == 1
    assert runs["baseline"].config.get("sampling_stream", 0) == 0
    assert "select" in runs["drop_half_control"].strategy
    base = runs["baseline"]
    assert base.python == str(Path("~/venvs/verl/bin/python").expanduser())
    assert base.train_fn == "dataflex_rl.hosts.verl.run:run_training"
    reward = [
        o for o in base.config["overrides"] if o.startswith("reward.custom_reward_function.path")
    ]
    assert reward == [f"reward.custom_reward_function.path={ROOT / 'examples/verl/reward.py'}"]


def test_budget_evaluation_and_control_arms_reach_the_runs_settings(tmp_path):
    data = experiment(tmp_path)
    data["controls"] = ["aa", "no_update", "half_lr"]
    exp = parse_experiment(data, "exp.yaml", tmp_path)
    runs = {r.method: r.config for r in plan(exp, tmp_path / "out") if r.seed == 1}
    base = runs["baseline"]
    assert base["model"] == str(tmp_path / "model")  # resolved against the file's folder
    assert (base["steps"], base["prompts_per_step"], base["samples_per_prompt"]) == (30, 8, 4)
    assert (base["eval_every"], base["eval_metric"], base["eval_samples"]) == (10, "sampled", 3)
    assert "python" not in base  # where verl is installed is not part of a run
    assert runs["aa_control"]["sampling_stream"] == 1
    assert runs["no_update_control"]["lr"] == 0.0
    assert runs["half_lr_control"]["lr"] == 2e-6
    # everything else as the baseline's
    for arm, changed in (("aa_control", "sampling_stream"), ("half_lr_control", "lr")):
        assert {k: v for k, v in runs[arm].items() if k != changed} == {
            k: v for k, v in base.items() if k != changed
        }


@pytest.mark.parametrize(
    "verl, message",
    [
        ({"lr": "fast"}, r"exp\.yaml: verl\.lr: .*float"),
        ({"overrides": ["data.seed=3"]}, r"verl\.overrides\[0\]: data\.seed is set by each run"),
        ({"steps": 5}, r"exp\.yaml: verl\.steps: set by the experiment; use budget\.steps"),
        ({"ray": "shared"}, r"exp\.yaml: verl\.ray: "),
        ({"env": ["A=1"]}, r"exp\.yaml: verl\.env: "),
    ],
)
def test_a_wrong_verl_setting_is_refused_naming_the_key(tmp_path, verl, message):
    with pytest.raises(ConfigError, match=message):
        parse_experiment(experiment(tmp_path, **verl), "exp.yaml", tmp_path)


def test_host_verl_needs_its_section(tmp_path):
    data = experiment(tmp_path)
    del data["verl"]
    with pytest.raises(ConfigError, match=r"exp\.yaml: verl: host verl needs a verl section"):
        parse_experiment(data, "exp.yaml", tmp_path)


def check(tmp_path, python, **data):
    exp = parse_experiment({**experiment(tmp_path, python=python), **data}, "exp.yaml", tmp_path)
    exp.host_impl.check(exp)


def test_a_missing_verl_venv_is_refused_naming_the_key_and_the_setup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"exp\.yaml: verl\.python: \.venv-verl/bin/python does not exist .*"
        r"bash scripts/setup_verl\.sh",
    ):
        check(tmp_path, ".venv-verl/bin/python")


def test_a_python_without_verl_is_refused(tmp_path):
    try:
        import verl  # noqa: F401

        pytest.skip("this Python has verl")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=r"verl\.python: .* lacks verl or dataflex-rl"):
        check(tmp_path, sys.executable)


def test_join_mode_refuses_gpus_held_by_the_task(tmp_path, monkeypatch):
    from dataflex_rl.hosts.verl.host import VerlHost

    data = experiment(tmp_path, ray="join", python=sys.executable)
    data["resources"] = {"gpus_per_run": 1}
    exp = parse_experiment(data, "exp.yaml", tmp_path)
    monkeypatch.setattr(VerlHost, "check_python", lambda self, exp: sys.executable)
    with pytest.raises(ConfigError, match=r"resources\.gpus_per_run: must be 0 with verl"):
        VerlHost().check(exp)


def test_a_file_written_to_disk_loads_the_same(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment(tmp_path)))
    assert load_experiment(path).host_settings["train_files"] == str(tmp_path / "train.parquet")


def test_domains_are_the_val_files_data_sources_or_the_declared_ones(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from dataflex_rl.hosts.verl.host import VerlHost

    data = experiment(tmp_path)
    pq.write_table(
        pa.table({"data_source": ["openai/gsm8k", "logic", "openai/gsm8k"]}),
        tmp_path / "val.parquet",
    )
    exp = parse_experiment(data, "exp.yaml", tmp_path)
    assert exp.domains == ["openai/gsm8k", "logic"]  # first appearance
    data["verl"]["domains"] = ["logic", "openai/gsm8k"]
    assert parse_experiment(data, "exp.yaml", tmp_path).domains == ["logic", "openai/gsm8k"]
    data["verl"]["domains"] = ["logic", "math"]
    exp = parse_experiment(data, "exp.yaml", tmp_path)
    monkeypatch.setattr(VerlHost, "check_python", lambda self, exp: sys.executable)
    with pytest.raises(ConfigError, match=r"verl\.domains: \['logic', 'math'\] are not the data"):
        VerlHost().check(exp)


@pytest.mark.parametrize(
    "override, message",
    [
        ("verl.python=/no/such/python", "verl.python: /no/such/python does not exist"),
        ("verl.lr=x", "override verl.lr=x: expected float"),
        ("verl.overrides=[trainer.save_freq=3]", "trainer.save_freq is set by each run"),
    ],
)
def test_compare_refuses_a_verl_experiment_before_any_run(tmp_path, capsys, override, message):
    from dataflex_rl.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment(tmp_path)))
    out = tmp_path / "out"
    assert main(["compare", str(path), override, "--out", str(out), "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_evaluation_reaches_the_run_and_per_domain_names_its_subset(tmp_path):
    data = experiment(tmp_path, domains=["math"])
    data["evaluation"]["per_domain"] = 7
    exp = parse_experiment(data, "exp.yaml", tmp_path)
    assert plan(exp, tmp_path / "out")[0].config["eval_per_domain"] == 7
    assert "the first 7 prompts of each in val_files" in exp.host_impl.setup_lines(exp)[0]


@pytest.mark.parametrize(
    "change, message",
    [
        # a tracker of the experiment's would follow no verl run: named, with verl's own place
        (
            {"tracking": {"backends": ["tensorboard"]}},
            "exp.yaml: tracking: the experiment's trackers follow engine runs and their "
            "report; host 'verl' runs log through their own: set verl.overrides: "
            "trainer.logger=[console,wandb]",
        ),
        (
            {"budget": {"steps": 0}},
            "exp.yaml: budget.steps: host 'verl' trains at least 1 step",
        ),
        # greedy validation takes one response: samples would be ignored
        (
            {"evaluation": {"metric": "greedy", "samples": 4}},
            "exp.yaml: evaluation.samples: host verl validates one way per run",
        ),
    ],
)
def test_compare_refuses_a_setting_verl_runs_would_ignore(tmp_path, capsys, change, message):
    from dataflex_rl.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**experiment(tmp_path), **change}))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--out", str(out), "--no-progress"]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not out.exists()  # nothing written
