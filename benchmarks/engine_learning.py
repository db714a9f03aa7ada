"""Does GRPO learn? 100 steps from the warm start, held-out accuracy before and after, 3 seeds.

A benchmark, not a test (a few CPU-minutes). Seeds run in parallel processes.

    .venv/bin/python benchmarks/engine_learning.py [--steps 100] [--seeds 0 1 2]
        [--strategy baseline] [--config examples/quickstart.yaml] [--out runs/learning]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
from pathlib import Path


def _one(args: tuple) -> dict:
    config_path, strategy, seed, steps, out = args
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.run import run_training

    cfg = load_config(config_path) if config_path else load_config({})
    cfg.eval.every = 0
    cfg.log.plots = False
    return run_training(
        cfg,
        strategy,
        seed=seed,
        steps=steps,
        out_dir=Path(out) / f"{strategy}-s{seed}",
        progress=False,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--strategy", default="baseline")
    ap.add_argument("--config", default=None, help="engine YAML (default: engine defaults)")
    ap.add_argument("--out", default="runs/learning")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    jobs = [(args.config, args.strategy, s, args.steps, args.out) for s in args.seeds]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        runs = pool.map(_one, jobs)
    domains = sorted({k.split("/")[1] for k in runs[0]["final_eval"]} - {"mean"})
    print(f"{args.strategy}: {args.steps} GRPO steps from the warm start, seeds {args.seeds}")
    print(
        f"{'seed':>4}  "
        + "  ".join(f"{d + ' g':>12}" for d in domains)
        + f"  {'mean greedy':>16}  {'mean sampled':>16}"
    )
    deltas = {"greedy": [], "sampled": []}
    for s, r in zip(args.seeds, runs):
        i, f = r["initial_eval"], r["final_eval"]
        cells = [f"{i[f'eval/{d}/greedy']:.3f}->{f[f'eval/{d}/greedy']:.3f}" for d in domains]
        for kind in deltas:
            deltas[kind].append(f[f"eval/mean/{kind}"] - i[f"eval/mean/{kind}"])
        print(
            f"{s:>4}  "
            + "  ".join(f"{c:>12}" for c in cells)
            + f"  {i['eval/mean/greedy']:.3f}->{f['eval/mean/greedy']:.3f}".rjust(18)
            + f"  {i['eval/mean/sampled']:.3f}->{f['eval/mean/sampled']:.3f}".rjust(18)
        )
    for kind, v in deltas.items():
        sd = statistics.stdev(v) if len(v) > 1 else 0.0
        print(
            f"mean {kind} change: {statistics.mean(v):+.3f} (sd {sd:.3f}, "
            f"min {min(v):+.3f}) over {len(v)} seeds"
        )


if __name__ == "__main__":
    main()
