"""GRPO with TRL 1.16 and a dataflex strategy: fine-tune a local causal LM on three domains.

    # any local Hugging Face causal LM (a GPU if there is one), the strategy the verl examples use
    python examples/trl/train_grpo.py --model /path/to/Qwen2.5-0.5B-Instruct \\
        --strategy examples/verl/strategies/combined.yaml --steps 200
    # no --model: a tiny 2-layer model and a character tokenizer built in code (CPU, seconds);
    # its reward is a character hint it can partly earn (the verifiers it never passes)
    python examples/trl/train_grpo.py --steps 2

Against a stock TRL script, two things change: the trainer class (`DataflexGRPOTrainer`) and one
config block (``dataflex={"strategy": ...}`` in `DataflexGRPOConfig`); see docs/hosts/trl.md.
The prompts come from dataflex-rl's task generators (math, logic, science, each with its own
verifier as the reward) and carry a ``domain`` column for mixing. Metrics go to TRL's logs
(``report_to``) and, at the end, to ``OUTPUT/log_history.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
DEFAULT_STRATEGY = HERE.parent / "verl" / "strategies" / "combined.yaml"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", help="local HF causal LM folder (default: a tiny model built in code)"
    )
    p.add_argument("--strategy", default=str(DEFAULT_STRATEGY), help="strategy YAML or preset")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps (max_steps)")
    p.add_argument("--output-dir", default="runs/trl_grpo", help="TRL's output_dir")
    p.add_argument("--loss-type", default="dapo", help="TRL's loss_type (every 1.16 one works)")
    p.add_argument("--prompts-per-domain", type=int, default=64, help="training prompts each")
    p.add_argument(
        "--batch", type=int, default=None, help="per_device_train_batch_size (default 16 / 8)"
    )
    p.add_argument("--num-generations", type=int, default=4, help="completions per prompt (G)")
    p.add_argument("--max-completion-length", type=int, default=None, help="default 16 / 256")
    p.add_argument("--lr", type=float, default=1e-5, help="learning rate")
    p.add_argument("--report-to", default="none", help="TRL's report_to (tensorboard, wandb...)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_prompts(per_domain: int, seed: int):
    """A HF ``Dataset`` of generated prompts (columns prompt, domain, key) and the task set."""
    from datasets import Dataset

    from dataflex_rl.tasks import build_taskset

    tasks = build_taskset(("math", "logic", "science"), per_domain, 8, seed)
    rows = [p for d in tasks.domains for p in tasks.train[d]]
    data = Dataset.from_dict(
        {
            "prompt": [p.prompt for p in rows],
            "domain": [p.domain for p in rows],
            "key": [p.key for p in rows],
        }
    )
    return data, tasks, {p.key: p for p in rows}


def verifier_reward(tasks, problems):
    """TRL reward function: 1.0 when the domain's verifier accepts the completion."""

    def correct(prompts, completions, key, **_):
        return [tasks.verify(problems[k], c) for k, c in zip(key, completions)]

    return correct


def first_char_reward(problems):
    """TRL reward function for the tiny model: 1.0 when the completion contains the first
    character of the reference answer. A random 2-layer model never passes the verifier (every
    group all 0, every response dropped), but earns this on some completions: groups with
    mixed rewards and groups without, so the strategy has something to act on."""

    def contains_first(prompts, completions, key, **_):
        return [float(problems[k].answer[:1] in c) for k, c in zip(key, completions)]

    return contains_first


def tiny_model_and_tokenizer(charset: str, seed: int):
    """A character tokenizer over ``charset`` and a 2-layer Qwen2 (hidden 64), in float32."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(sorted(set(charset)))})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(""), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).to(torch.float32), tok


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer

    data, tasks, problems = build_prompts(args.prompts_per_domain, args.seed)
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto")
        tok = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    else:
        model, tok = tiny_model_and_tokenizer(tasks.charset(), args.seed)
    gpu = torch.cuda.is_available()
    config = DataflexGRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        # tiny model: 4 prompts x G = 4 a step, enough for groups with and without a reward
        per_device_train_batch_size=args.batch or (8 if args.model else 16),
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length or (256 if args.model else 16),
        learning_rate=args.lr,
        loss_type=args.loss_type,
        use_cpu=not gpu,
        bf16=gpu and torch.cuda.is_bf16_supported(),  # TRL's default bf16=True also on CPU
        gradient_checkpointing=bool(args.model),
        logging_steps=1,
        save_strategy="no",
        report_to=args.report_to,
        seed=args.seed,
        # the one block a TRL script adds: the same schema as the verl host's
        dataflex={"strategy": args.strategy, "domain_key": "domain", "seed": args.seed},
    )
    trainer = DataflexGRPOTrainer(
        model=model,
        reward_funcs=verifier_reward(tasks, problems)
        if args.model
        else first_char_reward(problems),
        args=config,
        train_dataset=data,
        processing_class=tok,
    )
    trainer.train()
    history = trainer.state.log_history
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    last = next((h for h in reversed(history) if "dataflex/time_ms" in h), {})
    shown = ("dataflex/kept_response_fraction", "dataflex/weight_ess_fraction", "reward")
    print({k: last[k] for k in shown if k in last})
    return history


if __name__ == "__main__":
    main()
