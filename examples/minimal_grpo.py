"""A plain GRPO loop in PyTorch, with a dataflex-rl strategy where your own trainer would call it.

Read it top to bottom. Each step the `Driver` (what every host runs: the embedded engine, TRL,
verl) draws the prompts: per domain at the strategy's proportions, without the ones its skip
policy predicts carry no signal. The loop samples a group of responses per prompt, verifies
them and computes group-normalized advantages; a strategy that refills (``dapo``) gets new
groups for the ones its selector drops (the driver's step: the loop writes only how it
generates and which rows a chosen group is). The driver's decision then shapes the loss:
``decision.aggregate`` weighs the per-token loss (the keep mask, the weights) and averages it
over the decision's denominator. The policy is a Hugging Face causal LM, the loss a few lines
of torch.

    dataflex-rl export policy --out exported/tiny     # the engine's warm-started tiny policy
    python examples/minimal_grpo.py --policy exported/tiny --strategy difffilter --steps 50

``--strategy`` takes a preset (``dataflex-rl list``) or a strategy YAML file; try
``difffilter`` (drops groups whose responses all agree), ``dapo`` (drops them and refills),
``high_entropy`` (trains on the top 20% of tokens by entropy), ``softmax`` (reweights by
|advantage|), ``dump_ucb`` (mixes domains), configs/strategies/greso.yaml (skips prompts
before generation) or ``baseline`` (changes nothing). A strategy that needs what this loop
does not give is refused before the first step. The embedded engine (``dataflex-rl train``)
is this loop with evaluation, checkpoints and a faster sampler.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from dataclasses import dataclass, field
from operator import attrgetter

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dataflex_rl import Driver, Generation, Intake, RolloutBatch, Strategy, build_taskset

#: the `RolloutBatch` fields this loop fills (entropies when the strategy reads them)
FIELDS = ("advantages", "old_log_probs", "entropies", "prompt_keys", "step")


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
    train_size: int = field(default=2000, metadata={"help": "training prompts per domain"})
    seed: int = field(default=0, metadata={"help": "seed of sampling and prompt draws"})


def parse_args(argv: list[str] | None = None) -> Args:
    """`Args` from the command line: one ``--option`` per field, its help from the field."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = f"--{f.name.replace('_', '-')}"
        p.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"])
    return Args(**vars(p.parse_args(argv)))


def forward(model, seq, attention_mask, prompt_len, response_mask, temperature, entropies=False):
    """[B, T] log-prob of each response token (seq[:, prompt_len:]) under ``model``, and with
    ``entropies`` the policy's entropy there (else None); 0 off ``response_mask``."""
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding: count real tokens
    logits = model(seq, attention_mask=attention_mask, position_ids=positions).logits
    logits = logits[:, prompt_len - 1 : -1].float() / temperature  # position t predicts t + 1
    logp = torch.log_softmax(logits, -1)
    out = logp.gather(-1, seq[:, prompt_len:, None])[..., 0].masked_fill(~response_mask, 0.0)
    if not entropies:
        return out, None
    return out, (-(logp.exp() * logp).sum(-1)).masked_fill(~response_mask, 0.0)


