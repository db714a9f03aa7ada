"""A verl experiment's runs as verl reads them: every run's command line of the shipped example
(examples/experiments/verl_*.yaml) composed against verl 0.9.1's real config (an unknown or
misspelled key fails), checked by the dataflex trainer, with the seeds where verl reads them."""

import re
from pathlib import Path

import pytest

pytest.importorskip("verl")

from dataflex_rl.harness.running.experiment import load_experiment  # noqa: E402
from dataflex_rl.harness.running.runner import plan  # noqa: E402
from dataflex_rl.hosts.verl.settings import parse_settings, run_env, run_overrides  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "experiments").glob("verl_*.yaml"))


def compose(overrides):
    from hydra import compose, initialize_config_dir

    from tests.hosts.verl_helpers import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_run_of_the_example_is_a_valid_verl_config(path, tmp_path):
    from dataflex_rl.hosts.verl.trainer import DataflexTrainer

    exp = load_experiment(path)
    runs = plan(exp, tmp_path)
    assert {r.method for r in runs} == set(exp.labels)
    for run in runs:
        if run.seed != 1:
            continue
        s = parse_settings(run.config)
        out = Path(run.out_dir)
        (out).mkdir(parents=True, exist_ok=True)
        strategy = out / "dataflex_strategy.yaml"
        import yaml

        strategy.write_text(yaml.safe_dump(run.strategy))
        env = run_env(s, str(tmp_path))
        overrides = run_overrides(
            s,
            seed=1,
            out_dir=out,
            strategy_file=strategy,
            name="x",
            resume=False,
            resume_step=0,
            env=env,
        )
        config = compose(overrides)
        assert config.data.seed == 1 and config.actor_rollout_ref.actor.data_loader_seed == 1
        assert config.actor_rollout_ref.rollout.seed == 1 + 1_000_000 * s.sampling_stream
        assert config.dataflex.seed == 1
        assert config.trainer.val_before_train is True
        assert config.trainer.total_training_steps == exp.budget.steps
        assert config.actor_rollout_ref.rollout.n == exp.budget.samples_per_prompt
        assert config.actor_rollout_ref.actor.optim.lr == s.lr
        assert list(config.trainer.logger) == ["console", "file"]
        assert config.ray_kwargs.ray_init.address == "local"
        trainer = DataflexTrainer(config)  # the strategy and the dataflex block fit verl
        assert trainer.dataflex.seed == 1
        assert trainer._spec.name == run.method


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            "actor_rollout_ref.actor.ppo_mini_batch_sise=4",
            "verl refuses a run of strategy baseline: ConfigCompositionException: Could not "
            "override 'actor_rollout_ref.actor.ppo_mini_batch_sise'",
        ),
        (
            "algorithm.adv_estimator=gae",  # difffilter's solve rate needs prompt groups
            "verl refuses a run of strategy difffilter: ConfigError: ",
        ),
    ],
)
def test_a_run_verl_would_refuse_is_refused_before_any_run(tmp_path, extra, message):
    import yaml

    from dataflex_rl.core.registry import ConfigError
    from tests.hosts.test_verl_compare import experiment

    path = experiment(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["strategies"] = ["baseline", "difffilter"]
    data["verl"]["overrides"].append(extra)
    path.write_text(yaml.safe_dump(data))
    exp = load_experiment(path)
    with pytest.raises(ConfigError, match="verl: " + re.escape(message)):
        exp.host_impl.check(exp)
