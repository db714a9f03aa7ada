"""`DataflexGRPOTrainer` / `DataflexGRPOConfig` on real TRL: the block is checked before any
work (errors name the key), it can come from the config or the trainer, and evaluation goes
through TRL's own path untouched."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from tests.hosts_trl.tiny import hashed_reward, tiny_dataset, tiny_model, tiny_tokenizer  # noqa: E402
from tests.hosts_trl.trainers import dataflex_trainer, grpo_args, logged  # noqa: E402

#: a model path that does not exist: a check that raises first did no work before it
NO_MODEL = "/nonexistent/model"


def test_config_checks_the_block_when_built(tmp_path):
    from dataflex_rl.hosts.trl import DataflexGRPOConfig

    with pytest.raises(ConfigError, match=r"dataflex\.strategi.*Did you mean 'strategy'"):
        grpo_args(tmp_path, DataflexGRPOConfig, dataflex={"strategi": "difffilter"})
    args = grpo_args(tmp_path, DataflexGRPOConfig, dataflex={"strategy": "difffilter"})
    assert args.to_dict()["dataflex"] == {"strategy": "difffilter"}  # plain data in the args


def test_trainer_errors_come_before_the_model_is_loaded(tmp_path):
    from trl import GRPOConfig

    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer

    def build(args, **kw):
        return DataflexGRPOTrainer(model=NO_MODEL, reward_funcs=hashed_reward, args=args, **kw)

    with pytest.raises(ConfigError, match="Did you mean 'difffilter'"):
        build(grpo_args(tmp_path), dataflex={"strategy": "difffilterr"})
    with pytest.raises(ConfigError, match="multi_objective_aggregation: 'normalize_then_sum'"):
        build(
            grpo_args(tmp_path, multi_objective_aggregation="normalize_then_sum"),
            dataflex={"strategy": "maxvar"},
        )
    with pytest.raises(ConfigError, match=r"recompute_advantages.*scale_rewards='batch'"):
        spec = {"select": {"preset": "difffilter", "recompute_advantages": True}}
        build(grpo_args(tmp_path, scale_rewards="batch"), dataflex={"strategy": spec})
    with pytest.raises(ConfigError, match="given both to DataflexGRPOTrainer"):
        build(
            grpo_args(tmp_path, DataflexGRPOConfig, dataflex={"strategy": "topk"}),
            dataflex={"strategy": "topk"},
        )
    assert isinstance(grpo_args(tmp_path), GRPOConfig)


def test_dataset_errors_come_before_the_model_is_loaded(tmp_path):
    """The intake's checks read only the block and the training set: with a model path that
    does not exist, the dataset's error (not the model's OSError) proves they ran first."""
    from datasets import Dataset

    from dataflex_rl.hosts.trl import DataflexGRPOTrainer

    no_domain = Dataset.from_dict({"prompt": ["a", "b"], "pid": ["0", "1"]})

    def build(dataset, **block):
        return DataflexGRPOTrainer(
            model=NO_MODEL,
            reward_funcs=hashed_reward,
            args=grpo_args(tmp_path),
            train_dataset=dataset,
            dataflex={"strategy": "static", **block},
        )

    with pytest.raises(ConfigError, match="domain"):
        build(no_domain)
    with pytest.raises(ConfigError, match="'topic'.*prompt"):
        build(tiny_dataset(per_domain=2), domain_key="topic")
    with pytest.raises(ValueError, match="train_dataset: .*map-style.*IterableDataset"):
        build(tiny_dataset(per_domain=2).to_iterable_dataset())


def test_block_from_the_trainer_or_a_yaml_file(tmp_path):
    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer

    tok = tiny_tokenizer()
    plain = DataflexGRPOTrainer(
        model=tiny_model(tok),
        reward_funcs=hashed_reward,
        args=grpo_args(tmp_path),  # a stock GRPOConfig
        train_dataset=tiny_dataset(),
        processing_class=tok,
        dataflex={"strategy": "topk"},
    )
    assert plain.driver.strategy.spec.name == "topk" and plain.driver.intake is None
    block = tmp_path / "dataflex.yaml"
    block.write_text("dataflex:\n  strategy: static\n  seed: 4\n")
    from_file = DataflexGRPOTrainer(
        model=tiny_model(tok),
        reward_funcs=hashed_reward,
        args=grpo_args(tmp_path, DataflexGRPOConfig, dataflex=str(block)),
        train_dataset=tiny_dataset(),
        processing_class=tok,
    )
    assert from_file.driver.strategy.spec.name == "static" and from_file.dataflex.seed == 4
    assert from_file.driver.intake.domains == ("easy", "hard", "mid")


def test_evaluation_passes_through_untouched(tmp_path):
    trainer = dataflex_trainer(
        tmp_path,
        "maxvar",
        max_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=8,
        eval_dataset=tiny_dataset(per_domain=2),
    )
    calls = []
    decide = trainer.driver.strategy.decide
    trainer.driver.strategy.decide = lambda b, o=None: calls.append(b.batch_size) or decide(b, o)
    metrics = trainer.evaluate()
    assert calls == [] and trainer.driver.decisions == 0
    assert not [k for k in metrics if "dataflex" in k] and "eval_reward" in metrics
    trainer.train()  # training decides once per generation; evaluation still does not
    assert calls == [16] and trainer.driver.decisions == 1
    evals = [e for e in trainer.state.log_history if "eval_reward" in e]
    assert evals and not [k for e in evals for k in e if "dataflex" in k]
    assert logged(trainer, "dataflex/kept_response_fraction") == [0.5]


def test_trl_parser_reads_the_block_from_the_command_line_or_the_config_file(tmp_path):
    from trl import TrlParser

    from dataflex_rl.hosts.trl import DataflexGRPOConfig

    block = tmp_path / "dataflex.yaml"
    block.write_text("strategy: difffilter\n")
    common = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false"]
    parser = TrlParser((DataflexGRPOConfig,))
    (args,) = parser.parse_args_and_config([*common, "--dataflex", str(block)])
    assert args.dataflex == str(block)
    config = tmp_path / "grpo.yaml"
    config.write_text(f"output_dir: {tmp_path}\nuse_cpu: true\ndataflex:\n  strategy: maxvar\n")
    (args,) = parser.parse_args_and_config(["--config", str(config)])
    assert args.dataflex == {"strategy": "maxvar"}


def test_num_iterations_reuses_one_decision(tmp_path):
    """mu = 2: one generation (and one decision) per two optimizer steps; TRL reuses the
    decided advantages and masks for both."""
    trainer = dataflex_trainer(tmp_path, "maxvar", max_steps=4, num_iterations=2)
    trainer.train()
    assert trainer.driver.decisions == 2
    assert logged(trainer, "dataflex/kept_response_fraction") == [0.5, 0.5]


def test_decision_log_replays_exactly(tmp_path):
    """The log of a TRL run (rank 0) replays the run's own decisions bit for bit."""
    from dataflex_rl.harness.replay.replay import read_log, replay

    block = {"strategy": "difffilter", "decision_log": {"enabled": True, "steps_per_file": 1}}
    trainer = dataflex_trainer(tmp_path, block, max_steps=2)
    trainer.train()
    log = read_log(tmp_path / "decisions")
    assert log.host == "trl" and log.num_steps == 2 and log.settings["loss_type"] == "dapo"
    assert replay(log, ["difffilter"]).overall["difffilter"]["exact_steps"] == 2


def test_kl_term_follows_the_row_count_renormalization(tmp_path, monkeypatch):
    """grpo divides by the rows of the micro-batch: after maxvar drops half of them, the kept
    rows' KL would be averaged over N rows; the loss runs with beta x c (c = N / R = 2)."""
    from trl import GRPOTrainer

    seen = []
    stock = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        seen.append(self.beta)
        return stock(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    tiny_model(tiny_tokenizer()).save_pretrained(tmp_path / "tiny")  # TRL loads the reference
    trainer = dataflex_trainer(
        tmp_path, "maxvar", model=str(tmp_path / "tiny"), max_steps=1, beta=0.04, loss_type="grpo"
    )
    trainer.train()
    assert logged(trainer, "dataflex/trl/advantage_scale") == [2.0]
    assert seen == [pytest.approx(0.08)] * 2 and trainer.beta == 0.04  # 2 micro-batches