def rollout(model, tok, tasks, problems, domain_ids, args, entropies, counts=None):
    """Sample G responses per problem (``counts``: counts[i] of problem i; each problem's
    rows together, in order), verify them, and their old log-probs: one generation's
    tensors, as a dict with one entry per response row."""
    G = args.group_size
    n = [G] * len(problems) if counts is None else counts.tolist()
    rows = [p for p, k in zip(problems, n, strict=True) for _ in range(k)]
    model.eval()
    # one prompt per problem and G samples each, or (uneven counts) one prompt per row
    enc = tok(
        [p.prompt for p in (problems if counts is None else rows)],
        return_tensors="pt",
        padding=True,
    )
    with torch.no_grad():
        seq = model.generate(
            **enc,
            do_sample=True,
            temperature=args.temperature,
            top_k=0,  # sample from the full distribution
            top_p=1.0,
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=G if counts is None else 1,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        prompt_len = enc["input_ids"].shape[1]
        response = seq[:, prompt_len:]  # [B, T]
        # a response's tokens run up to and including its first EOS
        is_eos = (response == tok.eos_token_id).long()
        response_mask = (is_eos.cumsum(1) - is_eos) == 0  # [B, T] bool
        attention = enc["attention_mask"].repeat_interleave(G if counts is None else 1, 0)
        full_mask = torch.cat([attention, response_mask.long()], 1)
        old, ent = forward(
            model, seq, full_mask, prompt_len, response_mask, args.temperature, entropies
        )
    # rewards: each response verified against its prompt's answer (tokens after the EOS
    # become padding, which decoding skips)
    texts = tok.batch_decode(
        response.masked_fill(~response_mask, tok.pad_token_id), skip_special_tokens=True
    )
    rewards = torch.tensor(
        [tasks.verify(p, t) for p, t in zip(rows, texts, strict=True)], dtype=torch.float32
    )
    doms = [d for d, k in zip(domain_ids, n, strict=True) for _ in range(k)]
    return {
        "problems": rows,
        "domain_ids": doms,
        "group_ids": torch.arange(len(problems)).repeat_interleave(torch.tensor(n)),
        "seq": seq,
        "attention_mask": full_mask,
        "prompt_len": prompt_len,
        "response_mask": response_mask,
        "rewards": rewards,
        "old_log_probs": old,
        "entropies": ent,
    }


def cat_right(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[B_i, T_i] tensors -> [sum B_i, max T_i], each right-padded with zeros."""
    T = max(t.shape[1] for t in tensors)
    return torch.cat([torch.cat([t, t.new_zeros(t.shape[0], T - t.shape[1])], 1) for t in tensors])


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B] GRPO advantages: each reward standardized within its group (any group sizes)."""
    G = int(group_ids.max()) + 1
    count = torch.zeros(G).index_add_(0, group_ids, torch.ones_like(rewards))
    mean = torch.zeros(G).index_add_(0, group_ids, rewards) / count
    dev = rewards - mean[group_ids]
    std = (torch.zeros(G).index_add_(0, group_ids, dev**2) / (count - 1)).sqrt()
    return dev / (std[group_ids] + 1e-6)


def batch_of(parts: list[dict], group_ids: torch.Tensor, domains, step: int) -> RolloutBatch:
    """The `RolloutBatch` of response rows (``parts``, in order; ``group_ids`` their groups):
    the strategy's view of them, with GRPO advantages per group."""
    problems = [p for part in parts for p in part["problems"]]
    rewards = torch.cat([part["rewards"] for part in parts])
    response_mask = cat_right([part["response_mask"] for part in parts])
    entropies = parts[0]["entropies"] is not None
    return RolloutBatch(
        rewards=rewards,
        response_mask=response_mask,
        group_ids=group_ids,
        domain_ids=torch.tensor([d for part in parts for d in part["domain_ids"]]),
        domains=domains,
        # constant over a response's tokens
        advantages=grpo_advantages(rewards, group_ids)[:, None] * response_mask,
        old_log_probs=cat_right([part["old_log_probs"] for part in parts]),
        entropies=cat_right([part["entropies"] for part in parts]) if entropies else None,
        prompt_keys=tuple(p.key for p in problems),
        step=step,
    )


class Loop:
    """What this loop gives the driver's step (`dataflex_rl.StepHost`): how it generates and
    scores a list of prompts, and how it takes chosen responses out of its generations. The
    driver does the rest: draws, refill rounds and per-prompt budgets, which responses the
    step trains on, the decision, and what the strategy learns from."""

    def __init__(self, model, tok, tasks, args, step, entropies):
        self.model, self.tok, self.tasks, self.args = model, tok, tasks, args
        self.step, self.entropies = step, entropies
        self.group_size = args.group_size

    def generate(self, items, domain_ids, round, counts=None):
        part = rollout(
            self.model, self.tok, self.tasks, items, domain_ids, self.args, self.entropies, counts
        )
        batch = batch_of([part], part["group_ids"], self.tasks.domains, self.step)
        return Generation(batch, rows=part, tokens=float(part["response_mask"].sum()))

    def assemble(self, generations, rows, group_ids, items, domain_ids):
        """The generations' response rows ``rows`` (indices over all of them, in order) as
        the groups ``group_ids``: one part per run of rows from one generation, and their
        `RolloutBatch` (advantages computed over the assembled groups)."""
        sizes = torch.tensor([g.batch.batch_size for g in generations])
        gen_of = torch.repeat_interleave(torch.arange(len(generations)), sizes)[rows]
        within = rows - (sizes.cumsum(0) - sizes)[gen_of]
        runs, counts = torch.unique_consecutive(gen_of, return_counts=True)
        parts = [
            take_rows(generations[int(g)].rows, idx)
            for g, idx in zip(runs, within.split(counts.tolist()))
        ]
        return parts, batch_of(parts, group_ids, self.tasks.domains, self.step)


def take_rows(part: dict, rows: torch.Tensor) -> dict:
    """The response rows ``rows`` of one generation's dict."""
    picked = rows.tolist()
    return {
        k: v[rows]
        if isinstance(v, torch.Tensor)
        else [v[i] for i in picked]
        if isinstance(v, list)
        else v
        for k, v in part.items()
    }


def policy_loss(decision, log_probs, old_log_probs, advantages, clip):
    """The clipped policy-gradient loss per token ([B, T] tensors), weighed and averaged by
    the decision: its keep mask and weights, over its denominator (`Decision.aggregate`)."""
    ratio = torch.exp(log_probs - old_log_probs)
    clipped = ratio.clamp(1 - clip, 1 + clip)
    return decision.aggregate(-torch.min(ratio * advantages, clipped * advantages))


def train(args: Args):
    """Run the loop; returns the trained model and one record per step."""
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    # the engine's default tasks (the levels the tiny policy was warm-started on), each
    # domain with its own 0/1 verifier
    tasks = build_taskset(
        ("math", "logic", "science"),
        train_size=args.train_size,
        difficulty=dict(math=5, logic=3, science=4),
    )
    # the strategy, told what this loop fills; the driver draws through an intake: per
    # domain at the strategy's proportions (uniform when it does not mix). A strategy that
    # needs more (a field, or the policy's prompt representation) stops here, in one line
    strategy = Strategy(args.strategy, domains=tasks.domains, available_fields=FIELDS)
    uniform = torch.full((len(tasks.domains),), 1 / len(tasks.domains), dtype=torch.float64)
    pools = [tasks.train[d] for d in tasks.domains]
    intake = Intake(
        pools, tasks.domains, uniform, seeds=(args.seed, args.seed), key=attrgetter("key")
    )
    driver = Driver(strategy, intake, host="minimal_grpo")
    entropies = "entropies" in strategy.requires  # the strategy declares what it reads

    tok = AutoTokenizer.from_pretrained(args.policy)
    model = AutoModelForCausalLM.from_pretrained(args.policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    history = []
    for step in range(args.steps):
        proportions = intake.target(strategy)
        # 1-5. the driver's step: prompts drawn (mixed, skipped), G responses each, rewards
        # and advantages (the loop's `generate`), refill rounds, the groups the step trains
        # on (the loop's `assemble`), and the strategy's decision: which responses (tokens)
        # count, how much, over what
        loop = Loop(model, tok, tasks, args, step, entropies)
        out = driver.step(loop, args.prompts_per_step, step)
        parts, batch, decision, metrics = out.rows, out.batch, out.decision, out.metrics
        advantages = batch.advantages if decision.advantages is None else decision.advantages

        # 6. the loss on every generation the step trains on, one policy update
        loss_tokens, loss = int(decision.denominator_tokens()), None
        if bool(decision.keep_mask.any()):
            model.train()
            inputs = ("seq", "attention_mask", "prompt_len", "response_mask")
            log_probs = cat_right(
                [forward(model, *(p[k] for k in inputs), args.temperature)[0] for p in parts]
            )
            loss = policy_loss(decision, log_probs, batch.old_log_probs, advantages, args.clip)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()

        kept = f"{int(decision.keep_mask.sum())}/{batch.batch_size}"
        shown = {  # what the driver reports, where the strategy has it
            "kept tokens": "dataflex/kept_token_fraction",
            "refill rounds": "dataflex/refill/rounds",
            "skipped": "dataflex/prerollout/candidates_skipped",
        }
        extra = "".join(f"  {k} {metrics[m]:.3g}" for k, m in shown.items() if m in metrics)
        print(
            f"step {step:>3}  reward {batch.rewards.mean():.3f}  kept {kept}  "
            f"loss tokens {loss_tokens}{extra}"
        )
        history.append(
            {
                "step": step,
                "rewards": batch.rewards.tolist(),
                "group_ids": batch.group_ids.tolist(),
                "response_lengths": batch.response_length.tolist(),
                "keep_mask": decision.keep_mask.tolist(),
                "kept_tokens": None
                if decision.token_keep_mask is None
                else decision.loss_mask.sum(1).tolist(),
                "loss_tokens": loss_tokens,
                "loss": None if loss is None else float(loss.detach()),
                "proportions": proportions.tolist(),
                "metrics": metrics,
            }
        )
    return model, history


if __name__ == "__main__":
    train(parse_args())
