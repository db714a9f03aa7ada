"""What the TRL host adds to a ``GRPOTrainer`` step: stock TRL vs `DataflexGRPOTrainer`.

Both train the tiny offline setup of ``tests/hosts_trl/tiny.py`` (2-layer Qwen2, character
tokenizer, 16 completions per generation batch, 2 micro-batches, fp32 on CPU) for the same
steps, alternating arms ``--repeats`` times so that load from other processes hits both alike.
Reported per arm: the median of TRL's own ``step_time`` (steps after the first), and for the
host its own ``dataflex/host_time_ms`` (intake, gathers, decision, applying it), which is
independent of how fast generation happens to run.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONPATH=src .venv-trl/bin/python \\
        benchmarks/trl_host_overhead.py [--steps 8] [--repeats 3] [--strategies difffilter ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(strategy: str | None, steps: int, out: str) -> tuple[list[float], list[float]]:
    """(step_time of steps 2.., host_time_ms per generation) of one training run."""
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer
    from tests.hosts_trl.tiny import hashed_reward, tiny_dataset, tiny_model, tiny_tokenizer
    from tests.hosts_trl.trainers import grpo_args

    tok = tiny_tokenizer()
    common = dict(model=tiny_model(tok), reward_funcs=hashed_reward, processing_class=tok)
    if strategy is None:
        args = grpo_args(out, GRPOConfig, max_steps=steps)
        trainer = GRPOTrainer(args=args, train_dataset=tiny_dataset(), **common)
    else:
        args = grpo_args(out, DataflexGRPOConfig, max_steps=steps, dataflex={"strategy": strategy})
        trainer = DataflexGRPOTrainer(args=args, train_dataset=tiny_dataset(), **common)
    trainer.train()
    hist = trainer.state.log_history
    step_times = [e["step_time"] for e in hist if "step_time" in e][1:]
    host = [e["dataflex/host_time_ms"] for e in hist if "dataflex/host_time_ms" in e]
    return step_times, host


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--strategies", nargs="+", default=["difffilter", "softmax", "ar", "static"])
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    arms = [None, *a.strategies]
    steps: dict = {s: [] for s in arms}
    host: dict = {s: [] for s in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for s in arms:
                st, h = run(s, a.steps, tmp)
                steps[s] += st
                host[s] += h
    base = statistics.median(steps[None])
    print(f"{'arm':<12} {'step_time ms':>13} {'vs stock':>9} {'host_time ms':>13}")
    for s in arms:
        med = statistics.median(steps[s])
        h = f"{statistics.median(host[s]):13.2f}" if host[s] else f"{'-':>13}"
        print(f"{s or 'stock TRL':<12} {med * 1e3:13.1f} {med / base - 1:+9.1%} {h}")


if __name__ == "__main__":
    main()
