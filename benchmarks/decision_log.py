"""What the decision log costs a step, and how fast a log replays.

Three measurements, each against a reference timed in the same process:

1. **Engine**: the tiny embedded engine (default engine settings: 16 prompts x 8 samples) with
   the decision log on; per step, the time in `DecisionLog.record` (file writes amortized:
   a file every ``--steps-per-file`` steps, the last one flushed by ``close``) against the
   whole step and against the decision (``strategy.decide``). Target: <= 2% of a step.
2. **Large batch**: 512 prompts x 16 samples (8,192 responses, ``--tokens`` per response) built
   like `strategy_overhead.py`'s batches; per step ``decide`` then ``record`` on the same batch
   (as hosts call them: the token summaries reuse the decision's per-row sums); ms per step with
   writes amortized, and the ratio to the decision. Target: <= 5 ms per step.
3. **Replay**: the engine log, the large-batch log and a ``--replay-steps`` log of engine-sized
   steps replayed with the ``--replay`` strategies; logged steps per second (all strategies).

Usage::

    .venv/bin/python benchmarks/decision_log.py                          # all three
    .venv/bin/python benchmarks/decision_log.py --engine-steps 0 --tokens 4096
    .venv/bin/python benchmarks/decision_log.py --clock cpu      # on a busy machine
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # strategy_overhead, when run as a script

import strategy_overhead as so

from dataflex_rl import Strategy
from dataflex_rl.harness.replay.replay import read_log, replay
from dataflex_rl.hosts.common.decision_log import DecisionLog


class Timed:
    """Wraps a callable and sums the ``clock`` time spent in it."""

    def __init__(self, fn, clock) -> None:
        self.fn, self.clock, self.seconds = fn, clock, 0.0

    def __call__(self, *args, **kwargs):
        t0 = self.clock()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += self.clock() - t0


def engine(steps: int, strategy: str, steps_per_file: int, out: Path, clock) -> dict:
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    cfg = load_config(
        {
            "decision_log": {"enabled": True, "steps_per_file": steps_per_file},
            "log": {"progress": False, "plots": False},
        }
    )
    tr = EmbeddedTrainer(cfg, strategy, seed=0, out_dir=out)
    tr.train_step()  # warm-up, not counted
    log, strategy = tr.driver.log, tr.driver.strategy
    log.flush()
    record, decide = Timed(log.record, clock), Timed(strategy.decide, clock)
    log.record, strategy.decide = record, decide  # record's own file writes included
    t0 = clock()
    for _ in range(steps):
        tr.train_step()
    t1 = clock()
    log.flush()  # the last file belongs to these steps
    t2 = clock()
    step_s = t2 - t0
    log_s = record.seconds + (t2 - t1)
    return {
        "steps": steps,
        "step_ms": 1e3 * step_s / steps,
        "decide_ms": 1e3 * decide.seconds / steps,
        "log_ms": 1e3 * log_s / steps,
    }


def large(steps: int, strategy: str, tokens: int, steps_per_file: int, out: Path, clock) -> dict:
    t = so.make_tensors(512, 16, tokens, n_pad=0)
    st = Strategy(so.strategy_spec(strategy), domains=so.DOMAINS)
    log = DecisionLog(
        out,
        domains=so.DOMAINS,
        strategy_spec=st.spec.to_dict(),
        host="bench",
        steps_per_file=steps_per_file,
        settings={"advantage_estimator": "grpo"},
    )
    keys = tuple(f"p{int(g)}" for g in t["group_ids"])
    decide_s = log_s = 0.0
    for s in range(steps + 1):
        batch = so.make_batch(t, step=s).replace(prompt_keys=keys)  # fresh caches per step
        t0 = clock()
        d = st.decide(batch)
        t1 = clock()
        log.record(batch, d, target=st.proportions)
        t2 = clock()
        if s == 0:  # warm-up, not counted
            log.flush()
            continue
        decide_s += t1 - t0
        log_s += t2 - t1
    t0 = clock()
    log.close()
    log_s += clock() - t0
    return {"steps": steps, "decide_ms": 1e3 * decide_s / steps, "log_ms": 1e3 * log_s / steps}


def long_log(steps: int, strategy: str, out: Path) -> Path:
    """A log of ``steps`` engine-sized steps (16 prompts x 8 samples, 10 tokens), fresh random
    rollouts each step, written through `DecisionLog` after ``strategy`` decided."""
    st = Strategy(so.strategy_spec(strategy), domains=so.DOMAINS)
    log = DecisionLog(
        out,
        domains=so.DOMAINS,
        strategy_spec=st.spec.to_dict(),
        host="bench",
        steps_per_file=500,
        settings={"advantage_estimator": "grpo"},
    )
    for s in range(steps):
        t = so.make_tensors(16, 8, 10, seed=s, n_pad=0)
        keys = tuple(f"p{(int(g) * 7919 + s * 16) % 400}" for g in t["group_ids"])
        batch = so.make_batch(t, step=s).replace(prompt_keys=keys)
        log.record(batch, st.decide(batch), target=st.proportions)
    log.close()
    return out


def replay_speed(folder: Path, strategies: list[str], clock) -> dict:
    t0 = clock()
    log = read_log(folder)
    t1 = clock()
    res = replay(log, strategies)
    t2 = clock()
    return {
        "steps": log.num_steps,
        "responses_per_step": int(log.bounds[-1]) // log.num_steps,
        "read_s": t1 - t0,
        "replay_s": t2 - t1,
        "steps_per_s": log.num_steps / (t2 - t1),
        "exact_own": {k: v["exact_steps"] for k, v in res.overall.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engine-steps", type=int, default=20, help="engine steps (0: skip)")
    p.add_argument("--large-steps", type=int, default=20, help="512x16 steps (0: skip)")
    p.add_argument("--tokens", type=int, default=1024, help="response tokens T at 512x16")
    p.add_argument("--strategy", default="difffilter", help="the logged run's strategy")
    p.add_argument("--steps-per-file", type=int, default=10)
    p.add_argument(
        "--replay",
        default="baseline,difffilter,dump_ucb",
        help="strategies replayed on the logs (comma-separated)",
    )
    p.add_argument(
        "--replay-steps",
        type=int,
        default=2000,
        help="steps of the engine-sized log replayed for speed (0: skip)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process time (with --threads 1, barely disturbed by other jobs)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    strategies = args.replay.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.engine_steps:
            e = engine(args.engine_steps, args.strategy, args.steps_per_file, tmp / "engine", clock)
            print(
                f"engine ({args.strategy}, 16x8, {e['steps']} steps): step {e['step_ms']:.1f} "
                f"ms, decide {e['decide_ms']:.2f} ms, log {e['log_ms']:.3f} ms = "
                f"{100 * e['log_ms'] / e['step_ms']:.2f}% of a step, "
                f"{e['log_ms'] / e['decide_ms']:.2f}x the decision"
            )
            r = replay_speed(tmp / "engine" / "decisions", strategies, clock)
            print(
                f"  replay of {r['steps']} steps x {r['responses_per_step']} responses, "
                f"{len(strategies)} strategies: read {r['read_s']:.2f} s, replay "
                f"{r['replay_s']:.2f} s = {r['steps_per_s']:.0f} steps/s; "
                f"exact {r['exact_own']}"
            )
        if args.large_steps:
            g = large(
                args.large_steps,
                args.strategy,
                args.tokens,
                args.steps_per_file,
                tmp / "large",
                clock,
            )
            print(
                f"512x16, T={args.tokens} ({args.strategy}, {g['steps']} steps): decide "
                f"{g['decide_ms']:.1f} ms, log {g['log_ms']:.2f} ms per step (target <= 5), "
                f"{g['log_ms'] / g['decide_ms']:.2f}x the decision"
            )
            r = replay_speed(tmp / "large", strategies, clock)
            print(
                f"  replay of {r['steps']} steps x {r['responses_per_step']} responses, "
                f"{len(strategies)} strategies: read {r['read_s']:.2f} s, replay "
                f"{r['replay_s']:.2f} s = {r['steps_per_s']:.1f} steps/s"
            )
        if args.replay_steps:
            folder = long_log(args.replay_steps, args.strategy, tmp / "long")
            r = replay_speed(folder, strategies, clock)
            print(
                f"replay of {r['steps']} steps x {r['responses_per_step']} responses, "
                f"{len(strategies)} strategies: read {r['read_s']:.2f} s, replay "
                f"{r['replay_s']:.2f} s = {r['steps_per_s']:.0f} steps/s "
                f"({r['steps_per_s'] * len(strategies):.0f} strategy-steps/s); "
                f"exact {r['exact_own']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
