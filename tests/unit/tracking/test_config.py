"""The ``tracking:`` section: the config dialect's checks, and flattening a run config."""

from __future__ import annotations

import pytest

from dataflex_rl.core.config import validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.tracking import TrackingConfig, flatten


def test_defaults_log_nowhere_but_metrics_jsonl():
    c = TrackingConfig()
    assert c.backends == [] and c.project == "dataflex-rl" and c.run_name is None
    assert c.wandb.mode == "offline" and c.mlflow.tracking_uri is None
    assert c.tensorboard.dir is None


def test_the_engine_config_reads_the_section():
    cfg = load_config({"tracking": {"backends": ["tensorboard", "mlflow"], "project": "p"}})
    assert cfg.tracking.backends == ["tensorboard", "mlflow"] and cfg.tracking.project == "p"
    cfg = load_config(None, dotted=["tracking.wandb.mode=online", "tracking.backends=[wandb]"])
    assert cfg.tracking.wandb.mode == "online" and cfg.tracking.backends == ["wandb"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"backends": ["tensorbord"]},
            r"tracking\.backends\[0\]: must be one of .*Did you mean 'tensorboard'",
        ),
        ({"backends": ["wandb", "wandb"]}, r"tracking\.backends: a backend repeats"),
        ({"backend": ["wandb"]}, r"tracking\.backend: unknown key\. Did you mean 'backends'"),
        (
            {"wandb": {"mode": "offlin"}},
            r"tracking\.wandb\.mode: must be one of 'offline', 'online'",
        ),
        (
            {"mlflow": {"tracking_url": "x"}},
            r"tracking\.mlflow\.tracking_url: unknown key\. Did you mean 'tracking_uri'",
        ),
        ({"project": ""}, r"tracking\.project: must be a non-empty name"),
        ({"backends": "wandb"}, r"tracking\.backends: expected list\[str\]"),
    ],
)
def test_mistakes_are_refused_naming_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        validate(TrackingConfig, data, "tracking")


def test_flatten_gives_dotted_keys_and_keeps_lists_whole():
    nested = {"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 3, "tasks": {"d": {}}}
    assert flatten(nested) == {"optim.lr": 0.1, "optim.betas": [0.9, 0.99], "seed": 3}
    assert flatten({}) == {}
