"""A plain GRPO loop in PyTorch, with a dataflex-rl strategy where your own trainer would call it.

Read it top to bottom: draw prompts, sample a group of responses per prompt, verify them,
compute group-normalized advantages, then hand the batch to `Strategy.decide` and let its
decision shape the loss (the keep mask, the weights) and the next draw (the domain
proportions). Nothing else of dataflex-rl is used: the policy is a Hugging Face causal LM, the
loss is a few lines of torch.

    dataflex-rl export policy --out exported/tiny     # the engine's warm-started tiny policy
    python examples/minimal_grpo.py --policy exported/tiny --strategy difffilter --steps 50

``--strategy`` takes a preset (``dataflex-rl list``) or a strategy YAML file; try
``difffilter`` (drops groups whose responses all agree), ``softmax`` (reweights by |advantage|),
``dump_ucb`` (mixes domains) or ``baseline`` (changes nothing). The embedded engine
(``dataflex-rl train``) is this loop with evaluation, checkpoints and a faster sampler.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dataflex_rl import RolloutBatch, Strategy, build_taskset


@dataclass
class Args:
    policy: str = field(
        default="exported/tiny", metadata={"help": "Hugging Face causal-LM directory"}
    )
    strategy: str = field(default="difffilter", metadata={"help": "preset name or YAML file"})
    steps: int = field(default=50, metadata={"help": "GRPO steps"})
    prompts_per_step: int = field(default=16, metadata={"help": "prompts (groups) per step"})
    group_size: int = field(default=8, metadata={"help": "responses sampled per prompt"})
    max_new_tokens: int = field(default=10, metadata={"help": "response budget, EOS included"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    lr: float = field(default=0.02, metadata={"help": "SGD learning rate"})
    clip: float = field(default=0.2, metadata={"help": "PPO ratio clip (1 +- clip)"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm"})
    seed: int = field(default=0, metadata={"help": "seed of sampling and prompt draws"})


def parse_args(argv: list[str] | None = None) -> Args:
    """`Args` from the command line: one ``--option`` per field, its help from the field."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = f"--{f.name.replace('_', '-')}"
        p.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"])
    return Args(**vars(p.parse_args(argv)))


def token_log_probs(model, sequences, attention_mask, prompt_len, temperature):
    """[B, T] log-prob of each response token (sequences[:, prompt_len:]) under ``model``."""
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding: count real tokens
    logits = model(sequences, attention_mask=attention_mask, position_ids=positions).logits
    logits = logits[:, prompt_len - 1 : -1].float() / temperature  # position t predicts t + 1
    return torch.log_softmax(logits, -1).gather(-1, sequences[:, prompt_len:, None])[..., 0]


def train(args: Args):
    """Run the loop; returns the trained model and one record per step."""
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.policy)
    model = AutoModelForCausalLM.from_pretrained(args.policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    # the engine's default tasks (the levels the tiny policy was warm-started on), each
    # domain with its own 0/1 verifier
    tasks = build_taskset(("math", "logic", "science"), difficulty=dict(math=5, logic=3, science=4))
    strategy = Strategy(args.strategy, domains=tasks.domains)
    P, G = args.prompts_per_step, args.group_size
    history = []
    for step in range(args.steps):
        # 1. draw P prompts: domains by the strategy's proportions when it mixes, else uniform
        proportions = strategy.proportions
        if proportions is None:
            proportions = torch.full((len(tasks.domains),), 1 / len(tasks.domains))
        domain_of_prompt = torch.multinomial(proportions, P, replacement=True).tolist()
        problems = [random.choice(tasks.train[tasks.domains[d]]) for d in domain_of_prompt]

        # 2. sample G responses per prompt (rows i*G .. i*G+G-1 are prompt i's group)
        model.eval()
        enc = tok([p.prompt for p in problems], return_tensors="pt", padding=True)
        with torch.no_grad():
            sequences = model.generate(
                **enc,
                do_sample=True,
                temperature=args.temperature,
                top_k=0,  # sample from the full distribution
                top_p=1.0,
                max_new_tokens=args.max_new_tokens,
                num_return_sequences=G,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        prompt_len = enc["input_ids"].shape[1]
        attention_mask = enc["attention_mask"].repeat_interleave(G, 0)
        response = sequences[:, prompt_len:]  # [B, T]
        # a response's tokens run up to and including its first EOS
        is_eos = (response == tok.eos_token_id).long()
        response_mask = (is_eos.cumsum(1) - is_eos) == 0  # [B, T] bool
        full_mask = torch.cat([attention_mask, response_mask.long()], 1)

        # 3. rewards: each response verified against its prompt's answer
        # (tokens after the EOS become padding, which decoding skips)
        texts = tok.batch_decode(
            response.masked_fill(~response_mask, tok.pad_token_id), skip_special_tokens=True
        )
        rows = [p for p in problems for _ in range(G)]
        rewards = torch.tensor(
            [tasks.verify(p, t) for p, t in zip(rows, texts, strict=True)], dtype=torch.float32
        )

        # 4. GRPO advantages: standardize rewards within each group
        by_group = rewards.view(P, G)
        adv = (by_group - by_group.mean(1, keepdim=True)) / (by_group.std(1, keepdim=True) + 1e-6)
        advantages = adv.reshape(-1, 1) * response_mask  # [B, T], constant over each response
        with torch.no_grad():
            old_log_probs = token_log_probs(
                model, sequences, full_mask, prompt_len, args.temperature
            )

        # 5. the strategy decides: which responses count, how much, and the next proportions
        batch = RolloutBatch(
            rewards=rewards,
            response_mask=response_mask,
            group_ids=torch.arange(P).repeat_interleave(G),
            domain_ids=torch.tensor(domain_of_prompt).repeat_interleave(G),
            domains=tasks.domains,
            advantages=advantages,
            old_log_probs=old_log_probs,
            prompt_keys=tuple(p.key for p in rows),
            step=step,
        )
        decision = strategy.decide(batch)
        if decision.advantages is not None:  # selectors that re-centre on the kept subset
            advantages = decision.advantages

        # 6. the clipped policy-gradient loss per token, weighed and averaged by the decision
        model.train()
        loss_tokens = int(decision.denominator_tokens())
        if bool(decision.keep_mask.any()):
            log_probs = token_log_probs(model, sequences, full_mask, prompt_len, args.temperature)
            ratio = torch.exp(log_probs - old_log_probs)
            clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
            loss = decision.aggregate(-torch.min(ratio * advantages, clipped * advantages))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()

        kept = float(decision.keep_mask.float().mean())
        print(
            f"step {step:>3}  reward {rewards.mean():.3f}  kept {kept:.2f}  "
            f"loss tokens {loss_tokens}"
        )
        history.append(
            {
                "step": step,
                "rewards": rewards.tolist(),
                "response_lengths": response_mask.sum(1).tolist(),
                "keep_mask": decision.keep_mask.tolist(),
                "loss_tokens": loss_tokens,
                "proportions": proportions.tolist(),
            }
        )
    return model, history


if __name__ == "__main__":
    train(parse_args())
