"""The verl host's run settings and the command line they become (no verl needed)."""

from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.verl.settings import (
    check_overrides,
    hydra_value,
    parse_settings,
    run_env,
    run_overrides,
    settings_table,
    validation_overrides,
    with_file_logger,
)

BASE = {
    "model": "/m",
    "train_files": "/d/train.parquet",
    "val_files": ["/d/eval/math.parquet", "/d/eval/logic.parquet"],
    "overrides": ["algorithm.adv_estimator=grpo", "trainer.logger=[console,wandb]"],
    "steps": 10,
    "eval_every": 4,
}


def overrides(data=None, seed=3, resume=False, resume_step=0, env=None):
    s = parse_settings({**BASE, **(data or {})})
    return run_overrides(
        s,
        seed=seed,
        out_dir=Path("/runs/a/seed3"),
        strategy_file=Path("/runs/a/seed3/dataflex_strategy.yaml"),
        name="a-seed3",
        resume=resume,
        resume_step=resume_step,
        env=env or {},
    )


def as_dict(items):
    out = {}
    for o in items:
        key, _, value = o.partition("=")
        assert key not in out, f"{key} set twice"
        out[key] = value
    return out


def test_a_run_sets_every_seed_from_its_seed_and_stream():
    o = as_dict(overrides({"sampling_stream": 2}, seed=3))
    assert o["data.seed"] == "3"
    assert o["actor_rollout_ref.actor.data_loader_seed"] == "3"
    assert o["critic.data_loader_seed"] == "3"
    assert o["++dataflex.seed"] == "3"
    assert o["actor_rollout_ref.rollout.seed"] == "2000003"  # 3 + 1e6 x 2


def test_a_run_sets_files_budget_output_and_strategy_after_the_base_overrides():
    items = overrides()
    o = as_dict(items)
    assert items[0] == "algorithm.adv_estimator=grpo"  # the user's first, the run's after
    assert o["trainer.v1.trainer_mode"] == "dataflex"
    assert o["++dataflex.strategy"] == "/runs/a/seed3/dataflex_strategy.yaml"
    assert o["data.val_files"] == "[/d/eval/math.parquet,/d/eval/logic.parquet]"
    assert o["trainer.total_training_steps"] == "10"
    assert o["trainer.test_freq"] == "4" and o["trainer.save_freq"] == "4"
    assert o["trainer.val_before_train"] == "true"
    assert o["trainer.default_local_dir"] == "/runs/a/seed3/ckpt"
    assert o["trainer.experiment_name"] == "a-seed3"
    assert o["trainer.resume_mode"] == "disable"
    assert o["trainer.logger"] == "[console,wandb,file]"  # the user's loggers kept, once
    assert o["actor_rollout_ref.actor.optim.lr"] == "1e-06"
    assert o["++ray_kwargs.ray_init.address"] == "local"


def test_resume_validates_again_only_on_the_grid():
    # eval every 4 of 10 steps: validations at 0, 4, 8, 10
    assert as_dict(overrides(resume=True, resume_step=4))["trainer.val_before_train"] == "true"
    assert as_dict(overrides(resume=True, resume_step=10))["trainer.val_before_train"] == "true"
    o = as_dict(overrides(resume=True, resume_step=6))
    assert o["trainer.val_before_train"] == "false" and o["trainer.resume_mode"] == "auto"


def test_sampled_validation_and_eval_every_zero():
    s = parse_settings({**BASE, "eval_metric": "sampled", "eval_samples": 4, "eval_every": 0})
    o = as_dict(validation_overrides(s))
    assert o["trainer.test_freq"] == "10"  # the end only (and step 0)
    assert o["actor_rollout_ref.rollout.val_kwargs.do_sample"] == "true"
    assert o["actor_rollout_ref.rollout.val_kwargs.n"] == "4"
    assert o["actor_rollout_ref.rollout.val_kwargs.temperature"] == "1.0"


