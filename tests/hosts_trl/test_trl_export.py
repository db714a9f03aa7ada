"""The engine's instrument through TRL: ``dataflex-rl export policy`` and ``export tasks`` load
in TRL's environment (transformers 5.x), TRL generates from exactly the engine's prompt ids,
its per-domain greedy evaluation equals the engine's on the same held-out problems, and a
`DataflexGRPOTrainer` trains on the exported directory and dataset."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from dataflex_rl.cli import main  # noqa: E402
from dataflex_rl.tasks.rewards import correct  # noqa: E402
from tests.hosts_trl.trainers import dataflex_trainer, logged  # noqa: E402

DOMAINS = ("math", "logic", "science")
#: held-out problems per domain TRL evaluates (the first ones, as the engine's eval.per_domain)
HELD_OUT = 6


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("exported")
    assert main(["export", "policy", "--out", str(root / "policy")]) == 0
    argv = ["export", "tasks", f"eval.per_domain={HELD_OUT}", "--out", str(root / "tasks")]
    assert main(argv) == 0
    return root


@pytest.fixture(scope="module")
def data(exported):
    from datasets import Dataset

    tasks = exported / "tasks"
    train = Dataset.from_parquet(str(tasks / "train.parquet"))
    evals = {d: Dataset.from_parquet(str(tasks / "eval" / f"{d}.parquet")) for d in DOMAINS}
    return train, evals


def _trainer(exported, data, out, **kw):
    from transformers import AutoTokenizer

    policy = str(exported / "policy")
    train, evals = data
    return dataflex_trainer(
        out,
        dataset=train,
        eval_dataset=evals,
        reward=[correct],
        model=policy,
        tokenizer=AutoTokenizer.from_pretrained(policy),
        max_completion_length=10,  # the engine's grpo.max_new_tokens
        **kw,
    )


def test_trl_evaluates_each_domain_greedily_as_the_engine_does(exported, data, tmp_path):
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.evaluation import evaluate
    from dataflex_rl.hosts.engine.policy import load_policy
    from dataflex_rl.hosts.engine.trainer import tasks_from_config

    trainer = _trainer(
        exported,
        data,
        tmp_path,
        generation_kwargs={"do_sample": False},
        num_generations_eval=2,
        per_device_eval_batch_size=4,
    )
    trainer.evaluate()
    engine = evaluate(
        load_policy("tiny"),
        tasks_from_config(load_config()),
        per_domain=HELD_OUT,
        samples=0,
        max_new_tokens=10,
    )
    # TRL logs each eval dataset as its own entry: the domain names the loss key only
    got = {
        d: next(
            e["eval_rewards/correct/mean"]
            for e in trainer.state.log_history
            if f"eval_{d}_loss" in e
        )
        for d in DOMAINS
    }
    assert got == pytest.approx({d: engine[f"eval/{d}/greedy"] for d in DOMAINS}, abs=1e-6)
    assert 0.0 < sum(got.values()) < len(DOMAINS)  # neither all right nor all wrong


def test_dataflex_trainer_trains_on_the_export_from_the_engine_prompt_ids(
    exported, data, tmp_path, monkeypatch
):
    from trl import GRPOTrainer

    from dataflex_rl.hosts.engine.policy import ASSETS_DIR
    from dataflex_rl.hosts.engine.tokenizer import CharTokenizer

    seen = []
    original = GRPOTrainer._generate_and_score_completions

    def recorded(self, inputs):
        out = original(self, inputs)
        if self.model.training:
            ids = [row[m.bool()].tolist() for row, m in zip(out["prompt_ids"], out["prompt_mask"])]
            seen.append(([r["prompt"][0]["content"] for r in inputs], ids))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recorded)
    trainer = _trainer(exported, data, tmp_path, strategy="difffilter")
    trainer.train()
    char = CharTokenizer.load(ASSETS_DIR / "tiny")  # the engine's own tokenizer
    assert len(seen) == 2
    for prompts, ids in seen:
        assert ids == [[char.bos_id, *char.encode(p)] for p in prompts]
    rewards = logged(trainer, "rewards/correct/mean")
    assert len(rewards) == 2 and 0.0 < sum(rewards) < 2.0  # the warm start earns some
    assert len(logged(trainer, "dataflex/kept_response_fraction")) == 2
