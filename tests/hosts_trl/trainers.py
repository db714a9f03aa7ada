"""Build a `DataflexGRPOTrainer` (or a stock ``GRPOTrainer``) on the tiny offline setup, and
record what each generation batch saw: the intake's draw, the strategy's batch and decision,
and the output TRL's loss reads. Import after ``pytest.importorskip("trl")``."""

from __future__ import annotations

import copy

import torch

from tests.hosts_trl.tiny import hashed_reward, tiny_dataset, tiny_model, tiny_tokenizer

#: a generation batch of 16 completions: 4 prompts x G = 4, two micro-batches of 8
GEN = {"per_device_train_batch_size": 8, "num_generations": 4, "gradient_accumulation_steps": 2}


def grpo_args(output_dir, cls=None, **overrides):
    """TRL settings for a few fast, exact CPU steps (fp32, no saving, log every step)."""
    from trl import GRPOConfig

    kw = {
        **GEN,
        "output_dir": str(output_dir),
        "max_completion_length": 8,
        "max_steps": 2,
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": 0,
        "disable_tqdm": True,
    }
    kw.update(overrides)
    return (cls or GRPOConfig)(**kw)


def dataflex_trainer(
    output_dir,
    strategy="baseline",
    dataset=None,
    reward=None,
    eval_dataset=None,
    model=None,
    tokenizer=None,
    **overrides,
):
    """A `DataflexGRPOTrainer` with ``dataflex={"strategy": strategy}`` (a dict block when
    ``strategy`` is a dict with a ``strategy`` key) and `grpo_args` ``overrides``; ``model``
    (an object or a saved folder) defaults to a fresh `tiny_model`, ``tokenizer`` to
    `tiny_tokenizer`."""
    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer

    block = strategy if isinstance(strategy, dict) and "strategy" in strategy else None
    block = block or {"strategy": strategy}
    tok = tiny_tokenizer() if tokenizer is None else tokenizer
    return DataflexGRPOTrainer(
        model=tiny_model(tok) if model is None else model,
        reward_funcs=reward or hashed_reward,
        args=grpo_args(output_dir, DataflexGRPOConfig, dataflex=block, **overrides),
        train_dataset=tiny_dataset() if dataset is None else dataset,
        eval_dataset=eval_dataset,
        processing_class=tok,
    )


class Recorder:
    """Per generation: ``draws`` (rows, domain ids, proportions in force), ``batches`` and
    ``decisions`` (what `Strategy.decide` saw and returned), ``outs`` (copies of the output
    after the decision was applied)."""

    def __init__(self, trainer) -> None:
        self.draws, self.batches, self.decisions, self.outs = [], [], [], []
        strategy = trainer.driver.strategy
        decide = strategy.decide

        def recorded_decide(batch, observed=None):
            decision = decide(batch, observed)
            self.batches.append(batch)
            self.decisions.append(decision)
            return decision

        strategy.decide = recorded_decide
        intake = trainer.driver.intake
        if intake is not None:
            draw = intake.draw

            def recorded_draw(n, strat, step, paused=None):
                props = strat.proportions
                rows, doms, metrics = draw(n, strat, step, paused)
                self.draws.append((list(rows), list(doms), props))
                return rows, doms, metrics

            intake.draw = recorded_draw
        generate = trainer._generate_and_score_completions

        def recorded_generate(inputs):
            out = generate(inputs)
            if trainer.model.training:
                self.outs.append(
                    {
                        k: v.detach().clone() if torch.is_tensor(v) else copy.copy(v)
                        for k, v in out.items()
                    }
                )
            return out

        trainer._generate_and_score_completions = recorded_generate


def logged(trainer, key: str) -> list[float]:
    """The values of ``key`` in the trainer's log history, in order."""
    return [e[key] for e in trainer.state.log_history if key in e]


def record_trl_generations(monkeypatch, trainer) -> list[dict]:
    """What TRL's own ``GRPOTrainer._generate_and_score_completions`` received and returned,
    per training generation of ``trainer``: ``pids`` and ``domains`` of the rows it generated
    for, a copy of the ``advantages`` it computed (before the strategy applied anything) and
    its ``tokens`` (completion tokens).
    Patched on the class, so the ``super()`` call inside the dataflex trainer is seen."""
    from trl import GRPOTrainer

    seen: list[dict] = []
    original = GRPOTrainer._generate_and_score_completions

    def recorded(self, inputs):
        out = original(self, inputs)
        if self is trainer and self.model.training:
            seen.append(
                {
                    "pids": [row["pid"] for row in inputs],
                    "domains": [row["domain"] for row in inputs],
                    "advantages": out["advantages"].detach().clone(),
                    "tokens": int(out["completion_mask"].sum()),
                }
            )
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recorded)
    return seen