def test_dataflex_keys_env_and_join_mode():
    env = {"A": "x,y", "PYTHONPATH": "/w"}
    o = as_dict(
        overrides(
            {
                "dataflex": {"domain_key": "domain", "decision_log": {"enabled": True}},
                "ray": "join",
            },
            env=env,
        )
    )
    assert o["++dataflex.domain_key"] == "domain"
    assert o["++dataflex.decision_log.enabled"] == "true"
    assert o["++ray_kwargs.ray_init.address"] == "auto"
    assert o["++ray_kwargs.ray_init.runtime_env.env_vars.A"] == "'x,y'"
    assert o["++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH"] == "/w"


def test_run_env_joins_modules_and_puts_the_working_directory_first():
    s = parse_settings(
        {
            **BASE,
            "modules": ["b", "c"],
            "env": {"VERL_USE_EXTERNAL_MODULES": "a,b", "X": "1", "PYTHONPATH": "/e"},
        }
    )
    env = run_env(s, "/cwd", "/inherited:/e")
    assert env["VERL_USE_EXTERNAL_MODULES"] == "a,b,c"
    assert env["PYTHONPATH"] == "/cwd:/e:/inherited"
    assert env["X"] == "1"


@pytest.mark.parametrize(
    "override, owner",
    [
        ("data.seed=1", "the run's seed"),
        ("+actor_rollout_ref.rollout.seed=1", "sampling_stream"),
        ("actor_rollout_ref.actor.optim.lr=1e-5", "verl.lr"),
        ("actor_rollout_ref.rollout.val_kwargs.n=4", "evaluation.samples"),
        ("++dataflex.strategy=x", "verl.dataflex"),
        ("trainer.default_local_dir=/x", "its folder"),
        ("data.train_batch_size=64", "budget.prompts_per_step"),
    ],
)
def test_a_runs_own_key_in_the_base_overrides_is_refused(override, owner):
    with pytest.raises(
        ConfigError,
        match=r"verl.overrides\[1\]: .* set by each run; use .*" + owner.replace(".", r"\."),
    ):
        check_overrides(["algorithm.adv_estimator=grpo", override])


@pytest.mark.parametrize(
    "data, message",
    [
        ({"lr": "1e-6"}, r"verl\.lr: .*float"),
        ({"overrides": "a=1"}, r"verl\.overrides: .*list"),
        ({"env": {"A": 1}}, r"verl\.env\.A: .*str"),
        ({"dataflex": {"seed": 1}}, r"verl\.dataflex\.seed: set by each run"),
        ({"dataflex": {"domain_kye": "d"}}, r"verl\.dataflex\.domain_kye: .*domain_key"),
        ({"ray": "cluster"}, r"verl\.ray: .*'own'"),
        ({"modeel": "/m"}, r"verl\.modeel: .*model"),
        ({"overrides": ["not an override"]}, r"verl\.overrides\[0\]: .*not a Hydra override"),
    ],
)
def test_bad_settings_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_settings({**BASE, **data})


def test_a_missing_required_key_is_named():
    with pytest.raises(ConfigError, match=r"verl: missing required key 'model'"):
        parse_settings({k: v for k, v in BASE.items() if k != "model"})


@pytest.mark.parametrize(
    "value, text",
    [
        ("/a/b-c.parquet", "/a/b-c.parquet"),
        ("a,b", "'a,b'"),
        ("it's", "'it\\'s'"),
        ("null", "'null'"),
        ("1", "'1'"),  # a string stays a string (Ray's env_vars must be str)
        ("1e-6", "'1e-6'"),
        (1, "1"),
        ("pkg://m.n", "'pkg://m.n'"),
        (True, "true"),
        (0.5, "0.5"),
        (["a", "b c"], "[a,'b c']"),
        (None, "null"),
    ],
)
def test_hydra_values(value, text):
    assert hydra_value(value) == text


def test_the_file_logger_is_added_once():
    assert with_file_logger(["a=1"]) == ["a=1", "trainer.logger=[console,file]"]
    assert with_file_logger(["trainer.logger=[file]"]) == ["trainer.logger=[file]"]
    assert with_file_logger(["trainer.logger=wandb"]) == ["trainer.logger=[wandb,file]"]


def test_docs_list_the_section_as_declared():
    page = (Path(__file__).resolve().parents[2] / "docs" / "hosts" / "compare.md").read_text()
    assert settings_table() in page, "docs/hosts/compare.md: paste settings_table() into the table"
