"""examples/verl: strategy files, the reward function, the dataset builder, and every launch
script's overrides composed against real verl 0.9.1's config and checked by the trainer."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataflex_rl.core.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verl"
STRATEGIES = sorted((EXAMPLES / "strategies").glob("*.yaml"))
SCRIPTS = ("qwen2.5-0.5b_grpo.sh", "qwen2.5-7b_grpo.sh")
DOMAINS = ("logic", "math", "science")


@pytest.fixture
def reward(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import reward as module

    return module


@pytest.mark.parametrize("path", STRATEGIES, ids=lambda p: p.stem)
def test_example_strategy_builds(path):
    strategy = Strategy(path, domains=DOMAINS, advantage_estimator="grpo")
    assert strategy.parts


@pytest.mark.parametrize(
    "text, truth, kind, score",
    [
        ("so 3 + 4 = 7, \\boxed{7}", "7", "number", 1.0),
        ("total: \\boxed{1,250}", "1250", "number", 1.0),
        ("Answer: $18.00", "18", "number", 1.0),
        ("\\boxed{\\frac{1}{2}} then \\boxed{8}", "7", "number", 0.0),  # the last box counts
        ("The answer is \\boxed{B}", "B", "choice", 1.0),
        ("\\boxed{C. mitochondria}", "B", "choice", 0.0),
        ("order: \\boxed{g c d b h a}", "gcdbha", "exact", 1.0),
        ("no final answer here\n", "5", "number", 0.0),
    ],
)
def test_reward(reward, text, truth, kind, score):
    assert reward.compute_score("any", text, truth, {"answer_type": kind}) == score


def test_offline_dataset_builder(tmp_path, reward):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "prepare_data.py"),
            "--out",
            str(tmp_path),
            "--offline",
            "--train-per-domain",
            "20",
            "--test-per-domain",
            "5",
        ],
        check=True,
        capture_output=True,
    )
    train = pd.read_parquet(tmp_path / "train.parquet")
    test = pd.read_parquet(tmp_path / "test.parquet")
    assert train["domain"].value_counts().to_dict() == {d: 20 for d in DOMAINS}
    assert len(test) == 15
    assert not set(train["prompt"].map(lambda m: m[0]["content"])) & set(
        test["prompt"].map(lambda m: m[0]["content"])
    )
    for _, r in train.iterrows():  # the ground truth, boxed, always scores 1
        truth = r["reward_model"]["ground_truth"]
        assert (
            reward.compute_score(
                r["data_source"], f"\\boxed{{{truth}}}", truth, dict(r["extra_info"])
            )
            == 1.0
        )


def dry_run(script: str, *args: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(EXAMPLES / script), *args],
        check=True,
        text=True,
        capture_output=True,
        env={**os.environ, "DATAFLEX_DRY_RUN": "1"},
    )
    return out.stdout.splitlines()


@pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")
@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("strategy", ["baseline", *[p.stem for p in STRATEGIES]])
def test_launch_script_is_valid_for_verl(script, strategy):
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    from dataflex_rl.hosts.verl.trainer import DataflexTrainer
    from tests.hosts.verl_helpers import CONFIG_DIR

    overrides = dry_run(script, strategy)
    assert "trainer.v1.trainer_mode=dataflex" in overrides
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)  # unknown keys fail
    trainer = DataflexTrainer(config)  # the dataflex block and its fit with verl's settings
    assert trainer.trainer_mode == "sync"


@pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")
def test_yaml_config_route():
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    from dataflex_rl.hosts.verl.trainer import DataflexTrainer

    with initialize_config_dir(config_dir=str(EXAMPLES / "config"), version_base=None):
        config = compose(config_name="dataflex_grpo")
    assert config.trainer.v1.trainer_mode == "dataflex"
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 256  # verl's defaults came in
    assert DataflexTrainer(config).dataflex.strategy == "difffilter"
