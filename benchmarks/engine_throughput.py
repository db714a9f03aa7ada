"""Engine throughput: GRPO steps per second, and our group sampler against HF ``generate``.

Both samplers run on the same model, prompts, group size and budget in the same process; the
figure of merit is the ratio of generated tokens per second (ours / HF). One CPU thread.

    .venv/bin/python benchmarks/engine_throughput.py [--policy tiny] [--steps 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config
from dataflex_rl.hosts.engine.policy import load_policy
from dataflex_rl.hosts.engine.sampler import left_pad, sample_groups
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer


def count_tokens(responses: torch.Tensor, eos_id: int) -> int:
    """Generated tokens up to and including the first EOS of each row."""
    eos = responses == eos_id
    before = (eos.long().cumsum(1) - eos.long()) == 0
    return int(before.sum())


def bench_sampler(policy, prompts, G: int, max_new: int, repeats: int) -> dict:
    tok = policy.tokenizer
    ids = [[tok.bos_id] + tok.encode(p) for p in prompts]
    ours, hf = [], []
    for r in range(repeats):
        gen = torch.Generator().manual_seed(r)
        t = time.perf_counter()
        out = sample_groups(
            policy.model,
            ids,
            G,
            max_new,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=1.0,
            generator=gen,
        )
        ours.append(out.num_tokens / (time.perf_counter() - t))
        x, m = left_pad(ids, tok.pad_id)
        torch.manual_seed(r)
        t = time.perf_counter()
        with torch.no_grad():
            o = policy.model.generate(
                input_ids=x,
                attention_mask=m.long(),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                num_return_sequences=G,
                max_new_tokens=max_new,
                eos_token_id=tok.eos_id,
                pad_token_id=tok.pad_id,
            )
        hf.append(count_tokens(o[:, x.shape[1] :], tok.eos_id) / (time.perf_counter() - t))
    o_med, h_med = statistics.median(ours), statistics.median(hf)
    return {"ours_tokens_per_s": o_med, "hf_tokens_per_s": h_med, "ratio": o_med / h_med}


def bench_steps(policy_spec: str, steps: int, strategy: str) -> dict:
    cfg = load_config({"policy": policy_spec, "log": {"progress": False}})
    tr = EmbeddedTrainer(cfg, strategy, seed=0)
    tr.train_step()  # warm-up
    times, parts = [], {"generate": [], "reward": [], "strategy": [], "update": []}
    for _ in range(steps):
        m = tr.train_step()
        times.append(m["time/step_s"])
        for k in parts:
            parts[k].append(m[f"time/{k}_s"])
    mean = statistics.mean(times)
    return {
        "strategy": strategy,
        "step_s": mean,
        "steps_per_s": 1 / mean,
        **{f"{k}_s": statistics.mean(v) for k, v in parts.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--strategies", nargs="+", default=["baseline", "difffilter"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config({"policy": args.policy})
    policy = load_policy(args.policy)
    tasks = tasks_from_config(cfg)
    prompts = [p.prompt for d in tasks.domains for p in tasks.train[d][:6]][:16]
    g = cfg.grpo
    s = bench_sampler(policy, prompts, g.group_size, g.max_new_tokens, args.repeats)
    print(
        f"sampler ({len(prompts)} prompts x G={g.group_size}, <= {g.max_new_tokens} tokens): "
        f"ours {s['ours_tokens_per_s']:.0f} tok/s, HF generate {s['hf_tokens_per_s']:.0f} "
        f"tok/s, ratio {s['ratio']:.2f}x"
    )
    for strat in args.strategies:
        r = bench_steps(args.policy, args.steps, strat)
        print(
            f"GRPO step [{strat}] ({g.prompts_per_step} prompts x {g.group_size}): "
            f"{r['step_s']:.3f} s/step = {r['steps_per_s']:.2f} steps/s "
            f"(generate {r['generate_s']:.3f}, reward {r['reward_s']:.3f}, "
            f"strategy {r['strategy_s']:.3f}, update {r['update_s']:.3f})"
        )


if __name__ == "__main__":
    main()
