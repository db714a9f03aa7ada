"""Loading through verl's plugin mechanism, version range, and start-up checks of the trainer.

No Ray here: verl's trainer constructor only reads the config and builds the replay buffer.
"""

import logging
import sys
from importlib.metadata import entry_points

import pytest

verl = pytest.importorskip("verl")

from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.hosts.verl import plugin  # noqa: E402
from dataflex_rl.hosts.verl.trainer import DataflexTrainer  # noqa: E402
from tests.hosts.verl_helpers import verl_config  # noqa: E402


def test_entry_point_is_declared_and_loaded_by_import_verl():
    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("dataflex") == "dataflex_rl.hosts.verl.plugin", (
        'pyproject.toml must declare [project.entry-points."verl.plugins"] '
        'dataflex = "dataflex_rl.hosts.verl.plugin" (then reinstall)'
    )
    assert get_trainer_cls("dataflex") is DataflexTrainer


def test_version_range(caplog):
    caplog.set_level(logging.ERROR, logger="dataflex_rl.hosts.verl")
    assert plugin.check_version(verl.__version__)
    assert plugin.check_version("0.9.3")
    assert not plugin.check_version("0.8.5")
    assert "verl 0.8.5 is outside the supported range >=0.9.1,<0.10" in caplog.text
    assert not plugin.check_version("0.10.0")


def test_a_failed_registration_is_logged_loudly(monkeypatch, caplog):
    import dataflex_rl.hosts.verl as package

    monkeypatch.delattr(package, "trainer")
    monkeypatch.setitem(sys.modules, "dataflex_rl.hosts.verl.trainer", None)  # import fails
    with pytest.raises(ImportError):
        plugin.register()
    assert "FAILED to register verl trainer mode 'dataflex'" in caplog.text


def test_sync_semantics_under_a_new_name():
    trainer = DataflexTrainer(
        verl_config("+dataflex.strategy=difffilter", "+dataflex.poll_interval=0.1")
    )
    # verl gives any mode other than "sync" the async buffer; this one is sync
    assert trainer.trainer_mode == "sync" and trainer.parameter_sync_step == 1
    assert type(trainer.replay_buffer) is ReplayBuffer
    assert not isinstance(trainer.replay_buffer, ReplayBufferAsync)
    assert trainer.replay_buffer.poll_interval == 0.1


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["+dataflex.strategy=difffilter", "algorithm.adv_estimator=gae"],
            "needs prompt groups, but the advantage estimator 'gae'",
        ),
        (
            [
                "+dataflex.strategy=softmax",
                "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
            ],
            "'bypass_mode' ignores rollout_is_weights",
        ),
        (["+dataflex.strategy=diffilter"], "Did you mean 'difffilter'"),
        (["+dataflex.stratgy=difffilter"], r"dataflex\.stratgy: unknown key\. Did you mean"),
        (
            [
                "+dataflex.strategy.select.actuator.name=band",
                "+dataflex.strategy.select.actuator.lo=0.1",
            ],
            r"select\.actuator\.lo: unknown parameter",
        ),
    ],
)
def test_bad_configs_fail_at_start_up(overrides, message):
    with pytest.raises(ConfigError, match=message):
        DataflexTrainer(verl_config(*overrides))


def test_strategy_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nselect: {preset: difffilter}\nreweight: softmax\n")
    trainer = DataflexTrainer(verl_config(f"+dataflex.strategy={path}"))
    assert trainer.dataflex.strategy == str(path)
